// KvStore: the rendezvous key-value store (set, blocking get, wait for keys, atomic add), with
// pending waiters that complete when their keys appear or fail at their deadline. Keys of the form
// "g<N>/..." belong to generation N and are dropped when they grow old. Thread-compatible.
//
// Cost. In a generation's rendezvous every rank waits for its peers' keys while the others set
// theirs, so at N ranks about N waiters are pending while about N log N keys are set. Each
// pending waiter is therefore indexed under the keys it still misses, with the count of them: a
// new key completes exactly the waiters that wait for it, in O(log) per waiter, instead of a scan
// of every pending waiter (O(N^2 log N) per rendezvous). Deadlines are kept in order, so a tick
// touches only the waiters that expire.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "elastra/status.h"

namespace elastra::coordinator {

class KvStore {
 public:
  // Who waits and how to answer: opaque to the store.
  struct Waiter {
    std::string identity;
    std::string sender;
    uint64_t request_id = 0;
    std::vector<std::string> keys;  // all must exist
    bool is_get = false;            // answer with the value of keys[0]
    bool is_get_many = false;       // answer with the values of every key, in order
    TimePoint deadline{};
  };
  struct Completion {
    Waiter waiter;
    Status status;      // OK, or kTimedOut
    std::string value;  // for a get
    std::vector<std::string> values;  // for a get of many
  };

  // Bounds against a hostile or buggy client: total bytes stored and waiters pending.
  static constexpr size_t kMaxTotalBytes = 256u << 20;
  static constexpr size_t kMaxWaiters = 100000;

  explicit KvStore(Clock* clock) : clock_(clock) {}

  // Stores `value` and returns the waiters it completes. kResourceExhausted past kMaxTotalBytes.
  Status Set(const std::string& key, const std::string& value, std::vector<Completion>* done);
  std::optional<std::string> Get(const std::string& key) const;
  bool Contains(const std::string& key) const { return data_.count(key) > 0; }
  // Adds `delta` to the decimal number stored at `key` (absent: 0) and returns the sum.
  // kInvalidArgument when the stored value is not a decimal integer.
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::vector<Completion>* done);

  // Queues a waiter until its keys are all present (one that misses none completes at once, into
  // `done`). kResourceExhausted when too many wait.
  Status AddWaiter(Waiter waiter, std::vector<Completion>* done);
  // Waiters whose deadline has passed, answered kTimedOut, in the order they were added.
  std::vector<Completion> ExpireWaiters();
  size_t waiters() const { return pending_.size(); }

  // Drops keys "g<N>/..." with N < `generation` (a pending waiter waits for such a key again).
  void DropGenerationsBefore(uint64_t generation);

  size_t size() const { return data_.size(); }

 private:
  struct Pending {
    Waiter waiter;
    size_t missing = 0;  // distinct keys of the waiter not present
    std::multimap<TimePoint, uint64_t>::iterator deadline;
  };

  // Counts `key` present for every waiter that misses it; completes those that miss nothing more.
  void KeyAppeared(const std::string& key, std::vector<Completion>* done);
  // Indexes `id` under each of its keys that is not present; returns how many distinct ones.
  size_t IndexMissing(uint64_t id, const Waiter& waiter);
  Completion Finish(uint64_t id, Status status);

  Clock* clock_;
  std::unordered_map<std::string, std::string> data_;
  size_t total_bytes_ = 0;
  uint64_t next_id_ = 0;  // ids follow the order waiters were added
  std::unordered_map<uint64_t, Pending> pending_;
  std::unordered_map<std::string, std::set<uint64_t>> waiting_for_;  // missing key -> waiters
  std::multimap<TimePoint, uint64_t> deadlines_;
};

// The generation a key belongs to ("g12/x" -> 12), or nullopt.
std::optional<uint64_t> KeyGeneration(const std::string& key);

}  // namespace elastra::coordinator
