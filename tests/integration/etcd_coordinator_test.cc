// End-to-end: `elastra coordinator --etcd` keeps the job's journal and keys in etcd (docs/ha.md).
// A real job (the coordinator, one `elastra agent`, two train_mlp workers) runs against a
// single-member etcd the test starts; the coordinator is SIGKILLed and its state directory
// deleted, and a coordinator started again with the same --etcd and job name takes the job over
// from etcd alone: on the same address, with the same keys, the same worker processes, and the
// run matches `train_mlp --reference` with every sample applied once. Skipped only when there is
// no etcd binary (launch/install_deps.sh installs Debian's etcd-server; ELASTRA_REQUIRE_ETCD=1
// makes that a failure). With two coordinators of the job on etcd, one leads and the other waits
// as a standby without binding; the standby takes the job over when the leader is SIGKILLed, and
// a leader stopped past its lease exits when woken rather than act beside the new leader.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

#include "tests/integration/etcd_job_fixture.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// What every process the test starts runs with: 100 ms heartbeats.
const std::vector<std::string> kHeartbeatEnv = {"ELASTRA_HEARTBEAT_MS=100"};

// Polls until `pred` holds for the text of `path`.
bool WaitForText(const std::string& path, const std::function<bool(const std::string&)>& pred,
                 seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred(ReadFile(path))) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The worker pids of the current members, by rank.
std::vector<int64_t> MemberPids(const nlohmann::json& status) {
  std::vector<std::pair<int, int64_t>> by_rank;
  for (const auto& w : status.value("workers", nlohmann::json::array())) {
    if (w.value("state", std::string()) == "member") {
      by_rank.emplace_back(w.value("rank", -1), w.value("pid", int64_t{-1}));
    }
  }
  std::sort(by_rank.begin(), by_rank.end());
  std::vector<int64_t> pids;
  for (const auto& p : by_rank) pids.push_back(p.second);
  return pids;
}

// True when `host` is listed and up.
bool HostUp(const nlohmann::json& status, const std::string& host) {
  for (const auto& h : status.value("hosts", nlohmann::json::array())) {
    if (h.value("name", std::string()) == host) return h.value("state", std::string()) == "up";
  }
  return false;
}

// The workers' program arguments: train until the stop file appears, a commit every 5 steps.
const std::vector<std::string> kTrainArgs = {"--steps",        std::to_string(kUntilStopped),
                                             "--step-time-ms", "15",
                                             "--global-batch", "48",
                                             "--hidden",       "24",
                                             "--commit-every", "5"};

class EtcdCoordinator : public EtcdJobTest {
 protected:
  EtcdCoordinator()
      : EtcdJobTest("/tmp/elastra_etcd_it_XXXXXX", {&agent_, &coordinator_, &standby_}) {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(EtcdJobTest::SetUp());
    if (IsSkipped()) return;
    leader_state_ = state();
  }

  std::string state() const { return dir_ + "/state"; }
  std::string coordinator_log() const { return dir_ + "/coordinator.log"; }
  std::string standby_state() const { return dir_ + "/standby"; }
  std::string standby_log() const { return dir_ + "/standby.log"; }
  std::string Logs() const {
    return "--- coordinator.log\n" + ReadFile(coordinator_log()) + "--- standby.log\n" +
           ReadFile(standby_log()) + "--- agent.log\n" + ReadFile(dir_ + "/agent.log");
  }

  // `elastra coordinator --etcd` of the job, its state in `state_dir` and its output appended to
  // `log`, in a process group of its own (TearDown kills the group).
  pid_t SpawnCoordinator(const std::string& state_dir, const std::string& log) {
    std::vector<std::string> argv = {ElastraBinary(), "coordinator", "--state-dir", state_dir,
                                     "--workers",     "2",           "--job",       "etcdjob",
                                     "--etcd",        etcd_.url(),   "--leader-ttl", "1"};
    argv.insert(argv.end(), coordinator_args_.begin(), coordinator_args_.end());
    return SpawnLogged(argv, log, kHeartbeatEnv, ProcessGroup::kOwn);
  }

  // The same command each time; waits for its `n`th ready line.
  void StartCoordinator(size_t n) {
    coordinator_ = SpawnCoordinator(state(), coordinator_log());
    ASSERT_TRUE(WaitForText(
        coordinator_log(), [n](const std::string& t) { return Count(t, "{\"address\"") >= n; },
        seconds(30)))
        << Logs();
  }

  // One `elastra agent` on hostA with two train_mlp workers, joining with a copy of join.json
  // (as an operator gives it to another host), in a process group of its own.
  void StartAgent(const std::vector<std::string>& args) {
    fs::copy_file(state() + "/join.json", dir_ + "/join.json");
    std::vector<std::string> agent = {ElastraBinary(), "agent", "--join", dir_ + "/join.json",
                                      "--name", "hostA", "--slots", "2", "--coordinator-timeout",
                                      "60", "--", TrainBinary(), "--log", dir_ + "/run.jsonl",
                                      "--stop-file", dir_ + "/stop"};
    agent.insert(agent.end(), args.begin(), args.end());
    agent_ = SpawnLogged(agent, dir_ + "/agent.log", kHeartbeatEnv, ProcessGroup::kOwn);
  }

