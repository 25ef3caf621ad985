// The coordinator over real ZeroMQ sockets with real CURVE, driven by ControlClients.
#include "coordinator/server.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <atomic>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "protocol/codec.h"
#include "protocol/status_json.h"
#include "protocol/control_client.h"

namespace elastra::coordinator {
namespace {

using namespace std::chrono_literals;
using proto::MessageType;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_keys_ = *GenerateKeyPair();
    worker_keys_ = *GenerateKeyPair();
    admin_keys_ = *GenerateKeyPair();
  }

  void StartServer(int initial_workers) {
    CoordinatorOptions o;
    o.job = "job";
    o.server_keys = server_keys_;
    o.worker_public_keys = {worker_keys_.public_key};
    o.admin_public_keys = {admin_keys_.public_key};
    o.initial_workers = initial_workers;
    auto s = CoordinatorServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = std::move(s).value();
  }

  ControlClientOptions ClientOptions(const KeyPair& keys, const std::string& sender) {
    ControlClientOptions o;
    o.address = server_->address();
    o.server_public = server_->public_key();
    o.client_keys = keys;
    o.job = "job";
    o.sender = sender;
    o.connect_timeout = 3000ms;
    return o;
  }

  // Clients with the worker key heartbeat as real workers and agents do (every 100 ms): a member
  // that never heartbeats is lost at the 1.5 s deadline, which a generation's build passed under
  // ThreadSanitizer on a loaded machine.
  std::unique_ptr<ControlClient> Connect(const KeyPair& keys, const std::string& sender) {
    ControlClientOptions o = ClientOptions(keys, sender);
    if (keys.public_key == worker_keys_.public_key) o.heartbeat_interval = 100ms;
    auto c = ControlClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  StatusOr<proto::JoinReply> Join(ControlClient& c, const std::string& id) {
    return c.Call<proto::JoinReply>(MessageType::kJoin, proto::JoinRequest{id, "h", -1, 1}, 3s);
  }

  // Waits (bounded) for the next push of `type`; other pushes are skipped.
  std::optional<proto::Envelope> Expect(ControlClient& c, MessageType type) {
    auto deadline = std::chrono::steady_clock::now() + 5s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto p = c.PollPush(100ms);
      if (p && p->type == type) return p;
    }
    return std::nullopt;
  }

  KeyPair server_keys_, worker_keys_, admin_keys_;
  std::unique_ptr<CoordinatorServer> server_;
};

TEST_F(ServerTest, ReportsTheRealEndpoint) {
  StartServer(1);
  EXPECT_EQ(server_->address().rfind("tcp://127.0.0.1:", 0), 0u);
  EXPECT_NE(server_->address(), "tcp://127.0.0.1:0");
}

TEST_F(ServerTest, StartRefusesBadOptions) {
  CoordinatorOptions o;
  o.server_keys = server_keys_;
  EXPECT_EQ(CoordinatorServer::Start(o).status().code(), StatusCode::kInvalidArgument);
  o.worker_public_keys = {"not a key"};
  EXPECT_EQ(CoordinatorServer::Start(o).status().code(), StatusCode::kInvalidArgument);
  o.worker_public_keys = {worker_keys_.public_key};
  o.bind_address = "tcp://256.0.0.1:1";
  EXPECT_EQ(CoordinatorServer::Start(o).status().code(), StatusCode::kUnavailable);
}

