// `elastra agent` through the binary (docs/hosts.md, "Agents"): its usage errors; the join file's
// errors; the agent's side of the protocol against a fake coordinator (registration, spawns with
// the worker environment, exit reports, re-registration, heartbeats, Shutdown, the drain on
// SIGTERM, a silent coordinator); and against a real `elastra coordinator`.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "protocol/keys.h"
#include "tests/launch/elastra_command.h"
#include "tests/launch/fake_coordinator.h"

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using proto::MessageType;
using std::chrono::milliseconds;
using std::chrono::seconds;

// Generous: these machines are small and loaded.
constexpr milliseconds kEvent = seconds(20);

// A worker that writes its ELASTRA_ environment to DIR/env.ID, then runs until DIR/stop.ID exists
// and exits with the code written there.
std::string WriteWorkerScript(const std::string& dir) {
  const std::string path = dir + "/worker.sh";
  std::ofstream(path) << "#!/bin/sh\n"
                         "d=$1; id=$ELASTRA_WORKER_ID\n"
                         "env | grep '^ELASTRA_' | sort > \"$d/env.$id.tmp\"\n"
                         "mv \"$d/env.$id.tmp\" \"$d/env.$id\"\n"
                         "while [ ! -s \"$d/stop.$id\" ]; do sleep 0.02; done\n"
                         "exit $(cat \"$d/stop.$id\")\n";
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

// KEY=VALUE lines into a map.
std::map<std::string, std::string> ParseEnv(const std::string& text) {
  std::map<std::string, std::string> env;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

template <class T>
T Decode(const FakeCoordinator::Message& m) {
  auto decoded = proto::DecodePayload<T>(m.envelope.payload);
  EXPECT_TRUE(decoded.ok()) << decoded.status();
  return decoded.ok() ? *decoded : T{};
}

class LaunchAgent : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ + "/agent");
    auto fake = FakeCoordinator::Start();
    ASSERT_TRUE(fake.ok()) << fake.status();
    fake_ = std::move(fake).value();
    join_ = dir_ + "/join.json";
    ASSERT_TRUE(WriteJoinFile(join_, fake_->info()).ok());
    script_ = WriteWorkerScript(dir_);
  }

  void TearDown() override {
    if (agent_ > 0 && !AgentExited()) {
      kill(agent_, SIGKILL);
      FinishElastra(agent_, dir_ + "/agent");
    }
  }

  std::vector<std::string> AgentArgs(const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {"agent", "--join", join_, "--name", "hostA", "--slots", "3"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", script_, dir_});
    return args;
  }
  void StartAgent(const std::vector<std::string>& extra = {}) {
    agent_ = StartElastra(AgentArgs(extra), dir_ + "/agent", {{"ELASTRA_HEARTBEAT_MS", "50"}});
  }
  CommandResult FinishAgent() {
    CommandResult r;
    if (agent_code_) {  // reaped already
      r.code = *agent_code_;
      r.out = ReadFile(dir_ + "/agent/stdout");
      r.err = AgentLog();
    } else {
      r = FinishElastra(agent_, dir_ + "/agent", kEvent);
    }
    agent_ = -1;
    agent_code_.reset();
    return r;
  }
  // Whether the agent has exited (reaping it once; its code kept for FinishAgent).
  bool AgentExited() {
    if (!agent_code_) agent_code_ = ExitedCode(agent_);
    return agent_code_.has_value();
  }
  std::string AgentLog() const { return ReadFile(dir_ + "/agent/stderr"); }

  // Waits for the agent's registration and accepts it.
  FakeCoordinator::Message AcceptRegistration() {
    auto reg = fake_->Next(MessageType::kAgentRegister, kEvent);
    EXPECT_TRUE(reg.has_value()) << "no registration\n" << AgentLog();
    if (!reg) return {};
    fake_->Reply(*reg, MessageType::kAck, proto::Ack{});
    return *reg;
  }
  // Asks the agent to start `ids` and waits until each wrote its environment.
  void SpawnAndWait(const std::string& identity, const std::vector<std::string>& ids) {
    fake_->Push(identity, MessageType::kSpawnRequest, proto::SpawnRequest{ids});
    for (const std::string& id : ids) {
      EXPECT_TRUE(WaitUntil([&] { return fs::exists(dir_ + "/env." + id); }, kEvent))
          << "worker " << id << " did not start\n"
          << AgentLog();
    }
  }
  void StopWorker(const std::string& id, int code) {
    std::ofstream(dir_ + "/stop." + id) << code << "\n";
  }
  proto::ProcessExited NextExit() {
    auto m = fake_->Next(MessageType::kProcessExited, kEvent);
    EXPECT_TRUE(m.has_value()) << "no exit report\n" << AgentLog();
    return m ? Decode<proto::ProcessExited>(*m) : proto::ProcessExited{};
  }

  std::string dir_, join_, script_;
  std::unique_ptr<FakeCoordinator> fake_;
  pid_t agent_ = -1;
  std::optional<int> agent_code_;
};

