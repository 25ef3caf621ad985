// FileKeyValueStore: a KeyValueStore in a directory, shared by forked processes (the in-memory
// store cannot cross fork). Test-only: polls the filesystem. Thread- and process-safe.
#pragma once

#include <string>

#include "collectives/kv_store.h"

namespace elastra::testing {

class FileKeyValueStore : public KeyValueStore {
 public:
  // `dir` must exist.
  explicit FileKeyValueStore(std::string dir) : dir_(std::move(dir)) {}

  // Atomic: written to a temporary name, then renamed.
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  // Serialized across processes with flock(2).
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  std::string PathOf(const std::string& key) const;
  bool Read(const std::string& key, std::string* value) const;

  const std::string dir_;
};

}  // namespace elastra::testing