TEST_F(ServerTest, WorkerKeyJoinsAndTheFirstGenerationForms) {
  StartServer(1);
  auto c = Connect(worker_keys_, "w0");
  ASSERT_NE(c, nullptr);
  std::atomic<int> observed{0};
  c->SetPushObserver([&](const proto::Envelope& e) {
    if (e.type == MessageType::kNewGeneration) ++observed;
  });
  auto join = Join(*c, "w0");
  ASSERT_TRUE(join.ok()) << join.status();
  EXPECT_EQ(join->worker_id, "w0");
  EXPECT_EQ(join->heartbeat_timeout_ms, 1500);
  auto gen = Expect(*c, MessageType::kNewGeneration);
  ASSERT_TRUE(gen.has_value());
  EXPECT_EQ(observed.load(), 1);  // the observer ran before the push was queued
  auto g = proto::DecodePayload<proto::NewGeneration>(gen->payload);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->generation, 1u);
  EXPECT_EQ(g->members.size(), 1u);
  ASSERT_TRUE(c->Send(MessageType::kGenerationReady, proto::EncodePayload(proto::GenerationReady{1, 0, 0, 0}), 1).ok());
  // The duplicate join of a live member comes back as its Status.
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->generation() != 1u && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(server_->generation(), 1u);
  auto again = Join(*c, "w0");
  EXPECT_EQ(again.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(again.status().message().find("already a live member"), std::string::npos);
}

