#include "collectives/gloo/gloo_store.h"

namespace elastra {
namespace {

// gloo passes kNoTimeout (0) to mean "no deadline"; our store wants a finite one.
constexpr std::chrono::milliseconds kVeryLong = std::chrono::hours(24);

[[noreturn]] void Throw(const Status& status) { throw StoreError(status); }

}  // namespace

GlooStore::GlooStore(KeyValueStore* store, std::chrono::milliseconds timeout)
    : store_(store), timeout_(timeout) {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  Status status = store_->Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status);
}

std::vector<char> GlooStore::get(const std::string& key) {
  StatusOr<std::string> value = store_->Get(key, timeout_);
  if (!value.ok()) Throw(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  Status status = store_->Wait(keys, timeout.count() <= 0 ? kVeryLong : timeout);
  if (!status.ok()) Throw(status);
}

}  // namespace elastra
