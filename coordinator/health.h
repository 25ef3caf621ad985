// HealthMonitor: heartbeat deadlines, as Ray's GCS health-check manager keeps them. Time comes from
// an injected monotonic Clock so tests step it. A beat costs O(1) (a lookup in a flat table,
// common/id_map.h, and a queue append) and
// TakeExpired O(beats since the last call), not O(watched): the beats wait in a queue in time order,
// and one that a later beat of the same id superseded is dropped when it reaches the front
// (docs/scale.md). Thread-compatible.
#pragma once

#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id_map.h"

namespace elastra::coordinator {

class HealthMonitor {
 public:
  // `clock` is not owned and must outlive the monitor.
  HealthMonitor(Clock* clock, Duration timeout) : clock_(clock), timeout_(timeout) {}

  // Starts watching `id` (or refreshes its deadline).
  void Beat(const std::string& id);
  // Stops watching `id` (finished, leaving, removed).
  void Forget(const std::string& id);
  bool Watching(const std::string& id) const { return last_.Find(id) != nullptr; }

  // The ids whose last beat is older than the timeout, sorted; they are no longer watched.
  std::vector<std::string> TakeExpired();

  // Milliseconds since the last beat of `id`, -1 when not watched.
  int64_t MillisSinceLast(const std::string& id) const;

  Duration timeout() const { return timeout_; }

 private:
  Clock* clock_;
  Duration timeout_;
  struct Last {
    std::string id;
    TimePoint at{};
  };
  IdMap<Last> last_;  // the last beat of each watched id
  std::deque<std::pair<TimePoint, std::string>> beats_;  // in time order; some superseded
};

}  // namespace elastra::coordinator
