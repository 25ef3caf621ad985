// NamespaceCluster: hosts with their own names and addresses, TCP between them, partitions,
// host loss, the rsh agent, and cleanup after destruction and after the owner is SIGKILLed.
// Every connection is to 198.18.0.0/24 inside the cluster; nothing is sent anywhere else.
#include "testbed/namespace_cluster.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/test_programs.h"

extern char** environ;

namespace elastra::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A bound on anything that should happen (a connect that must succeed, a process that must exit):
// generous, because the machine is shared and slow; passing it is a failure.
constexpr seconds kEventTimeout{30};
// A connect into a partition must have failed by then (and one that is not partitioned connects
// in well under a millisecond here).
constexpr milliseconds kPartitionedConnectTimeout{1000};
constexpr int kPort = 7000;  // each host has its own port space: no clash with anything else

Clock::time_point EventDeadline() { return Clock::now() + kEventTimeout; }

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string OurHostname() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// A command in the root namespaces (read-only: `ip -j link show`, `ls`).
std::string RootCommand(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

// The root namespace's interfaces, "index:name" each.
std::set<std::string> RootLinks() {
  std::set<std::string> links;
  auto json = nlohmann::json::parse(RootCommand("ip -j link show"), nullptr, false);
  if (!json.is_array()) return {"unreadable"};
  for (const auto& link : json) {
    links.insert(std::to_string(link.value("ifindex", -1)) + ":" + link.value("ifname", ""));
  }
  return links;
}

ino_t NetnsOf(pid_t pid) {
  struct stat st;
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

bool ProcessExists(pid_t pid) {  // zombies included
  struct stat st;
  return stat(("/proc/" + std::to_string(pid)).c_str(), &st) == 0;
}

char ProcessState(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ? '?' : stat[close + 2];
}

// Every process on the machine whose network namespace is one of `netns`.
std::vector<pid_t> ProcessesInNetns(const std::set<ino_t>& netns) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (netns.count(NetnsOf(pid)) != 0) found.push_back(pid);
  }
  return found;
}

// This process's fds that refer to one of the namespaces (they would keep it alive).
int FdsOnNetns(const std::set<ino_t>& netns) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    std::string target = std::filesystem::read_symlink(entry.path(), ec);
    for (ino_t ino : netns) count += target == "net:[" + std::to_string(ino) + "]" ? 1 : 0;
  }
  return count;
}

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

// Waits for child `pid` to exit and reaps it: its wait status, or -1 at `deadline`.
int WaitForExit(pid_t pid, Clock::time_point deadline) {
  int pidfd = PidfdOpen(pid);
  if (pidfd < 0) return -1;
  struct pollfd pfd = {pidfd, POLLIN, 0};
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  int ready = poll(&pfd, 1, static_cast<int>(std::max<int64_t>(0, left)));
  close(pidfd);
  int status = -1;
  if (ready == 1 && waitpid(pid, &status, 0) != pid) return -1;
  return ready == 1 ? status : -1;
}

