// End-to-end: the admin commands find a job on etcd by its leader key (docs/ha.md, "Finding the
// leader"). A leader and a standby `elastra coordinator --etcd` of one job, one `elastra agent`
// with two train_mlp workers, against a single-member etcd the test starts; `elastra status` and
// `elastra resize` with `--etcd URL --job NAME`, run from a directory with no state files, reach
// the leader, and after the leader is SIGKILLed the standby that took the job over. Without a
// leader they wait for one up to --timeout and then fail saying so. Skipped only when there is no
// etcd binary (tests/journal/require_etcd.h).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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

// Polls until the text of `path` holds `what`.
bool WaitForText(const std::string& path, const std::string& what, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ReadFile(path).find(what) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// True when the job of `status` trained past `step` with host hostA up and no change pending.
bool Settled(const nlohmann::json& status, int64_t step) {
  if (status.value("step", int64_t{-1}) <= step || status.contains("pending_resize")) return false;
  for (const auto& h : status.value("hosts", nlohmann::json::array())) {
    if (h.value("name", std::string()) == "hostA") return h.value("state", std::string()) == "up";
  }
  return false;
}

class EtcdAdmin : public EtcdJobTest {
 protected:
  EtcdAdmin() : EtcdJobTest("/tmp/elastra_etcd_admin_XXXXXX", {&agent_, &leader_, &standby_}) {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(EtcdJobTest::SetUp());
    if (IsSkipped()) return;
    fs::create_directory(empty());
  }

  // The directory the admin commands run in: no coordinator.json, no .elastra.
  std::string empty() const { return dir_ + "/empty"; }
  std::string Logs() const {
    std::string all;
    for (const char* name : {"leader", "standby", "agent"}) {
      all += std::string("--- ") + name + ".log\n" + ReadFile(dir_ + "/" + name + ".log");
    }
    return all;
  }

  // `elastra coordinator --etcd` of job "adminjob", its state in DIR/NAME and its output in
  // DIR/NAME.log, in a process group of its own.
  pid_t SpawnCoordinator(const std::string& name) {
    return SpawnLogged(
        {ElastraBinary(), "coordinator", "--state-dir", dir_ + "/" + name, "--workers", "2",
         "--job", "adminjob", "--etcd", etcd_.url(), "--leader-ttl", "1"},
        dir_ + "/" + name + ".log", kHeartbeatEnv, ProcessGroup::kOwn);
  }

  // `elastra COMMAND --etcd URL --job adminjob ARGS`, run in empty().
  CommandResult Admin(const std::string& command, const std::string& args) {
    return RunShell("cd " + empty() + " && " + ElastraBinary() + " " + command + " --etcd " +
                    etcd_.url() + " --job adminjob " + args + " 2>&1");
  }
  nlohmann::json Status(const std::string& args = "") {
    CommandResult r = Admin("status", "--json " + args);
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_object() ? j : nlohmann::json::object();
  }
  bool WaitForStep(int64_t step, seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Status().value("step", int64_t{-1}) >= step) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  pid_t leader_ = -1;
  pid_t standby_ = -1;
  pid_t agent_ = -1;
};

TEST_F(EtcdAdmin, AdminCommandsFollowTheLeaderKey) {
  // No coordinator leads yet: the command waits --timeout for one, then says so.
  CommandResult none = Admin("status", "--timeout 300ms");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.out.find("no coordinator leads job adminjob on etcd " + etcd_.url()),
            std::string::npos)
      << none.out;

  leader_ = SpawnCoordinator("leader");
  ASSERT_TRUE(WaitForText(dir_ + "/leader.log", "{\"address\"", seconds(30))) << Logs();
  standby_ = SpawnCoordinator("standby");
  ASSERT_TRUE(WaitForText(dir_ + "/standby.log", "standby: job adminjob is led by", seconds(30)))
      << Logs();
  agent_ = SpawnLogged({ElastraBinary(),
                        "agent",
                        "--join",
                        dir_ + "/leader/join.json",
                        "--name",
                        "hostA",
                        "--slots",
                        "2",
                        "--coordinator-timeout",
                        "60",
                        "--",
                        TrainBinary(),
                        "--log",
                        dir_ + "/run.jsonl",
                        "--stop-file",
                        dir_ + "/stop",
                        "--steps",
                        std::to_string(kUntilStopped),
                        "--step-time-ms",
                        "15",
                        "--global-batch",
                        "48",
                        "--hidden",
                        "24",
                        "--commit-every",
                        "5"},
                       dir_ + "/agent.log", kHeartbeatEnv, ProcessGroup::kOwn);
  ASSERT_TRUE(WaitForStep(5, seconds(60))) << Logs();
  const nlohmann::json before = Status();
  EXPECT_EQ(before.value("job", std::string()), "adminjob") << before.dump();
  EXPECT_FALSE(fs::exists(empty() + "/.elastra"));

  // The leader's host is gone; the standby leads once the lease expired (1 s) and the status
  // waits for it.
  ASSERT_EQ(kill(leader_, SIGKILL), 0);
  waitpid(leader_, nullptr, 0);
  leader_ = -1;
  const nlohmann::json after = Status("--timeout 30s");
  EXPECT_EQ(after.value("job", std::string()), "adminjob") << after.dump() << Logs();
  EXPECT_NE(ReadFile(dir_ + "/standby.log").find("leading job adminjob"), std::string::npos)
      << Logs();

  // The job goes on under the new leader: past the step of the takeover, the agent's host up again
  // and no change in progress (a resize is refused meanwhile).
  const int64_t step = after.value("step", int64_t{0});
  const auto deadline = std::chrono::steady_clock::now() + seconds(60);
  while (!Settled(Status(), step + 5) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(Settled(Status(), step + 5)) << Status().dump() << Logs();
  // A commit of the new leader's may still be under way: the refusal says to retry.
  CommandResult resize = Admin("resize", "--workers 1 --wait --timeout 60s");
  while (resize.out.find("retry when it is done") != std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    resize = Admin("resize", "--workers 1 --wait --timeout 60s");
  }
  EXPECT_EQ(resize.exit_code, 0) << resize.out << Logs();
  EXPECT_NE(resize.out.find("\"phase\":\"done\""), std::string::npos) << resize.out;
  EXPECT_NE(resize.out.find("\"workers\":1"), std::string::npos) << resize.out;
}

}  // namespace
}  // namespace elastra::testing