TEST_F(ServerTest, UnknownKeyIsRefusedWithAClearMessage) {
  StartServer(1);
  KeyPair stranger = *GenerateKeyPair();
  auto c = ControlClient::Connect(ClientOptions(stranger, "w9"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(c.status().message().find("refused this client's key"), std::string::npos);
  EXPECT_NE(c.status().message().find(server_->address()), std::string::npos);
  EXPECT_GE(server_->rejected_keys(), 1u);
}

TEST_F(ServerTest, NothingListeningIsUnavailable) {
  StartServer(1);
  ControlClientOptions o = ClientOptions(worker_keys_, "w0");
  server_->Stop();
  o.connect_timeout = 300ms;
  auto c = ControlClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("no coordinator answered"), std::string::npos);
}

TEST_F(ServerTest, WorkerKeyCannotResize) {
  StartServer(1);
  auto c = Connect(worker_keys_, "w0");
  ASSERT_NE(c, nullptr);
  auto r = c->Call<proto::ResizeReply>(MessageType::kResize,
                                       proto::ResizeRequest{2, false, {}, false}, 3s);
  EXPECT_EQ(r.status().code(), StatusCode::kUnauthenticated);
  EXPECT_NE(r.status().message().find("admin key"), std::string::npos);
}

// Sends raw frames through a CURVE DEALER that holds an allowed key.
class RawClient {
 public:
  RawClient(const std::string& address, const std::string& server_public, const KeyPair& keys) {
    ctx_ = zmq_ctx_new();
    s_ = zmq_socket(ctx_, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s_, ZMQ_CURVE_SERVERKEY, server_public.data(), 40);
    zmq_setsockopt(s_, ZMQ_CURVE_PUBLICKEY, keys.public_key.data(), 40);
    zmq_setsockopt(s_, ZMQ_CURVE_SECRETKEY, keys.secret_key.data(), 40);
    int timeout = 3000;
    zmq_setsockopt(s_, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_connect(s_, address.c_str());
  }
  ~RawClient() {
    zmq_close(s_);
    zmq_ctx_term(ctx_);
  }
  void Send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(s_, frames[i].data(), frames[i].size(), i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }
  std::optional<proto::Envelope> Recv() {
    char buf[65536];
    int n = zmq_recv(s_, buf, sizeof(buf), 0);
    if (n < 0) return std::nullopt;
    auto e = proto::DecodeEnvelope(std::string_view(buf, static_cast<size_t>(n)));
    if (!e.ok()) return std::nullopt;
    return *e;
  }

 private:
  void* ctx_;
  void* s_;
};

TEST_F(ServerTest, MalformedFramesAreAnsweredCountedAndServingGoesOn) {
  StartServer(1);
  RawClient raw(server_->address(), server_->public_key(), worker_keys_);
  raw.Send({"garbage"});
  auto e1 = raw.Recv();
  ASSERT_TRUE(e1.has_value());
  EXPECT_EQ(e1->type, MessageType::kError);
  EXPECT_EQ(e1->request_id, 0u);
  auto err = proto::DecodePayload<proto::ErrorReply>(e1->payload);
  ASSERT_TRUE(err.ok());
  EXPECT_EQ(err->code, static_cast<int>(StatusCode::kProtocolMismatch));

  // A truncated real frame, a wrong version, and a two-frame message.
  std::string good = proto::MakeFrame(MessageType::kStatusRequest, proto::StatusRequest{}, "job",
                                      0, "raw", 5);
  raw.Send({good.substr(0, good.size() - 3)});
  auto e2 = raw.Recv();
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(proto::DecodePayload<proto::ErrorReply>(e2->payload)->code,
            static_cast<int>(StatusCode::kCorrupt));
  std::string wrong_version = good;
  wrong_version[4] = static_cast<char>(proto::kProtocolVersion + 1);
  raw.Send({wrong_version});
  auto e3 = raw.Recv();
  ASSERT_TRUE(e3.has_value());
  EXPECT_EQ(proto::DecodePayload<proto::ErrorReply>(e3->payload)->code,
            static_cast<int>(StatusCode::kProtocolMismatch));
  raw.Send({good, good});
  auto e4 = raw.Recv();
  ASSERT_TRUE(e4.has_value());
  EXPECT_EQ(e4->type, MessageType::kError);
  EXPECT_EQ(server_->malformed_frames(), 4u);

  // The same socket and a fresh client are still served.
  raw.Send({good});
  auto ok = raw.Recv();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, MessageType::kStatusReply);
  EXPECT_EQ(ok->request_id, 5u);
  auto c = Connect(worker_keys_, "w0");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(Join(*c, "w0").ok());
  auto status = nlohmann::json::parse(proto::StatusJson(server_->Snapshot()));
  EXPECT_EQ(status["counters"]["malformed_frames"], 4);
}

// Frames sent back to back reach the server together: it reads up to kMaxBatch at a wakeup and
// hands the core the next ones before each (CoordinatorCore::PrefetchAhead). Good and malformed
// frames mixed in one burst are each answered, in the order sent.
TEST_F(ServerTest, ABurstOfGoodAndMalformedFramesIsAnsweredInOrder) {
  StartServer(1);
  RawClient raw(server_->address(), server_->public_key(), worker_keys_);
  constexpr int kFrames = 60;
  for (int i = 0; i < kFrames; ++i) {
    const std::string good = proto::MakeFrame(MessageType::kStatusRequest, proto::StatusRequest{},
                                              "job", 0, "raw", static_cast<uint64_t>(i + 1));
    if (i % 7 == 3) {
      raw.Send({good.substr(0, good.size() - 3)});  // truncated
    } else if (i % 11 == 5) {
      raw.Send({good, good});  // two frames
    } else {
      raw.Send({good});
    }
  }
  int malformed = 0;
  for (int i = 0; i < kFrames; ++i) {
    auto e = raw.Recv();
    ASSERT_TRUE(e.has_value()) << "no answer to frame " << i;
    if (i % 7 == 3 || i % 11 == 5) {
      EXPECT_EQ(e->type, MessageType::kError) << "frame " << i;
      EXPECT_EQ(e->request_id, 0u) << "frame " << i;
      ++malformed;
    } else {
      EXPECT_EQ(e->type, MessageType::kStatusReply) << "frame " << i;
      EXPECT_EQ(e->request_id, static_cast<uint64_t>(i + 1)) << "frame " << i;
    }
  }
  EXPECT_EQ(server_->malformed_frames(), static_cast<uint64_t>(malformed));
}

TEST_F(ServerTest, AdminGrowsTheJobEndToEnd) {
  StartServer(1);
  auto w0 = Connect(worker_keys_, "w0");
  ASSERT_NE(w0, nullptr);
  ASSERT_TRUE(Join(*w0, "w0").ok());
  ASSERT_TRUE(Expect(*w0, MessageType::kNewGeneration).has_value());
  ASSERT_TRUE(w0->Send(MessageType::kGenerationReady,
                       proto::EncodePayload(proto::GenerationReady{1, 0, 0, 0}), 1).ok());

  auto admin = Connect(admin_keys_, "admin");
  ASSERT_NE(admin, nullptr);
  // Wait for generation 1 to commit (the ready is asynchronous).
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (server_->generation() != 1u && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  auto accepted = admin->Call<proto::ResizeReply>(MessageType::kResize,
                                                  proto::ResizeRequest{2, false, {}, true}, 3s);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->phase, proto::ResizePhase::kAccepted);
  const uint64_t resize_id = admin->last_request_id();

  auto w1 = Connect(worker_keys_, "w1");
  ASSERT_NE(w1, nullptr);
  ASSERT_TRUE(Join(*w1, "w1").ok());
  auto pause = Expect(*w0, MessageType::kPauseRequest);
  ASSERT_TRUE(pause.has_value());
  ASSERT_TRUE(w0->Send(MessageType::kPaused,
                       proto::EncodePayload(proto::PausedReport{2, 10, {10}, false}), 1).ok());
  for (auto* c : {w0.get(), w1.get()}) {
    auto gen = Expect(*c, MessageType::kNewGeneration);
    ASSERT_TRUE(gen.has_value());
    EXPECT_EQ(gen->generation, 2u);
    ASSERT_TRUE(c->Send(MessageType::kGenerationReady,
                        proto::EncodePayload(proto::GenerationReady{2, 1, 1, 0}), 2).ok());
  }
  auto done = admin->AwaitReply(resize_id, 5s);
  ASSERT_TRUE(done.ok()) << done.status();
  auto reply = proto::DecodePayload<proto::ResizeReply>(done->payload);
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->phase, proto::ResizePhase::kDone);
  EXPECT_EQ(reply->workers, 2);
  EXPECT_EQ(reply->generation, 2u);
  EXPECT_EQ(server_->state(), proto::JobState::kRunning);
}

