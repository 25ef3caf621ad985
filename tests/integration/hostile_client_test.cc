// Hostile clients against a real `elastra run` job (docs/hardening.md, "Hostile clients"): a
// client holding the worker key (join.json) that sends admin messages, one that replays an older
// generation's messages under a member's name, one that floods the coordinator at full speed
// without reading a reply, and one that opens thousands of connections. Each time the job goes on,
// matches `train_mlp --reference` (1e-4 relative loss, exact sample accounting), and the
// coordinator's resident memory stays under its baseline plus kRssBoundKiB.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "protocol/codec.h"
#include "protocol/control_client.h"
#include "protocol/keys.h"
#include "protocol/messages.h"
#include "testbed/sanitizers.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;
using std::chrono::seconds;

// What the coordinator may grow by under any of these clients: its zmq queues are bounded by their
// high-water marks (a peer that reads nothing loses replies past them), the key-value store by its
// own limit (a key overwritten here), a connection by its buffers.
constexpr int64_t kRssBoundKiB = 64 << 10;

std::vector<std::string> Args() {
  return {"--steps",        std::to_string(kUntilStopped),
          "--step-time-ms", "15",
          "--global-batch", "48",
          "--hidden",       "24",
          "--commit-every", "5"};
}

// A heartbeat deadline long enough that the load these clients put on a 2-core machine does not
// evict a worker: what is tested is that they change nothing, so nothing else may.
// Under AddressSanitizer (make test-asan) the coordinator's resident memory would also hold the
// allocator's quarantine of freed blocks (up to 256 MiB, resident on purpose, so that a use after
// free is caught): that is ASan's memory, not the coordinator's, so the quarantine is off for
// this job and the bound stays on what the coordinator keeps.
std::vector<std::string> JobEnv() {
  std::vector<std::string> env = {"ELASTRA_HEARTBEAT_TIMEOUT_MS=6000"};
  if (testbed::kUnderAddressSanitizer) {
    env.push_back("ASAN_OPTIONS=" +
                  testbed::AsanOptionsWith("quarantine_size_mb=0:thread_local_quarantine_size_kb=0"));
  }
  return env;
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

int OpenFds(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for ([[maybe_unused]] const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    ++n;
  }
  return n;
}

// A CURVE DEALER with the worker key that sends frames and reads nothing unless asked.
class RawDealer {
 public:
  RawDealer(void* ctx, const ConnectionInfo& info) {
    s_ = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(s_, ZMQ_CURVE_SERVERKEY, info.server_public.data(), 40);
    zmq_setsockopt(s_, ZMQ_CURVE_PUBLICKEY, info.worker.public_key.data(), 40);
    zmq_setsockopt(s_, ZMQ_CURVE_SECRETKEY, info.worker.secret_key.data(), 40);
    int timeout = 5000;
    zmq_setsockopt(s_, ZMQ_RCVTIMEO, &timeout, sizeof(timeout));
    zmq_connect(s_, info.address.c_str());
  }
  ~RawDealer() { zmq_close(s_); }
  // False when the socket's queue is full (the peer does not keep up).
  bool Send(const std::string& frame) {
    return zmq_send(s_, frame.data(), frame.size(), ZMQ_DONTWAIT) >= 0;
  }
  std::optional<proto::Envelope> Recv() {
    std::vector<char> buf(1 << 20);
    int n = zmq_recv(s_, buf.data(), buf.size(), 0);
    if (n < 0) return std::nullopt;
    auto e = proto::DecodeEnvelope(std::string_view(buf.data(), static_cast<size_t>(n)));
    if (!e.ok()) return std::nullopt;
    return *e;
  }

 private:
  void* s_;
};

class HostileClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job_ = std::make_unique<Job>(3, Args(), JobEnv());
    ASSERT_TRUE(job_->WaitForStep(10, seconds(120))) << LauncherLog(*job_);
    auto info = ReadJoinFile(job_->state_dir() + "/join.json");
    ASSERT_TRUE(info.ok()) << info.status();
    info_ = *info;
    coordinator_ = job_->CoordinatorPid();
    ASSERT_GT(coordinator_, 0);
    baseline_kib_ = RssKiB(coordinator_);
    ASSERT_GT(baseline_kib_, 0);
  }

  std::unique_ptr<ControlClient> Connect(const std::string& sender) {
    ControlClientOptions o;
    o.address = info_.address;
    o.server_public = info_.server_public;
    o.client_keys = info_.worker;
    o.job = info_.job;
    o.sender = sender;
    o.connect_timeout = milliseconds(5000);
    auto c = ControlClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  int64_t Step() { return job_->Status().value("step", int64_t{0}); }

  // Runs `hostile` on its own thread until the job has trained `steps` more steps, sampling the
  // coordinator's memory meanwhile; returns the steps per second the job made under it.
  double WhileTraining(int64_t steps, const std::function<void(const std::atomic<bool>&)>& hostile) {
    std::atomic<bool> stop{false};
    std::thread t([&] { hostile(stop); });
    const int64_t from = Step();
    const auto start = std::chrono::steady_clock::now();
    const bool advanced = job_->WaitFor(
        [&](const nlohmann::json& j) {
          max_kib_ = std::max(max_kib_, RssKiB(coordinator_));
          return j.value("step", int64_t{0}) >= from + steps;
        },
        seconds(180));
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    stop = true;
    t.join();
    EXPECT_TRUE(advanced) << "the job stopped training under a hostile client\n"
                          << LauncherLog(*job_);
    return static_cast<double>(steps) / s;
  }

  // The job still trains, ends cleanly and matches its reference; the coordinator stayed within
  // its memory bound.
  void FinishAndCheck() {
    max_kib_ = std::max(max_kib_, RssKiB(coordinator_));
    EXPECT_LE(max_kib_, baseline_kib_ + kRssBoundKiB)
        << "coordinator RSS grew from " << baseline_kib_ << " KiB to " << max_kib_ << " KiB";
    std::printf("coordinator RSS: baseline %lld KiB, max %lld KiB\n",
                static_cast<long long>(baseline_kib_), static_cast<long long>(max_kib_));
    ASSERT_TRUE(job_->WaitForStep(Step() + 5, seconds(120))) << LauncherLog(*job_);
    job_->StopTraining();
    ASSERT_EQ(job_->Wait(seconds(120)), 0) << LauncherLog(*job_);
    ExpectStoppedRunMatchesReference(*job_, Args());
  }

  std::unique_ptr<Job> job_;
  ConnectionInfo info_;
  pid_t coordinator_ = -1;
  int64_t baseline_kib_ = 0, max_kib_ = 0;
};