TEST_F(LaunchAgent, BadUsageExitsTwoNamingWhatIsWrong) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;  // in stderr
  };
  const std::vector<Case> cases = {
      {{"agent", "--slots", "2", "--", "/bin/true"}, "elastra agent: --join is required"},
      {{"agent", "--join", join_, "--", "/bin/true"}, "elastra agent: --slots is required"},
      {{"agent", "--join", join_, "--slots", "0", "--", "/bin/true"},
       "--slots must be between 1 and 4096, got 0"},
      {{"agent", "--join", join_, "--slots", "two", "--", "/bin/true"},
       "--slots must be an integer, got 'two'"},
      {{"agent", "--join", join_, "--slots", "2"}, "elastra agent: no program given"},
      {{"agent", "--join", join_, "--slots", "2", "--gpus", "many", "--", "/bin/true"},
       "--gpus must be an integer, got 'many'"},
      {{"agent", "--join", join_, "--slots", "2", "--name", "", "--", "/bin/true"},
       "--name must be a non-empty word without spaces, got ''"},
      {{"agent", "--join", join_, "--slots", "2", "--address", "10.0.0.1 10.0.0.2", "--",
        "/bin/true"},
       "--address must be a non-empty word without spaces"},
      {{"agent", "--join", join_, "--slots", "2", "--coordinator-timeout", "0", "--", "/bin/true"},
       "--coordinator-timeout must be between 1 and 86400, got 0"},
      {{"agent", "--join", join_, "--slots", "2", "--drain-timeout", "x", "--", "/bin/true"},
       "--drain-timeout must be an integer, got 'x'"},
      {{"agent", "--join", join_, "--slots", "2", "--verbose", "--", "/bin/true"},
       "elastra agent: unknown flag --verbose"},
  };
  for (const Case& c : cases) {
    CommandResult r = Elastra(c.args);
    EXPECT_EQ(r.code, 2) << Describe(c.args, r);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << Describe(c.args, r);
    EXPECT_TRUE(r.out.empty()) << Describe(c.args, r);
  }
  // Nothing reached the coordinator.
  EXPECT_FALSE(fake_->Next(MessageType::kAgentRegister, milliseconds(100)).has_value());
}

TEST_F(LaunchAgent, AJoinFileThatIsMissingOrMalformedExitsThreeSayingWhy) {
  const std::string missing = dir_ + "/nowhere/join.json";
  const std::string malformed = dir_ + "/malformed.json";
  std::ofstream(malformed) << "{\"address\": ";
  const std::string array = dir_ + "/array.json";
  std::ofstream(array) << "[1, 2]\n";
  // A coordinator.json that someone stripped of its worker keys: not a join file.
  const std::string admin_only = dir_ + "/admin_only.json";
  ConnectionInfo no_worker = fake_->info();
  no_worker.worker = KeyPair{};
  ASSERT_TRUE(WriteConnectionInfo(admin_only, no_worker).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {missing, "kNotFound"},
      {malformed, "not a JSON object"},
      {array, "not a JSON object"},
      {admin_only, "has no worker key pair (\"worker\"): not a join file"}};
  for (const auto& [file, why] : cases) {
    const std::vector<std::string> args = {"agent", "--join", file,    "--slots",
                                           "2",     "--",     script_, dir_};
    CommandResult r = Elastra(args);
    EXPECT_EQ(r.code, 3) << Describe(args, r);
    EXPECT_NE(r.err.find("elastra agent: cannot join with " + file + ": "), std::string::npos)
        << Describe(args, r);
    EXPECT_NE(r.err.find(why), std::string::npos) << Describe(args, r);
  }
  EXPECT_FALSE(fake_->Next(MessageType::kAgentRegister, milliseconds(100)).has_value());
  EXPECT_TRUE(fs::is_empty(dir_ + "/agent"));
}

