#include "tests/worker/fake_coordinator.h"

#include <zmq.h>

#include <algorithm>
#include <cstring>

namespace elastra::testing {
namespace {

using proto::MessageType;
using SteadyClock = std::chrono::steady_clock;

}  // namespace

FakeCoordinator::FakeCoordinator(Options options) : options_(std::move(options)) {
  server_ = GenerateKeyPair().value();
  client_ = GenerateKeyPair().value();
  ctx_ = zmq_ctx_new();
  router_ = zmq_socket(ctx_, ZMQ_ROUTER);
  int one = 1, zero = 0;
  zmq_setsockopt(router_, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(router_, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
  zmq_setsockopt(router_, ZMQ_CURVE_SERVER, &one, sizeof(one));
  zmq_setsockopt(router_, ZMQ_CURVE_SECRETKEY, server_.secret_key.data(), 40);
  if (zmq_bind(router_, "tcp://127.0.0.1:*") != 0) {
    throw std::runtime_error(std::string("FakeCoordinator: bind: ") + zmq_strerror(zmq_errno()));
  }
  char endpoint[256];
  size_t len = sizeof(endpoint);
  zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, endpoint, &len);
  address_ = std::string(endpoint, strnlen(endpoint, len));
  thread_ = std::thread([this] { Loop(); });
}

FakeCoordinator::~FakeCoordinator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  thread_.join();
  zmq_close(router_);
  zmq_ctx_term(ctx_);
}

WorkerOptions FakeCoordinator::WorkerOptionsFor(const std::string& worker_id) const {
  WorkerOptions o;
  o.coordinator = address_;
  o.job = options_.job;
  o.worker_id = worker_id;
  o.host = "fakehost";
  o.server_public_key = server_.public_key;
  o.public_key = client_.public_key;
  o.secret_key = client_.secret_key;
  o.heartbeat_interval = options_.heartbeat_interval;
  return o;
}

void FakeCoordinator::SetSilent(bool silent) {
  std::lock_guard<std::mutex> lock(mu_);
  silent_ = silent;
}

void FakeCoordinator::SetAcks(bool acks) {
  std::lock_guard<std::mutex> lock(mu_);
  options_.acks = acks;
}

void FakeCoordinator::SetGeneration(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  generation_ = generation;
}

void FakeCoordinator::SetStatus(std::optional<proto::JobStatus> status) {
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(status);
}

proto::JobStatus FakeCoordinator::DefaultStatus(proto::JobState state) const {
  std::lock_guard<std::mutex> lock(mu_);
  proto::JobStatus s;
  s.job = options_.job;
  s.state = state;
  s.generation = generation_;
  for (size_t i = 0; i < joined_.size(); ++i) {
    proto::WorkerStatus w;
    w.id = joined_[i];
    w.state = proto::WorkerState::kMember;
    w.rank = static_cast<int32_t>(i);
    s.workers.push_back(w);
  }
  return s;
}

proto::NewGeneration FakeCoordinator::SoloGeneration(const std::string& worker_id,
                                                     uint64_t generation, int64_t restore_step,
                                                     const StateSpec& state) {
  proto::Member me;
  me.worker_id = worker_id;
  me.host = "fakehost";
  me.has_state = true;
  proto::NewGeneration g;
  g.generation = generation;
  // Addressed as the coordinator addresses it: the state move planned from the (one-row) tables.
  const Layout solo;
  const MoveAddresser moves(state, solo, {me}, solo, {me},
                            PlanStateMove(state, solo, {me}, solo, {me}), proto::MovePlan::kMove);
  moves.Address(worker_id, &g);
  g.scalars_source = moves.ScalarsSource();
  g.restore_step = restore_step;
  g.source_rank = 0;
  g.kv_prefix = "g" + std::to_string(generation) + "/";
  g.reason = generation == 1 ? proto::GenerationReason::kStart : proto::GenerationReason::kFailure;
  return g;
}

std::optional<proto::Envelope> FakeCoordinator::WaitFor(MessageType type, int nth,
                                                        std::optional<bool> heard,
                                                        std::chrono::milliseconds bound) {
  std::optional<proto::Envelope> found;
  WaitUntil(
      [&](const std::vector<Received>& all) {
        int seen = 0;
        for (const auto& r : all) {
          if (r.envelope.type != type || (heard && r.heard != *heard)) continue;
          if (++seen == nth) {
            found = r.envelope;
            return true;
          }
        }
        return false;
      },
      bound);
  return found;
}

bool FakeCoordinator::WaitUntil(const std::function<bool(const std::vector<Received>&)>& done,
                                std::chrono::milliseconds bound) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, bound, [&] { return done(received_); });
}