// The worker key may not resize, drain another host or report a worker's exit; each refusal says
// why, and the job is left as it was.
TEST_F(HostileClientTest, WorkerKeySendingAdminMessagesIsRefusedWithTheReason) {
  const auto before = job_->Status();
  auto c = Connect("intruder");
  ASSERT_NE(c, nullptr);
  auto resize = c->Call<proto::ResizeReply>(MessageType::kResize,
                                            proto::ResizeRequest{1, false, {}, false},
                                            milliseconds(5000));
  EXPECT_EQ(resize.status().code(), StatusCode::kUnauthenticated) << resize.status();
  EXPECT_NE(resize.status().message().find("needs an admin key"), std::string::npos)
      << resize.status();
  const std::string host = before["workers"][0].value("host", std::string());
  auto drain = c->Call<proto::ResizeReply>(MessageType::kDrain, proto::DrainRequest{host, false},
                                           milliseconds(5000));
  EXPECT_EQ(drain.status().code(), StatusCode::kUnauthenticated) << drain.status();
  EXPECT_NE(drain.status().message().find("needs an admin key"), std::string::npos)
      << drain.status();
  const std::string victim = before["workers"][1].value("id", std::string());
  auto exited = c->Call<proto::Ack>(MessageType::kProcessExited,
                                    proto::ProcessExited{victim, 0, 9}, milliseconds(5000));
  EXPECT_EQ(exited.status().code(), StatusCode::kUnauthenticated) << exited.status();
  EXPECT_NE(exited.status().message().find("registered no host"), std::string::npos)
      << exited.status();
  // Nothing changed: the same generation and members train on.
  ASSERT_TRUE(job_->WaitForStep(Step() + 10, seconds(120)));
  const auto after = job_->Status();
  EXPECT_EQ(after.value("generation", 0), before.value("generation", 0));
  EXPECT_EQ(after["history"].size(), before["history"].size());
  FinishAndCheck();
}