TEST_F(LaunchAgent, NoCoordinatorAtTheAddressExitsThreeWithinTheBound) {
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
  ASSERT_TRUE(WriteJoinFile(join_, nobody).ok());
  const auto start = std::chrono::steady_clock::now();
  StartAgent({"--coordinator-timeout", "1"});
  CommandResult r = FinishAgent();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("no coordinator answered at " + nobody.address + " within 1000 ms"),
            std::string::npos)
      << r.err;
  EXPECT_LT(took, seconds(15));
  EXPECT_FALSE(fs::exists(dir_ + "/env.w0"));
}

TEST_F(LaunchAgent, AJoinFileWithTheWrongServerKeyIsRefused) {
  ConnectionInfo wrong = fake_->info();
  auto other = GenerateKeyPair();
  ASSERT_TRUE(other.ok());
  wrong.server_public = other->public_key;
  ASSERT_TRUE(WriteJoinFile(join_, wrong).ok());
  StartAgent({"--coordinator-timeout", "5"});
  fake_->Serve(milliseconds(200));  // lets the handshake reach the fake, which cannot decrypt it
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("refused this client's key"), std::string::npos) << r.err;
}

TEST_F(LaunchAgent, RegistersStartsWorkersWithTheirEnvironmentAndReportsTheirExits) {
  StartAgent({"--address", "10.1.2.3", "--gpus", "2", "--state-dir", dir_ + "/state"});
  FakeCoordinator::Message reg = AcceptRegistration();
  EXPECT_EQ(reg.role, proto::Role::kWorker);  // the join file's key, never an admin's
  EXPECT_EQ(reg.envelope.sender, "agent-hostA");
  EXPECT_EQ(reg.envelope.job, fake_->info().job);
  const auto registration = Decode<proto::AgentRegister>(reg);
  EXPECT_EQ(registration.host, "hostA");
  EXPECT_EQ(registration.max_workers, 3);
  EXPECT_EQ(registration.address, "10.1.2.3");
  EXPECT_EQ(registration.gpus, 2);
  // Once registered, one JSON line on stdout.
  ASSERT_TRUE(WaitUntil(
      [&] { return ReadFile(dir_ + "/agent/stdout").find('\n') != std::string::npos; }, kEvent));
  const auto ready = nlohmann::json::parse(ReadFile(dir_ + "/agent/stdout"));
  EXPECT_EQ(ready["host"], "hostA");
  EXPECT_EQ(ready["address"], "10.1.2.3");
  EXPECT_EQ(ready["slots"], 3);
  EXPECT_EQ(ready["gpus"], 2);
  EXPECT_EQ(ready["coordinator"], fake_->info().address);

  SpawnAndWait(reg.identity, {"w7", "w8"});
  const auto env7 = ParseEnv(ReadFile(dir_ + "/env.w7"));
  const auto env8 = ParseEnv(ReadFile(dir_ + "/env.w8"));
  const ConnectionInfo& info = fake_->info();
  EXPECT_EQ(env7.at("ELASTRA_COORDINATOR"), info.address);
  EXPECT_EQ(env7.at("ELASTRA_JOB"), info.job);
  EXPECT_EQ(env7.at("ELASTRA_WORKER_ID"), "w7");
  EXPECT_EQ(env8.at("ELASTRA_WORKER_ID"), "w8");
  EXPECT_EQ(env7.at("ELASTRA_SERVER_KEY"), info.server_public);
  EXPECT_EQ(env7.at("ELASTRA_WORKER_PUBLIC_KEY"), info.worker.public_key);
  EXPECT_EQ(env7.at("ELASTRA_WORKER_SECRET_KEY"), info.worker.secret_key);
  EXPECT_EQ(env7.at("ELASTRA_HOST"), "hostA");
  EXPECT_EQ(env7.at("ELASTRA_BIND_HOST"), "10.1.2.3");
  EXPECT_EQ(env7.at("ELASTRA_STATE_DIR"), dir_ + "/state");
  EXPECT_NE(env7.at("ELASTRA_DEVICE"), env8.at("ELASTRA_DEVICE"));  // one GPU each
  for (const auto* env : {&env7, &env8}) {
    const std::string device = env->at("ELASTRA_DEVICE");
    EXPECT_TRUE(device == "0" || device == "1") << device;
  }

  // Each exit is reported with its code.
  StopWorker("w7", 3);
  const proto::ProcessExited exited = NextExit();
  EXPECT_EQ(exited.worker_id, "w7");
  EXPECT_EQ(exited.exit_code, 3);
  EXPECT_EQ(exited.signal, 0);

  // It registers again every few seconds, and says so when the coordinator refuses.
  auto again = fake_->Next(MessageType::kAgentRegister, kEvent);
  ASSERT_TRUE(again.has_value()) << AgentLog();
  EXPECT_EQ(Decode<proto::AgentRegister>(*again).host, "hostA");
  fake_->ReplyError(*again, FailedPreconditionError("host hostA is not welcome"));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return AgentLog().find(
                   "the coordinator refused the registration of host hostA: "
                   "kFailedPrecondition: host hostA is not welcome") != std::string::npos;
      },
      kEvent))
      << AgentLog();
  EXPECT_GT(fake_->heartbeats("agent-hostA"), 0);

  // The job finished: the agent waits for its last worker to finish, then exits 0.
  fake_->Push(reg.identity, MessageType::kShutdown, proto::Shutdown{0, "every member finished"});
  ASSERT_TRUE(WaitUntil(
      [&] {
        return AgentLog().find("job over for host hostA (every member finished)") !=
               std::string::npos;
      },
      kEvent))
      << AgentLog();
  EXPECT_FALSE(AgentExited()) << "exited while worker w8 still ran\n" << AgentLog();
  StopWorker("w8", 0);
  const proto::ProcessExited last = NextExit();
  EXPECT_EQ(last.worker_id, "w8");
  EXPECT_EQ(last.exit_code, 0);
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 0) << r.err;
}