std::vector<FakeCoordinator::Received> FakeCoordinator::All(MessageType type) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Received> out;
  for (const auto& r : received_) {
    if (r.envelope.type == type) out.push_back(r);
  }
  return out;
}

void FakeCoordinator::PushFrame(const std::string& worker_id, MessageType type,
                                const std::string& payload, uint64_t generation) {
  proto::Envelope e;
  e.type = type;
  e.job = options_.job;
  e.generation = generation;
  e.sender = "coordinator";
  e.payload = payload;
  std::lock_guard<std::mutex> lock(mu_);
  outbox_.emplace_back(worker_id, std::move(e));
}

void FakeCoordinator::SendFrame(const std::string& identity, const proto::Envelope& e) {
  const std::string frame = proto::EncodeEnvelope(e);
  zmq_send(router_, identity.data(), identity.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(router_, frame.data(), frame.size(), ZMQ_DONTWAIT);
}

void FakeCoordinator::Reply(const std::string& identity, const proto::Envelope& request,
                            MessageType type, const std::string& payload) {
  proto::Envelope e;
  e.type = type;
  e.job = options_.job;
  e.generation = generation_;
  e.sender = "coordinator";
  e.request_id = request.request_id;
  e.payload = payload;
  SendFrame(identity, e);
}

void FakeCoordinator::Loop() {
  for (;;) {
    std::vector<std::pair<std::string, proto::Envelope>> pushes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (!silent_) {
        pushes.swap(outbox_);
        ServeParkedKv(false);
      }
    }
    for (auto& [worker_id, e] : pushes) {
      std::string identity;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = identities_.find(worker_id);
        if (it != identities_.end()) identity = it->second;
      }
      if (!identity.empty()) SendFrame(identity, e);
    }
    zmq_pollitem_t item{router_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, 5) <= 0) continue;
    for (;;) {
      zmq_msg_t id_msg, body;
      zmq_msg_init(&id_msg);
      if (zmq_msg_recv(&id_msg, router_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&id_msg);
        break;
      }
      std::string identity(static_cast<const char*>(zmq_msg_data(&id_msg)), zmq_msg_size(&id_msg));
      zmq_msg_close(&id_msg);
      zmq_msg_init(&body);
      zmq_msg_recv(&body, router_, 0);
      auto decoded = proto::DecodeEnvelope(
          std::string_view(static_cast<const char*>(zmq_msg_data(&body)), zmq_msg_size(&body)));
      zmq_msg_close(&body);
      if (decoded.ok()) Handle(identity, std::move(decoded).value());
    }
  }
}

