// `elastra drain` and `elastra status` through the binary, against a fake coordinator: the request
// they send with the admin key, and what they print and exit with for each answer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "protocol/keys.h"
#include "tests/launch/elastra_command.h"
#include "tests/launch/fake_coordinator.h"

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using proto::MessageType;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr milliseconds kEvent = seconds(20);

class LaunchAdmin : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    state_ = dir_ + "/state";
    fs::create_directories(state_);
    fs::create_directories(dir_ + "/out");
    auto fake = FakeCoordinator::Start();
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(fake).value();
    ASSERT_TRUE(WriteConnectionInfo(state_ + "/coordinator.json", fake_->info()).ok());
  }

  // Starts `elastra ARGS` and serves it until it exits.
  CommandResult RunServed(const std::vector<std::string>& args) {
    const pid_t pid = StartElastra(args, dir_ + "/out");
    std::optional<int> code;
    if (!WaitUntil(
            [&] {
              fake_->Serve(milliseconds(20));
              return (code = ExitedCode(pid)).has_value();
            },
            kEvent)) {
      return FinishElastra(pid, dir_ + "/out", milliseconds(0));  // kills it
    }
    CommandResult r;
    r.code = *code;
    r.out = ReadFile(dir_ + "/out/stdout");
    r.err = ReadFile(dir_ + "/out/stderr");
    return r;
  }

  std::string dir_, state_;
  std::unique_ptr<FakeCoordinator> fake_;
};

TEST_F(LaunchAdmin, DrainWaitsAndPrintsTheOutcomeLikeAResize) {
  const std::vector<std::string> args = {"drain",  "--state-dir", state_,
                                         "--host", "hostB",       "--wait"};
  const pid_t pid = StartElastra(args, dir_ + "/out");
  auto drain = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(drain.has_value()) << ReadFile(dir_ + "/out/stderr");
  EXPECT_EQ(drain->role, proto::Role::kAdmin);
  auto request = proto::DecodePayload<proto::DrainRequest>(drain->envelope.payload);
  ASSERT_TRUE(request.ok());
  EXPECT_EQ(request->host, "hostB");
  EXPECT_TRUE(request->wait);
  proto::ResizeReply reply;
  reply.phase = proto::ResizePhase::kAccepted;
  reply.generation = 6;
  fake_->Reply(*drain, MessageType::kResizeReply, reply);
  reply.phase = proto::ResizePhase::kDone;
  reply.generation = 7;
  reply.workers = 3;
  reply.layout = Layout{3, 1, 1};
  reply.downtime_ms = 41.5;
  reply.agreement_ms = 12;
  reply.rebuild_ms = 18;
  reply.transfer_ms = 6;
  reply.total_ms = 900;
  fake_->Reply(*drain, MessageType::kResizeReply, reply);
  CommandResult r = FinishElastra(pid, dir_ + "/out", kEvent);
  EXPECT_EQ(r.code, 0) << Describe(args, r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["phase"], "done");
  EXPECT_EQ(j["host"], "hostB");
  EXPECT_EQ(j["generation"], 7);
  EXPECT_EQ(j["workers"], 3);
  EXPECT_EQ(j["layout"], nlohmann::json({{"dp", 3}, {"pp", 1}, {"tp", 1}}));
  EXPECT_EQ(j["downtime_ms"], 41.5);
  EXPECT_EQ(j["total_ms"], 900);
}