// The coordinator counts only the workers it knows: after a partition heals it may ask for
// replacements while the workers it declared lost still stop. The agent never runs more workers
// than its slots (--slots 3 here): the fourth start waits until a worker exits.
TEST_F(LaunchAgent, AStartBeyondTheSlotsWaitsUntilAWorkerExits) {
  StartAgent();
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1", "w2", "w3"});
  fake_->Push(reg.identity, MessageType::kSpawnRequest, proto::SpawnRequest{{"w4"}});
  ASSERT_TRUE(WaitUntil(
      [&] {
        return AgentLog().find(
                   "worker w4 waits for a free slot: 3 workers still run on host "
                   "hostA (3 slots)") != std::string::npos;
      },
      kEvent))
      << AgentLog();
  // No worker has exited yet, so none may have started.
  EXPECT_EQ(AgentLog().find("started worker w4"), std::string::npos) << AgentLog();
  EXPECT_FALSE(fs::exists(dir_ + "/env.w4"));

  StopWorker("w2", 1);
  EXPECT_EQ(NextExit().worker_id, "w2");
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(dir_ + "/env.w4"); }, kEvent))
      << "w4 did not start once a slot was free\n"
      << AgentLog();
  EXPECT_EQ(ParseEnv(ReadFile(dir_ + "/env.w4")).at("ELASTRA_WORKER_ID"), "w4");

  // A start still waiting when the job ends is refused and reported, as any start after the end.
  fake_->Push(reg.identity, MessageType::kSpawnRequest, proto::SpawnRequest{{"w5"}});
  ASSERT_TRUE(WaitUntil(
      [&] { return AgentLog().find("worker w5 waits for a free slot") != std::string::npos; },
      kEvent))
      << AgentLog();
  fake_->Push(reg.identity, MessageType::kShutdown, proto::Shutdown{1, "the job failed"});
  std::set<std::string> reported;
  for (int i = 0; i < 4; ++i) reported.insert(NextExit().worker_id);
  EXPECT_EQ(reported, (std::set<std::string>{"w1", "w3", "w4", "w5"}));
  EXPECT_FALSE(fs::exists(dir_ + "/env.w5"));
  EXPECT_EQ(FinishAgent().code, 1);
}

TEST_F(LaunchAgent, AFailedJobStopsTheWorkersAtOnceAndExitsOne) {
  StartAgent();
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  fake_->Push(reg.identity, MessageType::kShutdown, proto::Shutdown{1, "the job failed"});
  const proto::ProcessExited exited = NextExit();
  EXPECT_EQ(exited.worker_id, "w1");
  EXPECT_EQ(exited.signal, SIGTERM);
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 1) << r.err;
}

