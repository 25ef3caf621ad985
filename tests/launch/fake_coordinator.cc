#include "tests/launch/fake_coordinator.h"

#include <zmq.h>

#include <algorithm>
#include <string_view>
#include <vector>

namespace elastra::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

// One multipart message: its frames, and the User-Id the ZAP handler gave its connection.
struct Frames {
  std::vector<std::string> parts;
  std::string user_id;
};

bool Receive(void* socket, Frames* out) {
  bool more = true;
  bool first = true;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, first ? ZMQ_DONTWAIT : 0) < 0) {
      zmq_msg_close(&msg);
      return !first;
    }
    first = false;
    out->parts.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
    if (const char* user = zmq_msg_gets(&msg, "User-Id")) out->user_id = user;
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<FakeCoordinator>> FakeCoordinator::Start(const std::string& job) {
  std::unique_ptr<FakeCoordinator> f(new FakeCoordinator());
  auto server = GenerateKeyPair();
  auto admin = GenerateKeyPair();
  auto worker = GenerateKeyPair();
  if (!server.ok() || !admin.ok() || !worker.ok()) return InternalError("no CURVE keys");
  f->ctx_ = zmq_ctx_new();
  f->zap_ = zmq_socket(f->ctx_, ZMQ_REP);
  if (zmq_bind(f->zap_, "inproc://zeromq.zap.01") != 0) return InternalError("ZAP: " + ZmqError());
  f->router_ = zmq_socket(f->ctx_, ZMQ_ROUTER);
  const int one = 1;
  const int zero = 0;
  zmq_setsockopt(f->router_, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(f->zap_, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(f->router_, ZMQ_CURVE_SERVER, &one, sizeof(one));
  zmq_setsockopt(f->router_, ZMQ_CURVE_SECRETKEY, server->secret_key.data(), 40);
  if (zmq_bind(f->router_, "tcp://127.0.0.1:0") != 0) return InternalError("bind: " + ZmqError());
  char endpoint[256] = {0};
  size_t len = sizeof(endpoint);
  zmq_getsockopt(f->router_, ZMQ_LAST_ENDPOINT, endpoint, &len);
  f->info_.address = endpoint;
  f->info_.job = job;
  f->info_.server_public = server->public_key;
  f->info_.admin = *admin;
  f->info_.worker = *worker;
  return f;
}

FakeCoordinator::~FakeCoordinator() {
  if (router_ != nullptr) zmq_close(router_);
  if (zap_ != nullptr) zmq_close(zap_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
}

void FakeCoordinator::HandleZap() {
  Frames request;
  while (Receive(zap_, &request)) {
    // RFC 27: version, request id, domain, address, identity, mechanism, credentials (the key).
    std::string user_id;
    if (request.parts.size() >= 7 && request.parts[6].size() == 32) {
      char z85[41] = {0};
      zmq_z85_encode(z85, reinterpret_cast<const uint8_t*>(request.parts[6].data()), 32);
      if (info_.admin.public_key == z85) user_id = proto::ToString(proto::Role::kAdmin);
      if (info_.worker.public_key == z85) user_id = proto::ToString(proto::Role::kWorker);
    }
    const bool ok = !user_id.empty();
    const std::string reply[6] = {"1.0",
                                  request.parts.size() > 1 ? request.parts[1] : "",
                                  ok ? "200" : "400",
                                  ok ? "OK" : "key not allowed",
                                  user_id,
                                  ""};
    for (int i = 0; i < 6; ++i) {
      zmq_send(zap_, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
    }
    request = Frames{};
  }
}

bool FakeCoordinator::ReceiveOne(milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    HandleZap();
    Frames frames;
    if (Receive(router_, &frames)) {
      if (frames.parts.size() != 2) continue;
      auto envelope = proto::DecodeEnvelope(frames.parts[1]);
      if (!envelope.ok()) continue;
      Message m;
      m.identity = frames.parts[0];
      m.role = frames.user_id == proto::ToString(proto::Role::kAdmin) ? proto::Role::kAdmin
                                                                      : proto::Role::kWorker;
      m.envelope = std::move(envelope).value();
      if (m.envelope.type == proto::MessageType::kHeartbeat) {
        ++heartbeats_[m.envelope.sender];
      } else if (m.envelope.type == proto::MessageType::kStatusRequest && status_) {
        Reply(m, proto::MessageType::kStatusReply, proto::StatusReply{*status_});
      } else {
        backlog_.push_back(std::move(m));
      }
      return true;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    zmq_pollitem_t items[2] = {{router_, 0, ZMQ_POLLIN, 0}, {zap_, 0, ZMQ_POLLIN, 0}};
    zmq_poll(items, 2, std::min<long>(left.count(), 50));
  }
}

std::optional<FakeCoordinator::Message> FakeCoordinator::Next(proto::MessageType type,
                                                              milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    auto it = std::find_if(backlog_.begin(), backlog_.end(),
                           [&](const Message& m) { return m.envelope.type == type; });
    if (it != backlog_.end()) {
      Message m = std::move(*it);
      backlog_.erase(it);
      return m;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return std::nullopt;
    ReceiveOne(left);
  }
}

void FakeCoordinator::Serve(milliseconds duration) {
  const auto deadline = Clock::now() + duration;
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return;
    ReceiveOne(left);
  }
}

void FakeCoordinator::ReplyError(const Message& to, const Status& status) {
  proto::ErrorReply e{static_cast<int32_t>(status.code()), status.message()};
  SendFrame(to.identity, proto::MessageType::kError, proto::EncodePayload(e),
            to.envelope.request_id);
}

int FakeCoordinator::heartbeats(const std::string& sender) const {
  auto it = heartbeats_.find(sender);
  return it == heartbeats_.end() ? 0 : it->second;
}

void FakeCoordinator::SendFrame(const std::string& identity, proto::MessageType type,
                                const std::string& payload, uint64_t request_id) {
  proto::Envelope e;
  e.type = type;
  e.job = info_.job;
  e.sender = "coordinator";
  e.request_id = request_id;
  e.payload = payload;
  const std::string frame = proto::EncodeEnvelope(e);
  zmq_send(router_, identity.data(), identity.size(), ZMQ_SNDMORE);
  zmq_send(router_, frame.data(), frame.size(), 0);
}

}  // namespace elastra::testing
