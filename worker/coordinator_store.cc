#include "worker/coordinator_store.h"

namespace elastra {

using proto::MessageType;

Status CoordinatorStore::Set(const std::string& key, const std::string& value) {
  proto::KvSetRequest req{key, value};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvSet, req, kSlack * 5);
  return reply.status();
}

StatusOr<std::string> CoordinatorStore::Get(const std::string& key,
                                            std::chrono::milliseconds timeout) {
  proto::KvGetRequest req{key, timeout.count()};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvGet, req, timeout + kSlack);
  if (!reply.ok()) return reply.status();
  return std::move(reply->value);
}

Status CoordinatorStore::Wait(const std::vector<std::string>& keys,
                              std::chrono::milliseconds timeout) {
  proto::KvWaitRequest req{keys, timeout.count()};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvWait, req, timeout + kSlack);
  return reply.status();
}

StatusOr<int64_t> CoordinatorStore::Add(const std::string& key, int64_t delta) {
  proto::KvAddRequest req{key, delta};
  auto reply = client_->Call<proto::KvReply>(MessageType::kKvAdd, req, kSlack * 5);
  if (!reply.ok()) return reply.status();
  return reply->number;
}

}  // namespace elastra