TEST_F(LaunchAdmin, DrainWithoutWaitPrintsAcceptedAndAFailedOrRefusedDrainExitsOne) {
  {
    const std::vector<std::string> args = {"drain", "--state-dir", state_, "--host", "hostB"};
    const pid_t pid = StartElastra(args, dir_ + "/out");
    auto drain = fake_->Next(MessageType::kDrain, kEvent);
    ASSERT_TRUE(drain.has_value());
    EXPECT_FALSE(proto::DecodePayload<proto::DrainRequest>(drain->envelope.payload)->wait);
    proto::ResizeReply accepted;
    accepted.generation = 2;
    fake_->Reply(*drain, MessageType::kResizeReply, accepted);
    CommandResult r = FinishElastra(pid, dir_ + "/out", kEvent);
    EXPECT_EQ(r.code, 0) << Describe(args, r);
    EXPECT_EQ(nlohmann::json::parse(r.out)["phase"], "accepted") << r.out;
  }
  {
    const std::vector<std::string> args = {"drain",  "--state-dir", state_,
                                           "--host", "hostB",       "--wait"};
    const pid_t pid = StartElastra(args, dir_ + "/out");
    auto drain = fake_->Next(MessageType::kDrain, kEvent);
    ASSERT_TRUE(drain.has_value());
    proto::ResizeReply reply;
    fake_->Reply(*drain, MessageType::kResizeReply, reply);
    reply.phase = proto::ResizePhase::kFailed;
    reply.message = "no other host has free slots";
    fake_->Reply(*drain, MessageType::kResizeReply, reply);
    CommandResult r = FinishElastra(pid, dir_ + "/out", kEvent);
    EXPECT_EQ(r.code, 1) << Describe(args, r);
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["phase"], "failed");
    EXPECT_EQ(j["message"], "no other host has free slots");
  }
  {
    const std::vector<std::string> args = {"drain", "--state-dir", state_, "--host", "hostZ"};
    const pid_t pid = StartElastra(args, dir_ + "/out");
    auto drain = fake_->Next(MessageType::kDrain, kEvent);
    ASSERT_TRUE(drain.has_value());
    fake_->ReplyError(*drain, NotFoundError("no host 'hostZ' in this job"));
    CommandResult r = FinishElastra(pid, dir_ + "/out", kEvent);
    EXPECT_EQ(r.code, 1) << Describe(args, r);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find("elastra drain: refused: no host 'hostZ' in this job"), std::string::npos)
        << r.err;
  }
}

TEST_F(LaunchAdmin, DrainReadsTheOutcomeFromTheStatusWhenTheReplyNeverComes) {
  // A coordinator restarted mid-drain finishes it but no longer knows who waits: the host's state
  // in the status tells. First the host is still draining (and --timeout ends the wait), then it
  // is drained.
  proto::JobStatus st;
  st.job = fake_->info().job;
  st.state = proto::JobState::kRunning;
  st.generation = 7;
  st.layout = Layout{2, 1, 1};
  proto::HostStatus host;
  host.name = "hostB";
  host.state = proto::HostState::kDraining;
  st.hosts = {host};
  fake_->set_status(st);
  const std::vector<std::string> args = {"drain", "--state-dir", state_,      "--host",
                                         "hostB", "--wait",      "--timeout", "2"};
  {
    const pid_t pid = StartElastra(args, dir_ + "/out");
    auto drain = fake_->Next(MessageType::kDrain, kEvent);
    ASSERT_TRUE(drain.has_value());
    proto::ResizeReply accepted;
    accepted.generation = 6;
    fake_->Reply(*drain, MessageType::kResizeReply, accepted);
    std::optional<int> code;
    WaitUntil(
        [&] {
          fake_->Serve(milliseconds(20));
          return (code = ExitedCode(pid)).has_value();
        },
        kEvent);
    EXPECT_EQ(code, 1);
    EXPECT_NE(ReadFile(dir_ + "/out/stderr").find("elastra drain: not done within 2 s"),
              std::string::npos)
        << ReadFile(dir_ + "/out/stderr");
  }
  st.hosts[0].state = proto::HostState::kDrained;
  proto::GenerationRecord drained;
  drained.generation = 7;
  drained.reason = proto::GenerationReason::kDrain;
  drained.workers = {"w0", "w1"};
  drained.layout = Layout{2, 1, 1};
  drained.downtime_ms = 30;
  st.history = {drained};
  fake_->set_status(st);
  {
    const pid_t pid = StartElastra(args, dir_ + "/out");
    auto drain = fake_->Next(MessageType::kDrain, kEvent);
    ASSERT_TRUE(drain.has_value());
    proto::ResizeReply accepted;
    accepted.generation = 6;
    fake_->Reply(*drain, MessageType::kResizeReply, accepted);
    std::optional<int> code;
    WaitUntil(
        [&] {
          fake_->Serve(milliseconds(20));
          return (code = ExitedCode(pid)).has_value();
        },
        kEvent);
    EXPECT_EQ(code, 0) << ReadFile(dir_ + "/out/stderr");
    const auto j = nlohmann::json::parse(ReadFile(dir_ + "/out/stdout"));
    EXPECT_EQ(j["phase"], "done");
    EXPECT_EQ(j["generation"], 7);
    EXPECT_EQ(j["workers"], 2);
    EXPECT_EQ(j["downtime_ms"], 30);
    EXPECT_NE(j["message"].get<std::string>().find("confirmed from the job's status"),
              std::string::npos);
  }
}