  // The status of the coordinator whose state directory is leader_state_.
  nlohmann::json Status() {
    CommandResult r =
        RunShell(ElastraBinary() + " status --state-dir " + leader_state_ + " --json");
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() ? j : nlohmann::json::object();
  }
  bool WaitFor(const std::function<bool(const nlohmann::json&)>& pred, seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (pred(Status())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // A second coordinator of the job, on another state directory as on another host, started
  // while the first leads: a standby that binds nothing. Then an agent with two workers trains 20
  // steps. Sets `address` to the one the job published.
  void StartLeaderAndStandby(std::string* address) {
    ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
    standby_ = SpawnCoordinator(standby_state(), standby_log());
    ASSERT_TRUE(WaitForText(
        standby_log(),
        [](const std::string& t) { return t.find("standby: job etcdjob is led by") != t.npos; },
        seconds(30)))
        << Logs();
    StartAgent(kTrainArgs);
    ASSERT_TRUE(WaitFor([](const nlohmann::json& j) { return j.value("step", int64_t{-1}) >= 20; },
                        seconds(60)))
        << Logs();
    const std::string log = ReadFile(standby_log());
    EXPECT_NE(log.find("\"role\":\"standby\""), std::string::npos) << log;
    EXPECT_EQ(log.find("{\"address\""), std::string::npos) << log;
    EXPECT_FALSE(fs::exists(standby_state() + "/coordinator.json"));
    *address = nlohmann::json::parse(ReadFile(dir_ + "/join.json")).value("address", std::string());
    ASSERT_FALSE(address->empty());
  }

  // After a takeover, once the job applied `step`: waits until it trained 10 steps past it with
  // the agent's host up again (it registers again within its period), and checks that it is the
  // job of `before` going on: the same generation and worker processes.
  void ExpectTheJobGoesOn(int64_t step, const nlohmann::json& before) {
    ASSERT_TRUE(WaitFor(
        [step](const nlohmann::json& j) {
          return j.value("step", int64_t{-1}) > step + 10 && HostUp(j, "hostA");
        },
        seconds(60)))
        << Logs();
    const nlohmann::json after = Status();
    EXPECT_EQ(after.value("generation", uint64_t{0}), before.value("generation", uint64_t{1}));
    EXPECT_EQ(MemberPids(after), MemberPids(before));
  }

  // Stops the job (the workers' stop file) and checks that it ends well on `coordinator`: the
  // run matches `train_mlp --reference` with every sample applied once, in one generation (no
  // worker was restarted and no recovery was needed).
  void StopAndCheck(pid_t* coordinator, const std::vector<std::string>& args) {
    std::ofstream(dir_ + "/stop") << "stop\n";
    EXPECT_EQ(WaitExit(*coordinator, seconds(60)), 0) << Logs();
    *coordinator = -1;
    EXPECT_EQ(WaitExit(agent_, seconds(60)), 0) << Logs();
    agent_ = -1;
    auto run = ExpectStoppedLogMatchesReference(dir_ + "/run.jsonl", dir_ + "/ref.jsonl", args);
    EXPECT_EQ(run.applied.size(), static_cast<size_t>(StepsApplied(dir_ + "/run.jsonl")));
    for (const auto& applied : run.applied) {
      EXPECT_EQ(applied.second.generation, 1u) << applied.first;
    }
  }

  std::string leader_state_;                   // the state directory Status() reads
  std::vector<std::string> coordinator_args_;  // more flags for every coordinator of the test
  pid_t coordinator_ = -1;
  pid_t standby_ = -1;
  pid_t agent_ = -1;
};

TEST_F(EtcdCoordinator, ACoordinatorWithoutItsStateDirectoryTakesTheJobOverFromEtcd) {
  const std::vector<std::string>& args = kTrainArgs;
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  const std::string first = ReadFile(coordinator_log());
  EXPECT_NE(first.find("\"journal\":\"etcd " + etcd_.url() + " /elastra/etcdjob/\""),
            std::string::npos)
      << first;
  EXPECT_NE(first.find("journal: etcd " + etcd_.url() + " /elastra/etcdjob/"), std::string::npos)
      << first;
  EXPECT_FALSE(fs::exists(state() + "/journal.bin"));
  StartAgent(args);
  ASSERT_TRUE(WaitFor([](const nlohmann::json& j) { return j.value("step", int64_t{-1}) >= 20; },
                      seconds(60)))
      << Logs();
  const nlohmann::json before = Status();
  const std::vector<int64_t> pids = MemberPids(before);
  ASSERT_EQ(pids.size(), 2u) << before.dump();
  // Where the agents and workers reach the coordinator: where the new one must be.
  const std::string address =
      nlohmann::json::parse(ReadFile(dir_ + "/join.json")).value("address", std::string());
  ASSERT_FALSE(address.empty());

  // The coordinator's host is gone, as far as this job can tell: its process and its disk.
  ASSERT_EQ(kill(coordinator_, SIGKILL), 0);
  waitpid(coordinator_, nullptr, 0);
  coordinator_ = -1;
  const int64_t step_at_kill = StepsApplied(dir_ + "/run.jsonl");
  fs::remove_all(state());
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::string log = ReadFile(coordinator_log());
  EXPECT_NE(log.find("has a journal on etcd"), std::string::npos) << log;
  EXPECT_NE(log.find("taking it over on " + address), std::string::npos) << log;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(state() + "/join.json")).value("address", ""), address);
  EXPECT_NE(log.find("took back job etcdjob"), std::string::npos) << log;