TEST_F(ServerTest, HeartbeatsCarryTheStepAndBlockingKvGetCompletes) {
  StartServer(2);
  ControlClientOptions o = ClientOptions(worker_keys_, "w0");
  o.heartbeat_interval = 20ms;
  auto w0 = ControlClient::Connect(o);
  ASSERT_TRUE(w0.ok()) << w0.status();
  ASSERT_TRUE(Join(**w0, "w0").ok());
  (*w0)->SetHeartbeatStep(42);
  bool seen = false;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (!seen && std::chrono::steady_clock::now() < deadline) {
    auto s = nlohmann::json::parse(proto::StatusJson(server_->Snapshot()));
    for (const auto& w : s["workers"]) seen |= w["step"] == 42;
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(seen);

  auto getter = std::async(std::launch::async, [&] {
    return (*w0)->Call<proto::KvReply>(MessageType::kKvGet, proto::KvGetRequest{"g1/addr", 5000},
                                       6s);
  });
  auto admin = Connect(admin_keys_, "admin");
  ASSERT_NE(admin, nullptr);
  auto set = admin->Call<proto::KvReply>(MessageType::kKvSet,
                                         proto::KvSetRequest{"g1/addr", "10.0.0.1:9"}, 3s);
  ASSERT_TRUE(set.ok()) << set.status();
  auto got = getter.get();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->value, "10.0.0.1:9");
  auto timed_out = admin->Call<proto::KvReply>(MessageType::kKvGet,
                                               proto::KvGetRequest{"never", 50}, 3s);
  EXPECT_EQ(timed_out.status().code(), StatusCode::kTimedOut);
}

}  // namespace
}  // namespace elastra::coordinator