// A client that replays, under a member's name, the messages of a generation the job has left
// (a failure report, a pause, a ready, a checkpoint report) — once, then without pause while the
// job resizes. Each is stale: counted, never acted on, and it takes no push away from the member
// it names, so the resize completes and the job trains on.
TEST_F(HostileClientTest, ReplayedMessagesOfAnOlderGenerationChangeNothing) {
  auto r = job_->Resize("--workers 3 --layout dp=1,pp=1,tp=3 --wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto before = job_->Status();
  const uint64_t generation = before.value("generation", uint64_t{0});
  ASSERT_GE(generation, 2u);
  const uint64_t old = generation - 1;
  const std::string member = before["workers"][1].value("id", std::string());
  const std::string job = info_.job;
  proto::CheckpointWritten ckpt;
  ckpt.generation = old;
  ckpt.step = 1000000;
  ckpt.rank = 0;
  ckpt.ranks = 1;
  ckpt.root = job_->dir() + "/not-a-checkpoint-root";
  ckpt.ok = true;
  const std::vector<std::string> replay = {
      proto::MakeFrame(MessageType::kFailureReport, proto::FailureReport{old, 5, "replayed"}, job,
                       old, member, 0),
      proto::MakeFrame(MessageType::kPaused, proto::PausedReport{old, 3, {0}, true}, job, old,
                       member, 0),
      proto::MakeFrame(MessageType::kGenerationReady, proto::GenerationReady{old, 1, 1, 0}, job,
                       old, member, 0),
      proto::MakeFrame(MessageType::kCheckpointWritten, ckpt, job, old, member, 0)};
  void* ctx = zmq_ctx_new();
  {
    RawDealer once(ctx, info_);
    for (const auto& f : replay) ASSERT_TRUE(once.Send(f));
    ASSERT_TRUE(job_->WaitFor(
        [](const nlohmann::json& j) {
          return j["counters"].value("stale_messages", 0) >= static_cast<int>(4);
        },
        seconds(30)))
        << job_->Status().dump();
  }
  ASSERT_TRUE(job_->WaitForStep(Step() + 10, seconds(120)));
  auto after = job_->Status();
  EXPECT_EQ(after.value("generation", uint64_t{0}), generation) << after.dump();
  EXPECT_EQ(after["history"].size(), before["history"].size());
  EXPECT_FALSE(std::filesystem::exists(ckpt.root));
  // Replayed without pause while the job resizes: the member's pushes must still reach it.
  WhileTraining(5, [&](const std::atomic<bool>& stop) {
    RawDealer flood(ctx, info_);
    size_t i = 0;
    while (!stop) {
      if (!flood.Send(replay[i++ % replay.size()])) std::this_thread::sleep_for(milliseconds(1));
    }
  });
  std::atomic<bool> stop{false};
  std::thread replayer([&] {
    RawDealer flood(ctx, info_);
    size_t i = 0;
    while (!stop) {
      if (!flood.Send(replay[i++ % replay.size()])) std::this_thread::sleep_for(milliseconds(1));
    }
  });
  auto back = job_->Resize("--workers 2 --layout dp=2,pp=1,tp=1 --wait --timeout 120");
  stop = true;
  replayer.join();
  zmq_ctx_term(ctx);
  EXPECT_EQ(back.exit_code, 0) << back.out << LauncherLog(*job_);
  FinishAndCheck();
}

// A client that floods the coordinator at full speed with requests (status, a key-value write,
// garbage) and reads no reply, then thousands of connections held open (plain TCP that never
// speaks, and CURVE clients that ask once): the job trains on, and the coordinator's memory stays
// bounded.
TEST_F(HostileClientTest, FloodAndThousandsOfConnectionsLeaveTheJobTrainingInBoundedMemory) {
  const int64_t quiet_from = Step();
  const auto quiet_start = std::chrono::steady_clock::now();
  ASSERT_TRUE(job_->WaitForStep(quiet_from + 20, seconds(120)));
  const double quiet_rate =
      20.0 / std::chrono::duration<double>(std::chrono::steady_clock::now() - quiet_start).count();
  const std::string job = info_.job;
  const std::vector<std::string> frames = {
      proto::MakeFrame(MessageType::kStatusRequest, proto::StatusRequest{}, job, 0, "flood", 1),
      proto::MakeFrame(MessageType::kKvSet, proto::KvSetRequest{"flood", std::string(4096, 'x')},
                       job, 0, "flood", 2),
      std::string("garbage that is no frame")};
  std::atomic<int64_t> sent{0};
  void* ctx = zmq_ctx_new();
  const double flood_rate = WhileTraining(200, [&](const std::atomic<bool>& stop) {
    RawDealer flood(ctx, info_);
    size_t i = 0;
    while (!stop) {
      if (flood.Send(frames[i % frames.size()])) {
        ++i;
        ++sent;
      }
    }
  });
  std::printf("flood: %lld frames; job %.1f steps/s before, %.1f under the flood; coordinator "
              "RSS %lld KiB -> max %lld KiB\n",
              static_cast<long long>(sent.load()), quiet_rate, flood_rate,
              static_cast<long long>(baseline_kib_), static_cast<long long>(max_kib_));

  // Thousands of connections: plain TCP sockets that connect and never speak, and CURVE clients
  // with the worker key that each ask for the status once.
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  setrlimit(RLIMIT_NOFILE, &lim);
  const int kPlain = std::min<int>(3000, static_cast<int>(lim.rlim_cur) / 2);
  const int kCurve = 300;
  const int port = std::stoi(info_.address.substr(info_.address.rfind(':') + 1));
  std::vector<int> plain;
  for (int i = 0; i < kPlain; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      continue;
    }
    plain.push_back(fd);
  }
  int max_fds = 0;
  zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, kCurve + 16);
  int answered = 0;
  {
    std::vector<std::unique_ptr<RawDealer>> curve;
    for (int i = 0; i < kCurve; ++i) {
      curve.push_back(std::make_unique<RawDealer>(ctx, info_));
      curve.back()->Send(frames[0]);
    }
    const double storm_rate = WhileTraining(20, [&](const std::atomic<bool>&) {});
    for (auto& c : curve) {
      if (auto e = c->Recv(); e && e->type == MessageType::kStatusReply) ++answered;
    }
    max_fds = OpenFds(coordinator_);
    std::printf("connections: %zu plain TCP, %d CURVE (%d answered); coordinator fds %d, RSS max "
                "%lld KiB; job %.1f steps/s\n",
                plain.size(), kCurve, answered, max_fds, static_cast<long long>(max_kib_),
                storm_rate);
  }
  for (int fd : plain) close(fd);
  zmq_ctx_term(ctx);
  EXPECT_GE(plain.size(), 1000u);
  EXPECT_EQ(answered, kCurve) << "the coordinator stopped answering new clients";
  auto st = job_->Status();
  EXPECT_GT(st["counters"].value("malformed_frames", 0), 0);
  FinishAndCheck();
}

}  // namespace
}  // namespace elastra::testing