TEST_F(LaunchAgent, SigtermDrainsTheHostAndExitsZeroOnceTheJobLeftIt) {
  StartAgent();
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  ASSERT_EQ(kill(agent_, SIGTERM), 0);
  auto drain = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(drain.has_value()) << "no drain request\n" << AgentLog();
  EXPECT_EQ(drain->role, proto::Role::kWorker);
  EXPECT_EQ(drain->envelope.sender, "agent-hostA");
  const auto request = Decode<proto::DrainRequest>(*drain);
  EXPECT_EQ(request.host, "hostA");
  EXPECT_TRUE(request.wait);
  proto::ResizeReply accepted;
  accepted.phase = proto::ResizePhase::kAccepted;
  accepted.generation = 4;
  fake_->Reply(*drain, MessageType::kResizeReply, accepted);

  // Draining, it starts nothing more, and says so at once.
  fake_->Push(reg.identity, MessageType::kSpawnRequest, proto::SpawnRequest{{"w9"}});
  const proto::ProcessExited refused = NextExit();
  EXPECT_EQ(refused.worker_id, "w9");
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_FALSE(fs::exists(dir_ + "/env.w9"));

  // The worker hands off and leaves by itself: the agent does not signal it.
  StopWorker("w1", 0);
  const proto::ProcessExited left = NextExit();
  EXPECT_EQ(left.worker_id, "w1");
  EXPECT_EQ(left.exit_code, 0);
  EXPECT_EQ(left.signal, 0);
  EXPECT_FALSE(AgentExited()) << "exited before the drain was done\n" << AgentLog();
  proto::ResizeReply done;
  done.phase = proto::ResizePhase::kDone;
  done.generation = 5;
  done.workers = 2;
  fake_->Reply(*drain, MessageType::kResizeReply, done);
  fake_->Push(reg.identity, MessageType::kShutdown, proto::Shutdown{0, "host hostA drained"});
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("drained: the job left host hostA (generation 5)"), std::string::npos)
      << r.err;
}

TEST_F(LaunchAgent, ARefusedDrainStopsTheWorkersAndExitsOne) {
  StartAgent();
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  ASSERT_EQ(kill(agent_, SIGINT), 0);
  auto drain = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(drain.has_value()) << AgentLog();
  fake_->ReplyError(*drain, InvalidArgumentError("the coordinator does not accept Drain messages"));
  const proto::ProcessExited exited = NextExit();
  EXPECT_EQ(exited.worker_id, "w1");
  EXPECT_EQ(exited.signal, SIGTERM);
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("the drain of host hostA failed: kInvalidArgument: the coordinator does "
                       "not accept Drain messages; stopping the workers"),
            std::string::npos)
      << r.err;
}

// The children of `pid` (its main thread forks the workers).
std::vector<pid_t> Children(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t child; in >> child;) out.push_back(child);
  return out;
}

// Slurm ends a step on a node with SIGTERM to every process of the step (docs/slurm.md): with
// --workers-ignore-sigterm the workers go on, the agent drains the host, asks again while the
// coordinator refuses because another change is in flight, ignores the SIGTERM srun forwards, and
// exits 0 once its worker handed off and left by itself.
TEST_F(LaunchAgent, WithWorkersIgnoringSigtermASigtermToEveryProcessDrainsTheHost) {
  StartAgent({"--workers-ignore-sigterm"});
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  const std::vector<pid_t> workers = Children(agent_);
  ASSERT_EQ(workers.size(), 1u) << AgentLog();
  ASSERT_EQ(kill(agent_, SIGTERM), 0);
  ASSERT_EQ(kill(workers[0], SIGTERM), 0);
  auto refused = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(refused.has_value()) << "no drain request\n" << AgentLog();
  fake_->ReplyError(*refused, BusyError("another reconfiguration is in progress "
                                        "(drain); retry when it is done"));
  auto drain = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(drain.has_value()) << "the refused drain was not asked again\n" << AgentLog();
  proto::ResizeReply accepted;
  accepted.phase = proto::ResizePhase::kAccepted;
  fake_->Reply(*drain, MessageType::kResizeReply, accepted);
  ASSERT_EQ(kill(agent_, SIGTERM), 0);  // srun forwards the SIGTERM it got

  // The worker was not stopped by either signal: its first exit is the one it chose.
  StopWorker("w1", 0);
  const proto::ProcessExited left = NextExit();
  EXPECT_EQ(left.worker_id, "w1");
  EXPECT_EQ(left.exit_code, 0);
  EXPECT_EQ(left.signal, 0);
  proto::ResizeReply done;
  done.phase = proto::ResizePhase::kDone;
  done.generation = 5;
  fake_->Reply(*drain, MessageType::kResizeReply, done);
  fake_->Push(reg.identity, MessageType::kShutdown, proto::Shutdown{0, "host hostA drained"});
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the drain waits: another reconfiguration is in progress"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("signal 15 again: the drain of host hostA goes on"), std::string::npos)
      << r.err;
}

