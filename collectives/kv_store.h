// KeyValueStore: the rendezvous store communicators are built over. In production it is the
// coordinator's store (worker/coordinator_store.h); tests use InMemoryKeyValueStore with ranks as
// threads. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "elastra/status.h"

namespace elastra {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists; kTimedOut after `timeout`.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Blocks until every key exists; kTimedOut after `timeout`.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer at `key` (0 when absent) and returns the new value.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
  // Sets every (key, value) of `sets`, then blocks until every key of `gets` exists and returns
  // their values in the order of `gets`; kTimedOut after `timeout`. A communicator's rendezvous in
  // one call: this default is a Set per key, a Wait, and a Get per key; the coordinator's store
  // does it in one round trip (KvSetAndGet). Calling it again with the same sets is harmless.
  virtual StatusOr<std::vector<std::string>> SetAndGet(
      const std::vector<std::pair<std::string, std::string>>& sets,
      const std::vector<std::string>& gets, std::chrono::milliseconds timeout);
};

// What is left until `deadline`, rounded up to the millisecond and at least 1 ms: the timeout of
// a store call (or a poll) bounded by that deadline.
std::chrono::milliseconds TimeoutUntil(std::chrono::steady_clock::time_point deadline);

// Reads `keys` from `store`, waiting in slices of at most `slice` so that `interrupted` is looked
// at between them (a rendezvous that a recovery or an abort has doomed stops within a slice):
// kAborted once it returns true, kTimedOut when `deadline` passes first, the store's error when
// it fails otherwise. The values in the order of `keys`.
StatusOr<std::vector<std::string>> GetInSlices(KeyValueStore* store,
                                               const std::vector<std::string>& keys,
                                               std::chrono::steady_clock::time_point deadline,
                                               std::chrono::milliseconds slice,
                                               const std::function<bool()>& interrupted);

// A store in this process's memory, for tests that run ranks as threads.
class InMemoryKeyValueStore : public KeyValueStore {
 public:
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace elastra
