#include "coordinator/kv_service.h"

#include <algorithm>

namespace elastra::coordinator {

void KvService::Handle(const std::string& identity, const proto::Envelope& e) {
  using T = proto::MessageType;
  std::vector<KvStore::Completion> done;
  switch (e.type) {
    case T::kKvSet: {
      auto req = outbox_->DecodeOrReply<proto::KvSetRequest>(identity, e);
      if (!req) return;
      Status s = store_.Set(req->key, req->value, &done);
      if (!s.ok()) {
        outbox_->SendError(identity, e.request_id, s);
        return;
      }
      outbox_->Send(identity, T::kKvReply, proto::KvReply{}, e.request_id);
      break;
    }
    case T::kKvGet: {
      auto req = outbox_->DecodeOrReply<proto::KvGetRequest>(identity, e);
      if (!req) return;
      if (auto v = store_.Get(req->key)) {
        proto::KvReply reply;
        reply.value = *v;
        outbox_->Send(identity, T::kKvReply, reply, e.request_id);
      } else {
        Block(identity, e, {req->key}, req->timeout_ms, true);
      }
      break;
    }
    case T::kKvWait: {
      auto req = outbox_->DecodeOrReply<proto::KvWaitRequest>(identity, e);
      if (!req) return;
      std::vector<std::string> missing;
      for (const auto& k : req->keys) {
        if (!store_.Contains(k)) missing.push_back(k);
      }
      if (missing.empty()) {
        outbox_->Send(identity, T::kKvReply, proto::KvReply{}, e.request_id);
      } else {
        Block(identity, e, std::move(missing), req->timeout_ms, false);
      }
      break;
    }
    case T::kKvSetAndGet: {
      auto req = outbox_->DecodeOrReply<proto::KvSetAndGetRequest>(identity, e);
      if (!req) return;
      if (req->set_keys.size() != req->set_values.size()) {
        outbox_->SendError(identity, e.request_id,
                           InvalidArgumentError("KvSetAndGet: " +
                                                std::to_string(req->set_keys.size()) +
                                                " keys but " +
                                                std::to_string(req->set_values.size()) +
                                                " values"));
        return;
      }
      for (size_t i = 0; i < req->set_keys.size(); ++i) {
        Status s = store_.Set(req->set_keys[i], req->set_values[i], &done);
        if (!s.ok()) {
          outbox_->SendError(identity, e.request_id, s);
          Answer(done);
          return;
        }
      }
      const bool all = std::all_of(req->get_keys.begin(), req->get_keys.end(),
                                   [&](const std::string& k) { return store_.Contains(k); });
      if (all) {
        proto::KvValuesReply reply;
        for (const auto& k : req->get_keys) reply.values.push_back(*store_.Get(k));
        outbox_->Send(identity, T::kKvValues, reply, e.request_id);
      } else {
        Block(identity, e, std::move(req->get_keys), req->timeout_ms, false, true);
      }
      break;
    }
    case T::kKvAdd: {
      auto req = outbox_->DecodeOrReply<proto::KvAddRequest>(identity, e);
      if (!req) return;
      auto sum = store_.Add(req->key, req->delta, &done);
      if (!sum.ok()) {
        outbox_->SendError(identity, e.request_id, sum.status());
        return;
      }
      proto::KvReply reply;
      reply.number = *sum;
      outbox_->Send(identity, T::kKvReply, reply, e.request_id);
      break;
    }
    default:
      break;
  }
  Answer(done);
}

void KvService::Block(const std::string& identity, const proto::Envelope& e,
                      std::vector<std::string> keys, int64_t timeout_ms, bool is_get,
                      bool is_get_many) {
  if (timeout_ms <= 0) {
    outbox_->SendError(identity, e.request_id,
                       TimedOutError("key '" + keys[0] + "' does not exist (timeout 0)"));
    return;
  }
  KvStore::Waiter w;
  w.identity = identity;
  w.sender = e.sender;
  w.request_id = e.request_id;
  w.keys = std::move(keys);
  w.is_get = is_get;
  w.is_get_many = is_get_many;
  w.deadline = clock_->Now() + Duration(std::min(timeout_ms, kMaxTimeoutMs));
  std::vector<KvStore::Completion> done;
  Status s = store_.AddWaiter(std::move(w), &done);
  if (!s.ok()) outbox_->SendError(identity, e.request_id, s);
  Answer(done);
}

void KvService::Tick() {
  auto expired = store_.ExpireWaiters();
  Answer(expired);
}

void KvService::OnCommitted(uint64_t generation) {
  if (generation >= 2) store_.DropGenerationsBefore(generation - 1);
}

void KvService::Answer(std::vector<KvStore::Completion>& done) {
  for (auto& c : done) {
    if (!c.status.ok()) {
      outbox_->SendError(c.waiter.identity, c.waiter.request_id, c.status);
      continue;
    }
    if (c.waiter.is_get_many) {
      proto::KvValuesReply reply;
      reply.values = std::move(c.values);
      outbox_->Send(c.waiter.identity, proto::MessageType::kKvValues, reply, c.waiter.request_id);
      continue;
    }
    proto::KvReply reply;
    reply.value = c.value;
    outbox_->Send(c.waiter.identity, proto::MessageType::kKvReply, reply, c.waiter.request_id);
  }
}

}  // namespace elastra::coordinator