  // The same job goes on: the same generation and worker processes, training past the kill, and
  // the agent's host known again.
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobGoesOn(step_at_kill, before));
  EXPECT_EQ(Status().value("state", std::string()), "running");

  StopAndCheck(&coordinator_, args);
}

// With the journal compacted every 4 records, so that the standby takes over from a snapshot.
TEST_F(EtcdCoordinator, AStandbyTakesTheJobOverWhenTheLeaderDies) {
  coordinator_args_ = {"--journal-compact-records", "4"};
  std::string address;
  ASSERT_NO_FATAL_FAILURE(StartLeaderAndStandby(&address));
  // The first generation's commit ends the change: the records so far become a snapshot.
  ASSERT_TRUE(WaitForText(
      coordinator_log(),
      [](const std::string& t) { return t.find("journal compacted: the records before") != t.npos; },
      seconds(30)))
      << Logs();
  const nlohmann::json before = Status();
  const std::vector<int64_t> pids = MemberPids(before);
  ASSERT_EQ(pids.size(), 2u) << before.dump();

  // The leader's host is gone. The standby leads once its lease expired (1 s here).
  ASSERT_EQ(kill(coordinator_, SIGKILL), 0);
  waitpid(coordinator_, nullptr, 0);
  coordinator_ = -1;
  const int64_t step_at_kill = StepsApplied(dir_ + "/run.jsonl");
  ASSERT_TRUE(WaitForText(
      standby_log(), [](const std::string& t) { return t.find("{\"address\"") != t.npos; },
      seconds(30)))
      << Logs();
  const std::string log = ReadFile(standby_log());
  EXPECT_NE(log.find("leading job etcdjob"), std::string::npos) << log;
  EXPECT_NE(log.find("taking it over on " + address), std::string::npos) << log;
  EXPECT_NE(log.find("\"role\":\"leader\""), std::string::npos) << log;
  EXPECT_EQ(nlohmann::json::parse(ReadFile(standby_state() + "/join.json")).value("address", ""),
            address);
  leader_state_ = standby_state();
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobGoesOn(step_at_kill, before));
  StopAndCheck(&standby_, kTrainArgs);
}

// A leader stopped (SIGSTOP) past its lease, as a host that froze or was cut off, is deposed; woken
// (SIGCONT) while the standby leads, it exits with the lost-leadership status instead of acting
// beside the new leader, and the job goes on under the new one.
TEST_F(EtcdCoordinator, ALeaderWokenAfterItsLeaseExpiredExits) {
  std::string address;
  ASSERT_NO_FATAL_FAILURE(StartLeaderAndStandby(&address));
  const nlohmann::json before = Status();
  ASSERT_EQ(MemberPids(before).size(), 2u);

  ASSERT_EQ(kill(coordinator_, SIGSTOP), 0);
  ASSERT_TRUE(WaitForText(
      standby_log(), [](const std::string& t) { return t.find("leading job etcdjob") != t.npos; },
      seconds(30)))
      << Logs();
  // The standby leads, but cannot bind the job's address while the old leader holds it.
  ASSERT_EQ(kill(coordinator_, SIGCONT), 0);
  EXPECT_EQ(WaitExit(coordinator_, seconds(30)), 3) << Logs();
  coordinator_ = -1;
  EXPECT_NE(ReadFile(coordinator_log()).find("lost the leadership of the job"), std::string::npos)
      << Logs();
  ASSERT_TRUE(WaitForText(
      standby_log(), [](const std::string& t) { return t.find("{\"address\"") != t.npos; },
      seconds(30)))
      << Logs();
  EXPECT_NE(ReadFile(standby_log()).find("taking it over on " + address), std::string::npos);
  leader_state_ = standby_state();
  const int64_t step_at_takeover = StepsApplied(dir_ + "/run.jsonl");
  ASSERT_NO_FATAL_FAILURE(ExpectTheJobGoesOn(step_at_takeover, before));
  StopAndCheck(&standby_, kTrainArgs);
}

}  // namespace
}  // namespace elastra::testing
