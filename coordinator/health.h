// HealthMonitor: heartbeat deadlines, as Ray's GCS health-check manager keeps them. Time comes from
// an injected monotonic Clock so tests step it. It watches slots, dense numbers its owner gives
// what it watches (Membership's WorkerInfo::slot for the workers, a host's position for the
// agents): the last beat of each is an entry of a flat array, 8 bytes a slot (128 KB at 16,384
// workers, held in a core's L2 cache), so a beat and its expiry each read one entry and hash
// nothing. A beat costs O(1) (that entry and a queue append) and TakeExpired
// O(beats since the last call), not O(watched): the beats wait in a queue in time order, and one
// that a later beat of the same slot superseded is dropped when it reaches the front
// (docs/scale.md). Thread-compatible.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace elastra::coordinator {

class HealthMonitor {
 public:
  // `clock` is not owned and must outlive the monitor.
  HealthMonitor(Clock* clock, Duration timeout) : clock_(clock), timeout_(timeout) {}

  // Starts watching `slot` (or refreshes its deadline). A slot stands for whatever holds it: a
  // worker that takes over a slot is watched from its own first beat.
  void Beat(uint32_t slot);
  // Starts loading `slot`'s entry, for a beat soon (CoordinatorCore::PrefetchAhead).
  void Prefetch(uint32_t slot) const {
    if (slot < last_.size()) __builtin_prefetch(&last_[slot]);
  }
  // Stops watching `slot` (its worker finished, is leaving, or was removed). Any slot may be given.
  void Forget(uint32_t slot);
  bool Watching(uint32_t slot) const { return slot < last_.size() && last_[slot] != kNotWatched; }

  // The slots whose last beat is older than the timeout, in increasing order; they are no longer
  // watched. The owner finds what holds them (Membership::AtSlot, HostTable::hosts()).
  std::vector<uint32_t> TakeExpired();

  // Milliseconds since the last beat of `slot`, -1 when not watched.
  int64_t MillisSinceLast(uint32_t slot) const;

  Duration timeout() const { return timeout_; }

 private:
  static constexpr TimePoint kNotWatched = TimePoint::min();

  Clock* clock_;
  Duration timeout_;
  std::vector<TimePoint> last_;  // by slot: its last beat, kNotWatched when not watched
  std::deque<std::pair<TimePoint, uint32_t>> beats_;  // in time order; some superseded
};

}  // namespace elastra::coordinator