void FakeCoordinator::Handle(const std::string& identity, proto::Envelope e) {
  std::unique_lock<std::mutex> lock(mu_);
  received_.push_back({e, !silent_});
  cv_.notify_all();
  if (silent_) return;
  identities_[e.sender] = identity;
  switch (e.type) {
    case MessageType::kJoin: {
      auto join = proto::DecodePayload<proto::JoinRequest>(e.payload);
      if (!join.ok()) return;
      if (std::find(joined_.begin(), joined_.end(), join->worker_id) == joined_.end()) {
        joined_.push_back(join->worker_id);
      }
      joined_state_ = join->state;
      proto::JoinReply reply;
      reply.worker_id = join->worker_id;
      reply.generation = generation_;
      reply.heartbeat_interval_ms = options_.heartbeat_interval.count();
      reply.heartbeat_timeout_ms = options_.heartbeat_timeout.count();
      Reply(identity, e, MessageType::kJoinReply, proto::EncodePayload(reply));
      if (options_.form_on_join && generation_ == 0) {
        generation_ = 1;
        proto::Envelope g;
        g.type = MessageType::kNewGeneration;
        g.job = options_.job;
        g.sender = "coordinator";
        g.payload = proto::EncodePayload(SoloGeneration(join->worker_id, 1, 0, join->state));
        SendFrame(identity, g);
      }
      return;
    }
    case MessageType::kHeartbeat:
      if (options_.acks) {
        proto::Envelope ack;
        ack.type = MessageType::kHeartbeatAck;
        ack.job = options_.job;
        ack.sender = "coordinator";
        ack.payload = proto::EncodePayload(proto::HeartbeatAck{generation_});
        SendFrame(identity, ack);
      }
      return;
    case MessageType::kLeave:
      Reply(identity, e, MessageType::kAck, proto::EncodePayload(proto::Ack{}));
      return;
    case MessageType::kStatusRequest: {
      proto::StatusReply reply;
      if (status_) {
        reply.status = *status_;
      } else {
        lock.unlock();
        reply.status = DefaultStatus();
        lock.lock();
      }
      Reply(identity, e, MessageType::kStatusReply, proto::EncodePayload(reply));
      return;
    }
    case MessageType::kKvSet: {
      auto req = proto::DecodePayload<proto::KvSetRequest>(e.payload);
      if (!req.ok()) return;
      kv_[req->key] = req->value;
      Reply(identity, e, MessageType::kKvReply, proto::EncodePayload(proto::KvReply{}));
      ServeParkedKv(false);
      return;
    }
    case MessageType::kKvAdd: {
      auto req = proto::DecodePayload<proto::KvAddRequest>(e.payload);
      if (!req.ok()) return;
      const int64_t value = (kv_.count(req->key) ? std::stoll(kv_[req->key]) : 0) + req->delta;
      kv_[req->key] = std::to_string(value);
      proto::KvReply reply;
      reply.number = value;
      Reply(identity, e, MessageType::kKvReply, proto::EncodePayload(reply));
      ServeParkedKv(false);
      return;
    }
    case MessageType::kKvGet:
    case MessageType::kKvWait:
    case MessageType::kKvSetAndGet: {
      int64_t timeout_ms = 0;
      if (e.type == MessageType::kKvSetAndGet) {
        auto req = proto::DecodePayload<proto::KvSetAndGetRequest>(e.payload);
        if (!req.ok()) return;
        for (size_t i = 0; i < req->set_keys.size() && i < req->set_values.size(); ++i) {
          kv_[req->set_keys[i]] = req->set_values[i];
        }
        timeout_ms = req->timeout_ms;
        ServeParkedKv(false);  // the sets may complete earlier requests
      } else if (e.type == MessageType::kKvGet) {
        auto req = proto::DecodePayload<proto::KvGetRequest>(e.payload);
        if (req.ok()) timeout_ms = req->timeout_ms;
      } else {
        auto req = proto::DecodePayload<proto::KvWaitRequest>(e.payload);
        if (req.ok()) timeout_ms = req->timeout_ms;
      }
      parked_kv_.push_back(
          {identity, e, SteadyClock::now() + std::chrono::milliseconds(timeout_ms)});
      ServeParkedKv(false);
      return;
    }
    default:
      return;  // reports (Paused, GenerationReady, FailureReport, CheckpointWritten): recorded
  }
}

void FakeCoordinator::ServeParkedKv(bool expire_all) {
  const auto now = SteadyClock::now();
  for (auto it = parked_kv_.begin(); it != parked_kv_.end();) {
    std::vector<std::string> keys;
    if (it->request.type == MessageType::kKvGet) {
      auto req = proto::DecodePayload<proto::KvGetRequest>(it->request.payload);
      if (req.ok()) keys = {req->key};
    } else if (it->request.type == MessageType::kKvSetAndGet) {
      auto req = proto::DecodePayload<proto::KvSetAndGetRequest>(it->request.payload);
      if (req.ok()) keys = req->get_keys;
    } else {
      auto req = proto::DecodePayload<proto::KvWaitRequest>(it->request.payload);
      if (req.ok()) keys = req->keys;
    }
    const bool all = std::all_of(keys.begin(), keys.end(),
                                 [&](const std::string& k) { return kv_.count(k) > 0; });
    if (all && it->request.type == MessageType::kKvSetAndGet) {
      proto::KvValuesReply reply;
      for (const auto& k : keys) reply.values.push_back(kv_[k]);
      Reply(it->identity, it->request, MessageType::kKvValues, proto::EncodePayload(reply));
    } else if (all) {
      proto::KvReply reply;
      if (it->request.type == MessageType::kKvGet && !keys.empty()) reply.value = kv_[keys[0]];
      Reply(it->identity, it->request, MessageType::kKvReply, proto::EncodePayload(reply));
    } else if (expire_all || now >= it->deadline) {
      proto::ErrorReply error{static_cast<int32_t>(StatusCode::kTimedOut), "no such key yet"};
      Reply(it->identity, it->request, MessageType::kError, proto::EncodePayload(error));
    } else {
      ++it;
      continue;
    }
    it = parked_kv_.erase(it);
  }
}

}  // namespace elastra::testing