TEST_F(LaunchAdmin, StatusShowsTheHostsAndTheTargetSize) {
  proto::JobStatus st;
  st.job = fake_->info().job;
  st.state = proto::JobState::kRunning;
  st.generation = 3;
  st.layout = Layout{3, 1, 1};
  st.step = 120;
  st.target_workers = 4;
  proto::WorkerStatus w;
  w.id = "w0";
  w.host = "hostA";
  w.state = proto::WorkerState::kMember;
  w.rank = 0;
  w.pid = 4242;
  w.last_heartbeat_ms_ago = 15;
  st.workers = {w};
  proto::HostStatus a;
  a.name = "hostA";
  a.address = "10.0.0.1";
  a.slots = 4;
  a.gpus = 2;
  a.workers = 3;
  a.state = proto::HostState::kUp;
  a.last_heartbeat_ms_ago = 120;
  proto::HostStatus b = a;
  b.name = "hostB";
  b.address = "10.0.0.2";
  b.workers = 0;
  b.state = proto::HostState::kLost;
  b.last_heartbeat_ms_ago = -1;
  st.hosts = {a, b};
  fake_->set_status(st);

  CommandResult r = RunServed({"status", "--state-dir", state_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("job fake-job  state running  generation 3  layout dp=3,pp=1,tp=1  step "
                       "120  workers 3 (target 4)\n"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_NE(r.out.find("HOST             ADDRESS                  SLOTS GPUS WORKERS STATE"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("hostA            10.0.0.1                     4    2       3 up      "
                       "   120 ms ago"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("hostB            10.0.0.2                     4    2       0 lost    "
                       "            -"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("4242  hostA"), std::string::npos) << r.out;  // the worker's HOST column

  CommandResult json = RunServed({"status", "--state-dir", state_, "--json"});
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["target_workers"], 4);
  ASSERT_EQ(j["hosts"].size(), 2u);
  EXPECT_EQ(j["hosts"][1]["state"], "lost");

  // Without hosts (workers started by hand or by mpirun) there is no host table, and without a
  // target the header shows the size alone.
  st.hosts.clear();
  st.target_workers = 0;
  fake_->set_status(st);
  CommandResult plain = RunServed({"status", "--state-dir", state_});
  EXPECT_EQ(plain.out.find("ADDRESS"), std::string::npos) << plain.out;
  EXPECT_NE(plain.out.find("step 120  workers 3\n"), std::string::npos) << plain.out;
}

TEST_F(LaunchAdmin, TimeoutBoundsConnectingWhenNoCoordinatorAnswers) {
  // A port that nobody listens on: bound, never listened on, closed.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  ConnectionInfo nobody = fake_->info();
  nobody.address = "tcp://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  ASSERT_TRUE(WriteConnectionInfo(state_ + "/coordinator.json", nobody).ok());
  // Each command gives up after its --timeout (not the 5 s or 60 s of its default), and says so.
  const std::vector<std::vector<std::string>> commands = {
      {"status", "--state-dir", state_, "--timeout", "300ms"},
      {"resize", "--state-dir", state_, "--workers", "2", "--wait", "--timeout", "300ms"},
      {"drain", "--state-dir", state_, "--host", "hostB", "--timeout", "300ms"}};
  for (const auto& args : commands) {
    CommandResult r = Elastra(args);
    EXPECT_EQ(r.code, 1) << Describe(args, r);
    EXPECT_NE(r.err.find("no coordinator answered at " + nobody.address + " within 300 ms"),
              std::string::npos)
        << Describe(args, r);
  }
  // Whole seconds, as before.
  const std::vector<std::string> status = {"status", "--state-dir", state_, "--timeout", "1"};
  CommandResult r = Elastra(status);
  EXPECT_NE(r.err.find("within 1000 ms"), std::string::npos) << Describe(status, r);
}

}  // namespace
}  // namespace elastra::testing