// Workers that ignore SIGTERM are stopped with SIGINT (here: a drain the coordinator refuses for
// good).
TEST_F(LaunchAgent, WorkersIgnoringSigtermAreStoppedWithSigint) {
  StartAgent({"--workers-ignore-sigterm"});
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  ASSERT_EQ(kill(agent_, SIGTERM), 0);
  auto drain = fake_->Next(MessageType::kDrain, kEvent);
  ASSERT_TRUE(drain.has_value()) << AgentLog();
  fake_->ReplyError(*drain, NotFoundError("no host 'hostA' in this job"));
  const proto::ProcessExited exited = NextExit();
  EXPECT_EQ(exited.worker_id, "w1");
  EXPECT_EQ(exited.signal, SIGINT);
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 1) << r.err;
}

TEST_F(LaunchAgent, ACoordinatorSilentForTheTimeoutEndsTheAgentWithThree) {
  StartAgent({"--coordinator-timeout", "2"});
  FakeCoordinator::Message reg = AcceptRegistration();
  SpawnAndWait(reg.identity, {"w1"});
  // From here on the fake answers nothing (Next keeps the registrations unanswered).
  const proto::ProcessExited exited = NextExit();
  EXPECT_EQ(exited.worker_id, "w1");
  EXPECT_EQ(exited.signal, SIGTERM);
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("no answer from the coordinator at " + fake_->info().address +
                       " for 2 s; stopping the workers"),
            std::string::npos)
      << r.err;
}

// Against a real coordinator: the agent joins with the join.json it wrote (the worker key), its
// host is listed, and the coordinator places the first generation's worker on it.
TEST_F(LaunchAgent, ARealCoordinatorPlacesTheFirstWorkerOnTheAgentsHost) {
  const std::string state = dir_ + "/state";
  fs::create_directories(dir_ + "/coordinator");
  const pid_t coordinator = StartElastra({"coordinator", "--state-dir", state, "--workers", "1"},
                                         dir_ + "/coordinator", {{"ELASTRA_HEARTBEAT_MS", "50"}});
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(state + "/coordinator.json"); }, kEvent))
      << ReadFile(dir_ + "/coordinator/stderr");
  join_ = state + "/join.json";
  StartAgent({"--coordinator-timeout", "2"});
  std::string started;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const auto& f : fs::directory_iterator(dir_)) {
          const std::string name = f.path().filename();
          if (name.rfind("env.", 0) == 0 && name.find(".tmp") == std::string::npos) {
            started = name.substr(4);
            return true;
          }
        }
        return false;
      },
      kEvent))
      << AgentLog() << ReadFile(dir_ + "/coordinator/stderr");
  auto env = ParseEnv(ReadFile(dir_ + "/env." + started));
  EXPECT_EQ(env["ELASTRA_HOST"], "hostA");
  EXPECT_EQ(env["ELASTRA_WORKER_ID"], started);
  CommandResult st = Elastra({"status", "--state-dir", state, "--json"});
  ASSERT_EQ(st.code, 0) << st.err;
  auto status = nlohmann::json::parse(st.out, nullptr, false);
  ASSERT_TRUE(status.is_object()) << st.out;
  ASSERT_EQ(status["hosts"].size(), 1u) << st.out;
  EXPECT_EQ(status["hosts"][0].value("name", ""), "hostA") << st.out;
  EXPECT_EQ(status["hosts"][0].value("slots", 0), 3) << st.out;
  // The coordinator goes away: the agent stops its worker and says it lost the coordinator.
  kill(coordinator, SIGKILL);
  FinishElastra(coordinator, dir_ + "/coordinator");
  CommandResult r = FinishAgent();
  EXPECT_EQ(r.code, 3) << r.err;
}

}  // namespace
}  // namespace elastra::testing
