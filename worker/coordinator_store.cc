#include "worker/coordinator_store.h"

namespace elastra {

using proto::MessageType;

Status CoordinatorStore::Set(const std::string& key, const std::string& value) {
  proto::KvSetRequest req{key, value};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvSet, req, kSlack * 5);
  return reply.status();
}

namespace {

// Repeats `attempt(slice)` until it does not time out, the deadline passes, or `cancelled` says so.
template <class T, class Fn>
StatusOr<T> Sliced(std::chrono::milliseconds timeout, std::chrono::milliseconds slice,
                   const std::function<bool()>& cancelled, const std::string& what, Fn&& attempt) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (cancelled && cancelled()) {
      return AbortedError(what + ": cancelled (the generation was abandoned)");
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return TimedOutError(what + " did not complete within " + std::to_string(timeout.count()) +
                           " ms");
    }
    StatusOr<T> r = attempt(std::min(left, slice));
    if (r.ok() || r.status().code() != StatusCode::kTimedOut) return r;
  }
}

}  // namespace

StatusOr<std::string> CoordinatorStore::Get(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  return Sliced<std::string>(
      timeout, kSlice, cancelled_, "rendezvous get of '" + key + "'",
      [&](std::chrono::milliseconds slice) -> StatusOr<std::string> {
        proto::KvGetRequest req{key, slice.count()};
        auto reply = client_->Call<proto::KvReply>(MessageType::kKvGet, req, slice + kSlack);
        if (!reply.ok()) return reply.status();
        return std::move(reply->value);
      });
}

Status CoordinatorStore::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  return Sliced<bool>(timeout, kSlice, cancelled_, "rendezvous wait",
                      [&](std::chrono::milliseconds slice) -> StatusOr<bool> {
                        proto::KvWaitRequest req{keys, slice.count()};
                        auto reply = client_->Call<proto::KvReply>(MessageType::kKvWait, req,
                                                                   slice + kSlack);
                        if (!reply.ok()) return reply.status();
                        return true;
                      })
      .status();
}

StatusOr<std::vector<std::string>> CoordinatorStore::SetAndGet(
    const std::vector<std::pair<std::string, std::string>>& sets,
    const std::vector<std::string>& gets, std::chrono::milliseconds timeout) {
  proto::KvSetAndGetRequest req;
  for (const auto& [key, value] : sets) {
    req.set_keys.push_back(key);
    req.set_values.push_back(value);
  }
  req.get_keys = gets;
  return Sliced<std::vector<std::string>>(
      timeout, kSlice, cancelled_, "rendezvous set-and-get",
      [&](std::chrono::milliseconds slice) -> StatusOr<std::vector<std::string>> {
        req.timeout_ms = slice.count();
        auto reply = client_->Call<proto::KvValuesReply>(MessageType::kKvSetAndGet, req,
                                                         slice + kSlack);
        if (!reply.ok()) return reply.status();
        if (reply->values.size() != gets.size()) {
          return ProtocolMismatchError("KvSetAndGet: " + std::to_string(gets.size()) +
                                       " keys asked, " + std::to_string(reply->values.size()) +
                                       " values");
        }
        return std::move(reply->values);
      });
}

StatusOr<int64_t> CoordinatorStore::Add(const std::string& key, int64_t delta) {
  proto::KvAddRequest req{key, delta};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvAdd, req, kSlack * 5);
  if (!reply.ok()) return reply.status();
  return reply->number;
}

}  // namespace elastra
