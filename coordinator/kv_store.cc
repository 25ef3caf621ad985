#include "coordinator/kv_store.h"

#include <algorithm>
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
  const size_t old = it == data_.end() ? 0 : key.size() + it->second.size();
  const size_t next = total_bytes_ - old + key.size() + value.size();
  if (next > kMaxTotalBytes) {
    return ResourceExhaustedError("the key-value store is full (" +
                                  std::to_string(kMaxTotalBytes) + " bytes)");
  }
  total_bytes_ = next;
  if (it != data_.end()) {
    it->second = value;  // a pending waiter misses some key, never one that is present
    return OkStatus();
  }
  data_.emplace(key, value);
  KeyAppeared(key, done);
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

Status KvStore::AddWaiter(Waiter waiter, std::vector<Completion>* done) {
  if (pending_.size() >= kMaxWaiters) {
    return ResourceExhaustedError("too many pending key-value waits");
  }
  const uint64_t id = next_id_++;
  const size_t missing = IndexMissing(id, waiter);
  // Among equal deadlines a multimap keeps the order of insertion.
  auto deadline = deadlines_.emplace(waiter.deadline, id);
  pending_.emplace(id, Pending{std::move(waiter), missing, deadline});
  if (missing == 0) {
    Completion c = Finish(id, OkStatus());
    if (done != nullptr) done->push_back(std::move(c));
  }
  return OkStatus();
}

size_t KvStore::IndexMissing(uint64_t id, const Waiter& waiter) {
  size_t missing = 0;
  for (const auto& k : waiter.keys) {
    if (data_.count(k) == 0 && waiting_for_[k].insert(id).second) ++missing;
  }
  return missing;
}

void KvStore::KeyAppeared(const std::string& key, std::vector<Completion>* done) {
  auto w = waiting_for_.find(key);
  if (w == waiting_for_.end()) return;
  const std::set<uint64_t> ids = std::move(w->second);
  waiting_for_.erase(w);
  for (uint64_t id : ids) {  // ascending: the order the waiters were added
    if (--pending_.at(id).missing > 0) continue;
    Completion c = Finish(id, OkStatus());
    if (done != nullptr) done->push_back(std::move(c));
  }
}

KvStore::Completion KvStore::Finish(uint64_t id, Status status) {
  auto it = pending_.find(id);
  Completion c;
  c.waiter = std::move(it->second.waiter);
  c.status = std::move(status);
  deadlines_.erase(it->second.deadline);
  pending_.erase(it);
  if (c.status.ok()) {
    if (c.waiter.is_get && !c.waiter.keys.empty()) c.value = data_.at(c.waiter.keys[0]);
    if (c.waiter.is_get_many) {
      c.values.reserve(c.waiter.keys.size());
      for (const auto& k : c.waiter.keys) c.values.push_back(data_.at(k));
    }
    return c;
  }
  for (const auto& k : c.waiter.keys) {  // a waiter that gives up is indexed under what it missed
    auto w = waiting_for_.find(k);
    if (w == waiting_for_.end()) continue;
    w->second.erase(id);
    if (w->second.empty()) waiting_for_.erase(w);
  }
  return c;
}

std::vector<KvStore::Completion> KvStore::ExpireWaiters() {
  const TimePoint now = clock_->Now();
  std::vector<uint64_t> expired;
  for (auto it = deadlines_.begin(); it != deadlines_.end() && it->first <= now; ++it) {
    expired.push_back(it->second);
  }
  std::sort(expired.begin(), expired.end());
  std::vector<Completion> out;
  out.reserve(expired.size());
  for (uint64_t id : expired) {
    std::string missing;
    for (const auto& k : pending_.at(id).waiter.keys) {
      if (data_.count(k) == 0) {
        missing = k;
        break;
      }
    }
    out.push_back(Finish(id, TimedOutError("key '" + missing + "' did not appear in time")));
  }
  return out;
}

void KvStore::DropGenerationsBefore(uint64_t generation) {
  bool dropped = false;
  for (auto it = data_.begin(); it != data_.end();) {
    auto g = KeyGeneration(it->first);
    if (g && *g < generation) {
      total_bytes_ -= it->first.size() + it->second.size();
      it = data_.erase(it);
      dropped = true;
    } else {
      ++it;
    }
  }
  // A pending waiter that counted a dropped key present misses it again.
  if (!dropped) return;
  for (auto& [id, p] : pending_) p.missing += IndexMissing(id, p.waiter);
}

}  // namespace elastra::coordinator
