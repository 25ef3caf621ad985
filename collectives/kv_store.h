// KeyValueStore: the rendezvous store communicators are built over. In production it is the
// coordinator's store (worker/coordinator_store.h); tests use InMemoryKeyValueStore with ranks as
// threads. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
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
};

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