namespace elastra::coordinator {
namespace {

// The owner learns that the job is over once the agents and standby workers were told; stopping
// the server right then still delivers those Shutdowns. (Over loopback they leave at once; the
// linger Stop() sets matters for a slow or distant peer, which this test does not make.)
TEST_F(ServerTest, TheJobsEndIsSignalledOnceAgentsAndStandbyWorkersWereTold) {
  StartServer(1);
  auto agent = Connect(worker_keys_, "agent-h");
  auto w0 = Connect(worker_keys_, "w0");
  auto spare = Connect(worker_keys_, "spare");
  ASSERT_TRUE(agent && w0 && spare);
  ASSERT_TRUE(agent
                  ->Call<proto::Ack>(MessageType::kAgentRegister,
                                     proto::AgentRegister{"h", 4, "127.0.0.1", 0}, 3s)
                  .ok());
  ASSERT_TRUE(Join(*w0, "w0").ok());
  ASSERT_TRUE(Expect(*w0, MessageType::kNewGeneration).has_value());
  ASSERT_TRUE(w0->Send(MessageType::kGenerationReady,
                       proto::EncodePayload(proto::GenerationReady{1, 0, 0, 0}), 1)
                  .ok());
  ASSERT_TRUE(Join(*spare, "spare").ok());
  EXPECT_FALSE(server_->done());
  EXPECT_FALSE(server_->WaitDone(50ms));
  auto left = w0->Call<proto::Ack>(
      MessageType::kLeave, proto::LeaveRequest{proto::LeaveReason::kFinished, "done"}, 3s);
  ASSERT_TRUE(left.ok()) << left.status();
  ASSERT_TRUE(server_->WaitDone(5s));
  EXPECT_EQ(server_->state(), proto::JobState::kFinished);
  server_->Stop();
  for (ControlClient* c : {agent.get(), spare.get()}) {
    auto shutdown = Expect(*c, MessageType::kShutdown);
    ASSERT_TRUE(shutdown.has_value());
    EXPECT_EQ(proto::DecodePayload<proto::Shutdown>(shutdown->payload)->exit_code, 0);
  }
}

TEST_F(ServerTest, EveryHeartbeatIsAnsweredWithAnAck) {
  StartServer(1);
  auto w0 = Connect(worker_keys_, "w0");
  ASSERT_NE(w0, nullptr);
  ASSERT_TRUE(Join(*w0, "w0").ok());
  // The ack is neither a reply nor a push for ControlClient; read it with a raw DEALER instead.
  void* ctx = zmq_ctx_new();
  void* dealer = zmq_socket(ctx, ZMQ_DEALER);
  const std::string own_public = worker_keys_.public_key, own_secret = worker_keys_.secret_key;
  zmq_setsockopt(dealer, ZMQ_CURVE_SERVERKEY, server_->public_key().data(), 40);
  zmq_setsockopt(dealer, ZMQ_CURVE_PUBLICKEY, own_public.data(), 40);
  zmq_setsockopt(dealer, ZMQ_CURVE_SECRETKEY, own_secret.data(), 40);
  int linger = 0;
  zmq_setsockopt(dealer, ZMQ_LINGER, &linger, sizeof(linger));
  ASSERT_EQ(zmq_connect(dealer, server_->address().c_str()), 0);
  const std::string beat =
      proto::MakeFrame(MessageType::kHeartbeat, proto::Heartbeat{3}, "job", 0, "w0", 0);
  ASSERT_GE(zmq_send(dealer, beat.data(), beat.size(), 0), 0);
  char buf[4096];
  int timeout = 5000;
  zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
  const int n = zmq_recv(dealer, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  auto e = proto::DecodeEnvelope(std::string_view(buf, static_cast<size_t>(n)));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->type, MessageType::kHeartbeatAck);
  // Generation 1 is being built, not committed yet.
  EXPECT_EQ(proto::DecodePayload<proto::HeartbeatAck>(e->payload)->generation, 0u);
  zmq_close(dealer);
  zmq_ctx_term(ctx);
}

TEST_F(ServerTest, WrongServerKeyFailsClearlyWithinTheTimeout) {
  StartServer(1);
  ControlClientOptions o = ClientOptions(worker_keys_, "w0");
  o.server_public = GenerateKeyPair()->public_key;
  o.connect_timeout = 1000ms;
  auto start = std::chrono::steady_clock::now();
  auto c = ControlClient::Connect(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnauthenticated) << c.status();
  EXPECT_NE(c.status().message().find("wrong server public key"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace elastra::coordinator
