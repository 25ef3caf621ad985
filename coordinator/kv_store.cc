#include "coordinator/kv_store.h"

#include <charconv>

namespace elastra::coordinator {

std::optional<uint64_t> KeyGeneration(const std::string& key) {
  if (key.size() < 3 || key[0] != 'g') return std::nullopt;
  auto slash = key.find('/');
  if (slash == std::string::npos || slash == 1) return std::nullopt;
  uint64_t g = 0;
  auto [ptr, ec] = std::from_chars(key.data() + 1, key.data() + slash, g);
  if (ec != std::errc() || ptr != key.data() + slash) return std::nullopt;
  return g;
}

Status KvStore::Set(const std::string& key, const std::string& value,
                    std::vector<Completion>* done) {
  auto it = data_.find(key);
  size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  size_t next = total_bytes_ - old + key.size() + value.size();
  if (next > kMaxTotalBytes) {
    return ResourceExhaustedError("the key-value store is full (" +
                                  std::to_string(kMaxTotalBytes) + " bytes)");
  }
  total_bytes_ = next;
  data_[key] = value;
  Complete(done);
  return OkStatus();
}

std::optional<std::string> KvStore::Get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

StatusOr<int64_t> KvStore::Add(const std::string& key, int64_t delta,
                               std::vector<Completion>* done) {
  int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& v = it->second;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), current);
    if (ec != std::errc() || ptr != v.data() + v.size()) {
      return InvalidArgumentError("key '" + key + "' does not hold a decimal integer");
    }
  }
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return InvalidArgumentError("adding " + std::to_string(delta) + " to key '" + key +
                                "' overflows");
  }
  ELASTRA_RETURN_IF_ERROR(Set(key, std::to_string(sum), done));
  return sum;
}

Status KvStore::AddWaiter(Waiter waiter) {
  if (waiters_.size() >= kMaxWaiters) {
    return ResourceExhaustedError("too many pending key-value waits");
  }
  waiters_.push_back(std::move(waiter));
  return OkStatus();
}

void KvStore::Complete(std::vector<Completion>* done) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    bool all = true;
    for (const auto& k : it->keys) {
      if (!data_.count(k)) {
        all = false;
        break;
      }
    }
    if (!all) {
      ++it;
      continue;
    }
    Completion c;
    c.waiter = std::move(*it);
    if (c.waiter.is_get && !c.waiter.keys.empty()) c.value = data_[c.waiter.keys[0]];
    if (c.waiter.is_get_many) {
      for (const auto& k : c.waiter.keys) c.values.push_back(data_[k]);
    }
    if (done != nullptr) done->push_back(std::move(c));
    it = waiters_.erase(it);
  }
}

std::vector<KvStore::Completion> KvStore::ExpireWaiters() {
  std::vector<Completion> out;
  const TimePoint now = clock_->Now();
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (now >= it->deadline) {
      Completion c;
      std::string missing;
      for (const auto& k : it->keys) {
        if (!data_.count(k)) {
          missing = k;
          break;
        }
      }
      c.waiter = std::move(*it);
      c.status = TimedOutError("key '" + missing + "' did not appear in time");
      out.push_back(std::move(c));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

void KvStore::DropGenerationsBefore(uint64_t generation) {
  for (auto it = data_.begin(); it != data_.end();) {
    auto g = KeyGeneration(it->first);
    if (g && *g < generation) {
      total_bytes_ -= it->first.size() + it->second.size();
      it = data_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace elastra::coordinator
