// KvStore: the rendezvous key-value store (set, blocking get, wait for keys, atomic add), with
// pending waiters that complete when their keys appear or fail at their deadline. Keys of the form
// "g<N>/..." belong to generation N and are dropped when they grow old. Thread-compatible.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
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

  // Queues a waiter whose keys are not all present yet. kResourceExhausted when too many wait.
  Status AddWaiter(Waiter waiter);
  // Waiters whose deadline has passed, answered kTimedOut.
  std::vector<Completion> ExpireWaiters();
  size_t waiters() const { return waiters_.size(); }

  // Drops keys "g<N>/..." with N < `generation`.
  void DropGenerationsBefore(uint64_t generation);

  size_t size() const { return data_.size(); }

 private:
  void Complete(std::vector<Completion>* done);

  Clock* clock_;
  std::map<std::string, std::string> data_;
  size_t total_bytes_ = 0;
  std::list<Waiter> waiters_;
};

// The generation a key belongs to ("g12/x" -> 12), or nullopt.
std::optional<uint64_t> KeyGeneration(const std::string& key);

}  // namespace elastra::coordinator
