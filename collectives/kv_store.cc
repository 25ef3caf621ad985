#include "collectives/kv_store.h"

#include <algorithm>
#include <charconv>

namespace elastra {

StatusOr<std::vector<std::string>> KeyValueStore::SetAndGet(
    const std::vector<std::pair<std::string, std::string>>& sets,
    const std::vector<std::string>& gets, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& [key, value] : sets) ELASTRA_RETURN_IF_ERROR(Set(key, value));
  std::vector<std::string> values;
  if (gets.empty()) return values;
  ELASTRA_RETURN_IF_ERROR(Wait(gets, timeout));
  values.reserve(gets.size());
  for (const std::string& key : gets) {
    // The keys exist: a get returns at once (the bound only matters to a misbehaving store).
    StatusOr<std::string> value = Get(key, TimeoutUntil(deadline));
    if (!value.ok()) return value.status();
    values.push_back(std::move(value).value());
  }
  return values;
}

std::chrono::milliseconds TimeoutUntil(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

StatusOr<std::vector<std::string>> GetInSlices(KeyValueStore* store,
                                               const std::vector<std::string>& keys,
                                               std::chrono::steady_clock::time_point deadline,
                                               std::chrono::milliseconds slice,
                                               const std::function<bool()>& interrupted) {
  for (;;) {
    if (interrupted && interrupted()) return AbortedError("the rendezvous was interrupted");
    if (std::chrono::steady_clock::now() >= deadline) {
      return TimedOutError("the rendezvous's keys did not appear in time");
    }
    StatusOr<std::vector<std::string>> got =
        store->SetAndGet({}, keys, std::min(TimeoutUntil(deadline), slice));
    if (got.ok() || got.status().code() != StatusCode::kTimedOut) return got;
  }
}

Status InMemoryKeyValueStore::Set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  cv_.notify_all();
  return OkStatus();
}

StatusOr<std::string> InMemoryKeyValueStore::Get(const std::string& key,
                                                 std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; })) {
    return TimedOutError("key '" + key + "' did not appear within " +
                         std::to_string(timeout.count()) + " ms");
  }
  return data_[key];
}

Status InMemoryKeyValueStore::Wait(const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto all = [&] {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) return false;
    }
    return true;
  };
  if (!cv_.wait_for(lock, timeout, all)) {
    return TimedOutError("keys did not appear within " + std::to_string(timeout.count()) + " ms");
  }
  return OkStatus();
}

StatusOr<int64_t> InMemoryKeyValueStore::Add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it != data_.end()) {
      const std::string& s = it->second;
      auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
      if (ec != std::errc() || ptr != s.data() + s.size()) {
        return InvalidArgumentError("key '" + key + "' does not hold an integer");
      }
    }
    value += delta;
    data_[key] = std::to_string(value);
  }
  cv_.notify_all();
  return value;
}

}  // namespace elastra