// True while child `pid` runs (it has not exited; nothing is reaped).
bool StillRunning(pid_t pid) {
  siginfo_t info = {};
  return waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

class NamespaceClusterTest : public ClusterFixture<NamespaceCluster> {
 protected:
  NamespaceClusterTest()
      : ClusterFixture("ELASTRA_REQUIRE_NAMESPACES", "/tmp/elastra_cluster_test_") {}

  void MakeCluster(int hosts) {
    auto cluster = NamespaceCluster::Create(hosts);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(cluster).value();
  }

  // A listener on `host`'s address that answers every connection; returns once it listens.
  pid_t StartListener(int host, const std::string& name) {
    const std::string log = dir_ + "/" + name + ".log";
    auto pid = cluster_->Spawn(
        host, {SelfPath(), "--listen", cluster_->Address(host), std::to_string(kPort), "0"}, {},
        log);
    EXPECT_TRUE(pid.ok()) << pid.status();
    if (!pid.ok()) return -1;
    auto listening = WaitForLine(log, "listening", EventDeadline());
    EXPECT_TRUE(listening.ok()) << listening.status();
    return *pid;
  }

  // Connects from `from` to `to`'s listener within `timeout`; the connector's output.
  RunResult Connect(int from, int to, milliseconds timeout) {
    auto r = cluster_->Run(from,
                           {SelfPath(), "--connect", cluster_->Address(to), std::to_string(kPort),
                            std::to_string(timeout.count())},
                           kEventTimeout);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  }
};

TEST(NamespaceClusterArgs, CreateRejectsBadCountsAndNames) {
  EXPECT_EQ(NamespaceCluster::Create(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(NamespaceCluster::Create(NamespaceCluster::kMaxHosts + 1).status().code(),
            StatusCode::kInvalidArgument);
  NamespaceCluster::Options options;
  options.name_prefix = "bad name";
  EXPECT_EQ(NamespaceCluster::Create(2, options).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(NamespaceClusterTest, HostsHaveTheirOwnNamesAndOnlyTheirOwnAddress) {
  const std::string our_name = OurHostname();
  MakeCluster(3);
  for (int k = 0; k < 3; ++k) {
    SCOPED_TRACE(cluster_->Name(k));
    EXPECT_EQ(cluster_->Name(k), "host" + std::to_string(k));
    EXPECT_EQ(cluster_->Address(k), "198.18.0.1" + std::to_string(k));

    auto name = cluster_->Run(k, {SelfPath(), "--hostname"}, kEventTimeout);
    ASSERT_TRUE(name.ok()) << name.status();
    EXPECT_EQ(name->output, cluster_->Name(k) + "\n");

    // Interfaces: lo and eth0; addresses: 127.0.0.1, ::1 and the host's own, nothing else.
    auto addrs = cluster_->Run(k, {"ip", "-j", "addr", "show"}, kEventTimeout);
    ASSERT_TRUE(addrs.ok()) << addrs.status();
    auto json = nlohmann::json::parse(addrs->output, nullptr, false);
    ASSERT_TRUE(json.is_array()) << addrs->output;
    std::set<std::string> seen;
    for (const auto& link : json) {
      for (const auto& a : link["addr_info"]) {
        seen.insert(link.value("ifname", "") + " " + a.value("local", "") + "/" +
                    std::to_string(a.value("prefixlen", 0)));
      }
    }
    EXPECT_EQ(seen, (std::set<std::string>{"lo 127.0.0.1/8", "lo ::1/128",
                                           "eth0 " + cluster_->Address(k) + "/24"}));

    // One route, to the cluster's subnet: nothing can be sent anywhere else.
    auto routes = cluster_->Run(k, {"ip", "-j", "route", "show"}, kEventTimeout);
    ASSERT_TRUE(routes.ok()) << routes.status();
    auto route_json = nlohmann::json::parse(routes->output, nullptr, false);
    ASSERT_TRUE(route_json.is_array()) << routes->output;
    ASSERT_EQ(route_json.size(), 1u) << routes->output;
    EXPECT_EQ(route_json[0].value("dst", ""), "198.18.0.0/24");
    EXPECT_EQ(route_json[0].value("dev", ""), "eth0");
  }
  // Every host resolves every host's name.
  auto resolved = cluster_->Run(0, {"getent", "hosts", "host2"}, kEventTimeout);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  EXPECT_EQ(resolved->output.substr(0, resolved->output.find(' ')), "198.18.0.12");
  // The test's own hostname did not change.
  EXPECT_EQ(OurHostname(), our_name);
}

TEST_F(NamespaceClusterTest, TcpConnectionFromHost0ReachesListenerOnHost2) {
  MakeCluster(3);
  StartListener(2, "listener2");
  RunResult r = Connect(0, 2, milliseconds(kEventTimeout));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "connected: host=host2 peer=198.18.0.10\n");
}

TEST_F(NamespaceClusterTest, LinkDownPartitionsTheHostUntilItIsUpAgain) {
  MakeCluster(3);
  for (int k = 0; k < 3; ++k) StartListener(k, "listener" + std::to_string(k));
  ASSERT_EQ(Connect(0, 2, milliseconds(kEventTimeout)).exit_code, 0);

  ASSERT_TRUE(cluster_->SetLinkUp(2, false).ok());
  RunResult to2 = Connect(0, 2, kPartitionedConnectTimeout);
  EXPECT_EQ(to2.exit_code, 1) << to2.output;
  EXPECT_EQ(to2.output.rfind("connect failed", 0), 0u) << to2.output;
  RunResult from2 = Connect(2, 0, kPartitionedConnectTimeout);
  EXPECT_EQ(from2.exit_code, 1) << from2.output;
  // The rest of the cluster is not partitioned.
  RunResult to1 = Connect(0, 1, milliseconds(kEventTimeout));
  EXPECT_EQ(to1.output, "connected: host=host1 peer=198.18.0.10\n");

  ASSERT_TRUE(cluster_->SetLinkUp(2, true).ok());
  RunResult again = Connect(0, 2, milliseconds(kEventTimeout));
  EXPECT_EQ(again.output, "connected: host=host2 peer=198.18.0.10\n");
  RunResult back = Connect(2, 0, milliseconds(kEventTimeout));
  EXPECT_EQ(back.output, "connected: host=host0 peer=198.18.0.12\n");
}

TEST_F(NamespaceClusterTest, KillHostKillsEverythingThatRunsThereAndNothingElse) {
  MakeCluster(2);
  auto sleeper = cluster_->Spawn(1, {"sleep", "1000"}, {}, dir_ + "/sleep1.log");
  ASSERT_TRUE(sleeper.ok()) << sleeper.status();
  auto tree = StartShellWithChild(*cluster_, 1, dir_ + "/shell1.log", EventDeadline());
  ASSERT_TRUE(tree.ok()) << tree.status();
  auto other = cluster_->Spawn(0, {"sleep", "1000"}, {}, dir_ + "/sleep0.log");
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_EQ(cluster_->ProcessesIn(1).size(), 3u);

  ASSERT_TRUE(cluster_->KillHost(1).ok());
  int status = WaitForExit(*sleeper, EventDeadline());
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  status = WaitForExit(tree->shell, EventDeadline());
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  // The shell's child died too: a zombie (reaped when the cluster goes) or gone.
  EXPECT_TRUE(!ProcessExists(tree->child) || ProcessState(tree->child) == 'Z');
  EXPECT_TRUE(cluster_->ProcessesIn(1).empty());

  // Host 0 is untouched; host 1 is still a host that can run things.
  EXPECT_TRUE(StillRunning(*other));
  EXPECT_EQ(cluster_->ProcessesIn(0), std::vector<pid_t>{*other});
  auto name = cluster_->Run(1, {SelfPath(), "--hostname"}, kEventTimeout);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->output, "host1\n");
}

TEST_F(NamespaceClusterTest, RshAgentRunsCommandsOnTheNamedHost) {
  MakeCluster(3);
  const std::string agent = cluster_->RshAgent();
  // Called from host 0, as mpirun there would; ssh options before the host are skipped.
  auto r = cluster_->Run(0, {agent, "-x", "-o", "BatchMode=yes", "host1", SelfPath(), "--hostname"},
                         kEventTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "host1\n");
  // By address, with a user, and the command words joined and run by a shell (as ssh does).
  r = cluster_->Run(0, {agent, "root@198.18.0.12", SelfPath(), "--hostname", "&&", "echo", "done"},
                    kEventTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "host2\ndone\n");

  // A connection made through the agent on host1 comes from host1's address.
  StartListener(0, "listener0");
  r = cluster_->Run(2,
                    {agent, "host1", SelfPath(), "--connect", cluster_->Address(0),
                     std::to_string(kPort), std::to_string(milliseconds(kEventTimeout).count())},
                    kEventTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "connected: host=host0 peer=198.18.0.11\n");

  // A listener started through the agent listens on host1's address.
  const std::string log = dir_ + "/agent_listener.log";
  auto listener = cluster_->Spawn(
      0, {agent, "host1", SelfPath(), "--listen", cluster_->Address(1), std::to_string(kPort), "1"},
      {}, log);
  ASSERT_TRUE(listener.ok()) << listener.status();
  ASSERT_TRUE(WaitForLine(log, "listening", EventDeadline()).ok());
  RunResult to1 = Connect(2, 1, milliseconds(kEventTimeout));
  EXPECT_EQ(to1.output, "connected: host=host1 peer=198.18.0.12\n");

  r = cluster_->Run(0, {agent, "host9", "true"}, kEventTimeout);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 255) << r->output;
}

// What the agent is for: Open MPI's mpirun in host 0 starts its ranks on hosts 1 and 2.
TEST_F(NamespaceClusterTest, MpirunStartsRanksOnOtherHostsThroughTheRshAgent) {
  const std::string mpirun = cluster_internal::FindExecutable("mpirun");
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not found";
  MakeCluster(3);
  auto r = cluster_->Run(
      0,
      {mpirun, "--mca", "plm_rsh_agent", cluster_->RshAgent(), "--host", "host1,host2", "-np", "2",
       SelfPath(), "--hostname"},
      kEventTimeout, {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  std::multiset<std::string> ranks_on;
  std::istringstream lines(r->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("host", 0) == 0) ranks_on.insert(line);
  }
  EXPECT_EQ(ranks_on, (std::multiset<std::string>{"host1", "host2"})) << r->output;
}

TEST_F(NamespaceClusterTest, SpawnAndRunReportBadArgumentsAndTimeouts) {
  MakeCluster(1);
  EXPECT_EQ(cluster_->Spawn(1, {"true"}, {}, dir_ + "/x.log").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->Spawn(0, {"/no/such/program"}, {}, dir_ + "/x.log").status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(cluster_->Spawn(0, {"true"}, {}, dir_ + "/no/such/dir/x.log").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cluster_->Run(0, {"sleep", "1000"}, milliseconds(100)).status().code(),
            StatusCode::kTimedOut);
  // The environment given is added to the test's.
  auto r = cluster_->Run(0, {"bash", "-c", "echo $ELASTRA_CLUSTER_TEST_VALUE"}, kEventTimeout,
                         {{"ELASTRA_CLUSTER_TEST_VALUE", "42"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->output, "42\n");
}

// PR_SET_PDEATHSIG fires when the thread that forked exits: a process spawned from a helper thread
// must outlive that thread.
TEST_F(NamespaceClusterTest, ProcessSpawnedFromAThreadOutlivesTheThread) {
  MakeCluster(2);
  pid_t listener = -1;
  pid_t tid = -1;
  const std::string log = dir_ + "/listener1.log";
  std::thread spawner([&] {
    tid = gettid();
    auto pid = cluster_->Spawn(
        1, {SelfPath(), "--listen", cluster_->Address(1), std::to_string(kPort), "0"}, {}, log);
    listener = pid.ok() ? *pid : -1;
  });
  spawner.join();
  ASSERT_GT(listener, 0);
  // The thread's parent-death signals are sent before its /proc entry goes: once it is gone, a
  // process that was to die with the thread has been signalled.
  const std::string task = "/proc/self/task/" + std::to_string(tid);
  const auto deadline = EventDeadline();
  while (std::filesystem::exists(task) && Clock::now() < deadline) std::this_thread::yield();
  ASSERT_FALSE(std::filesystem::exists(task));
  ASSERT_TRUE(WaitForLine(log, "listening", EventDeadline()).ok());
  RunResult r = Connect(0, 1, milliseconds(kEventTimeout));
  EXPECT_EQ(r.output, "connected: host=host1 peer=198.18.0.10\n");
  EXPECT_TRUE(StillRunning(listener));
}

TEST_F(NamespaceClusterTest, DestroyingTheClusterLeavesNothingBehind) {
  const std::set<std::string> links_before = RootLinks();
  const std::string run_netns_before = RootCommand("ls -a /run/netns 2>&1");
  const std::string our_name = OurHostname();
  MakeCluster(3);
  const std::string cluster_dir = cluster_->dir();
  std::vector<pid_t> pids = {cluster_->SwitchPid()};
  for (int k = 0; k < 3; ++k) {
    pids.push_back(cluster_->HolderPid(k));
    auto sleeper = cluster_->Spawn(k, {"sleep", "1000"}, {}, dir_ + "/sleep.log");
    ASSERT_TRUE(sleeper.ok()) << sleeper.status();
    auto tree = StartShellWithChild(*cluster_, k, dir_ + "/shell" + std::to_string(k) + ".log",
                                    EventDeadline());
    ASSERT_TRUE(tree.ok()) << tree.status();
    pids.insert(pids.end(), {*sleeper, tree->shell, tree->child});
  }
  // A process that came in through the rsh agent, as mpirun's daemons do.
  const std::string agent_log = dir_ + "/agent.log";
  auto via_agent = cluster_->Spawn(
      0, {cluster_->RshAgent(), "host2", "echo started; exec sleep 1000"}, {}, agent_log);
  ASSERT_TRUE(via_agent.ok()) << via_agent.status();
  ASSERT_TRUE(WaitForLine(agent_log, "started", EventDeadline()).ok());
  pids.push_back(*via_agent);
  std::set<ino_t> netns;
  for (pid_t pid : pids) netns.insert(NetnsOf(pid));
  ASSERT_EQ(netns.size(), 4u);  // the switch and three hosts
  ASSERT_EQ(netns.count(NetnsOf(getpid())), 0u);
  EXPECT_NE(RootLinks(), std::set<std::string>{"unreadable"});
  EXPECT_EQ(RootLinks(), links_before);  // nothing was made in the root namespace

  cluster_.reset();
  for (pid_t pid : pids) EXPECT_FALSE(ProcessExists(pid)) << "pid " << pid << " is left";
  EXPECT_TRUE(ProcessesInNetns(netns).empty());
  EXPECT_EQ(FdsOnNetns(netns), 0);
  EXPECT_EQ(RootLinks(), links_before);
  EXPECT_EQ(RootCommand("ls -a /run/netns 2>&1"), run_netns_before);
  EXPECT_EQ(OurHostname(), our_name);
  EXPECT_FALSE(std::filesystem::exists(cluster_dir));
}

TEST_F(NamespaceClusterTest, SigkilledOwnerLeavesNoProcessOrInterfaceBehind) {
  const std::set<std::string> links_before = RootLinks();
  // The owner's orphans come to this process, which reaps them at once (init may take a while).
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  const std::string self = SelfPath();
  std::vector<std::string> args = {self, "--hold-cluster", "2", dir_};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t owner = -1;
  ASSERT_EQ(posix_spawn(&owner, self.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);

  // The owner's line: "pids P... netns I..." (the switch, then per host: holder, sleeper, shell,
  // shell's child).
  std::string line;
  const auto deadline = EventDeadline();
  while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
    struct pollfd pfd = {out[0], POLLIN, 0};
    if (poll(&pfd, 1, 100) != 1) continue;
    char buf[512];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, n);
  }
  close(out[0]);
  ASSERT_EQ(line.rfind("pids ", 0), 0u) << line;
  std::istringstream words(line.substr(5));
  std::vector<pid_t> pids;
  std::set<ino_t> netns;
  std::string word;
  while (words >> word && word != "netns") pids.push_back(std::stoi(word));
  while (words >> word) netns.insert(std::stoull(word));
  ASSERT_EQ(pids.size(), 9u) << line;
  ASSERT_EQ(netns.size(), 3u) << line;  // the switch and two hosts
  ASSERT_EQ(netns.count(NetnsOf(getpid())), 0u);
  std::vector<int> pidfds;
  for (pid_t pid : pids) {
    pidfds.push_back(PidfdOpen(pid));
    ASSERT_GE(pidfds.back(), 0) << "pid " << pid << " is not running";
  }

  ASSERT_EQ(kill(owner, SIGKILL), 0);
  int status = WaitForExit(owner, EventDeadline());
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;

  // Every process of the cluster exits: the holders on their parent's death, after killing
  // what runs in their hosts.
  for (size_t i = 0; i < pids.size(); ++i) {
    struct pollfd pfd = {pidfds[i], POLLIN, 0};
    auto left = std::chrono::duration_cast<milliseconds>(EventDeadline() - Clock::now());
    EXPECT_EQ(poll(&pfd, 1, static_cast<int>(left.count())), 1) << "pid " << pids[i] << " lives";
    close(pidfds[i]);
  }
  // All have exited, so each orphan has been handed to this process: reap them.
  for (pid_t pid : pids) waitpid(pid, nullptr, WNOHANG);
  for (pid_t pid : pids) EXPECT_FALSE(ProcessExists(pid)) << "pid " << pid << " is left";
  EXPECT_TRUE(ProcessesInNetns(netns).empty());
  EXPECT_EQ(RootLinks(), links_before);
}

}  // namespace
}  // namespace elastra::testing

int main(int argc, char** argv) {
  if (auto code = elastra::testing::RunTestProgram(argc, argv)) return *code;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
