// One etcd member lost: nothing happens to the job (issue 33, item 4; docs/ha.md). Three
// namespace hosts each run one member of a three-member etcd cluster (data directories in the
// job's folder); `elastra coordinator --etcd URL1,URL2,URL3 --job NAME` leads on host 0 with a
// standby on host 1, and an agent on host 2 runs train_mlp workers. While the job trains, the etcd
// leader, the first endpoint of the coordinators' lists (the one their clients use), is SIGKILLed;
// the other two members elect another, the coordinators' clients go on to a live endpoint, and a
// planned change (`elastra resize`) is still journaled in etcd and done. The job then trains on
// and ends matching `train_mlp --reference`, every sample applied once.
//
// Needs root (skips elsewhere; ELASTRA_REQUIRE_NAMESPACES=1 makes that a failure) and an etcd
// binary (ELASTRA_SKIP_WITHOUT_ETCD; ELASTRA_REQUIRE_ETCD=1 makes that a failure).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/cluster/cluster_fixture.h"
#include "tests/cluster/cluster_job.h"
#include "tests/integration/job_harness.h"
#include "tests/journal/require_etcd.h"

namespace elastra::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A bound on something that must happen (etcd up, a resize done, the job's end): generous, since
// the machine is shared; passing it is a failure, never a sleep.
constexpr seconds kEvent{60};
constexpr int kMembers = 3;
const char kJob[] = "etcdclusterjob";
// The coordinators' leadership lease, in seconds. It must outlast etcd's own election of a new
// leader (etcd's default election timeout, 1 s, to notice the loss; a first round may split)
// plus a renewal that waits on a member without a leader: with the default of 3 s the leader's
// renewals can all go unanswered through the election and it gives the job up (docs/ha.md).
constexpr int kLeaderTtl = 8;

std::vector<std::string> TrainArgs() {
  return {"--steps",        std::to_string(kUntilStopped),
          "--step-time-ms", "20",
          "--global-batch", "48",
          "--hidden",       "16",
          "--ffn",          "32",
          "--layers",       "3",
          "--commit-every", "5"};
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Polls the file at `path` until it contains `text`.
bool WaitForText(const std::string& path, const std::string& text, seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ReadFile(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

class EtcdClusterTest : public ClusterFixture<NamespaceCluster> {
 protected:
  EtcdClusterTest() : ClusterFixture("ELASTRA_REQUIRE_NAMESPACES", /*scratch_prefix=*/"") {}

  void SetUp() override {
    ClusterFixture::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ELASTRA_SKIP_WITHOUT_ETCD();
    ClusterJob::Options o;
    o.hosts = kMembers;
    o.train_args = args_;
    auto job = ClusterJob::Create(o);
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = std::move(job).value();
  }

  void TearDown() override {
    job_.reset();  // the cluster's end kills every process in its hosts, etcd's members included
    ClusterFixture::TearDown();
  }

  std::string ClientUrl(int member) const {
    return "http://" + job_->cluster().Address(member) + ":2379";
  }
  // The client URLs of the members in `members`, comma-separated.
  std::string Urls(const std::vector<int>& members) const {
    std::string urls;
    for (int m : members) urls += (urls.empty() ? "" : ",") + ClientUrl(m);
    return urls;
  }
  std::string EtcdLog(int member) const {
    return job_->dir() + "/etcd" + std::to_string(member) + ".log";
  }

  // Member i on host i, as docs/ha.md's recipe (/work/shared/etcd-namespaces.md) starts it.
  void StartEtcd() {
    std::string why;
    const std::string binary = journal::EtcdServer::Binary(&why);
    ASSERT_FALSE(binary.empty()) << why;
    std::string initial;
    for (int m = 0; m < kMembers; ++m) {
      initial += (initial.empty() ? "" : ",") + std::string("e") + std::to_string(m) + "=http://" +
                 job_->cluster().Address(m) + ":2380";
    }
    for (int m = 0; m < kMembers; ++m) {
      const std::string peer = "http://" + job_->cluster().Address(m) + ":2380";
      auto pid = job_->cluster().Spawn(
          m,
          {binary, "--name", "e" + std::to_string(m), "--data-dir",
           job_->dir() + "/etcd-data/e" + std::to_string(m), "--listen-peer-urls", peer,
           "--initial-advertise-peer-urls", peer, "--listen-client-urls", ClientUrl(m),
           "--advertise-client-urls", ClientUrl(m), "--initial-cluster", initial,
           "--initial-cluster-state", "new", "--initial-cluster-token", kJob},
          {}, EtcdLog(m));
      ASSERT_TRUE(pid.ok()) << pid.status();
      etcd_[m] = *pid;
    }
  }

  // `etcdctl ARGS --endpoints URLS` in host `host`.
  RunResult Etcdctl(int host, const std::vector<int>& members, std::vector<std::string> args) {
    args.insert(args.begin(), {"etcdctl", "--endpoints", Urls(members)});
    auto r = job_->cluster().Run(host, args, milliseconds(20000));
    if (!r.ok()) return RunResult{-1, r.status().ToString()};
    return *r;
  }

  // The member that leads the etcd cluster of `members`, or -1 when none is known to lead.
  int EtcdLeader(const std::vector<int>& members) {
    RunResult r = Etcdctl(0, members, {"endpoint", "status", "-w", "json"});
    if (r.exit_code != 0) return -1;
    auto j = nlohmann::json::parse(r.output.substr(std::min(r.output.find('['), r.output.size())),
                                   nullptr, false);
    if (!j.is_array()) return -1;
    for (const auto& e : j) {
      const auto& s = e.value("Status", nlohmann::json::object());
      const auto& header = s.value("header", nlohmann::json::object());
      if (!header.contains("member_id") || !s.contains("leader")) continue;
      if (header["member_id"] != s["leader"]) continue;
      const std::string endpoint = e.value("Endpoint", std::string());
      for (int m : members) {
        if (endpoint == ClientUrl(m)) return m;
      }
    }
    return -1;
  }

  int WaitForEtcdLeader(const std::vector<int>& members) {
    const auto deadline = std::chrono::steady_clock::now() + kEvent;
    while (std::chrono::steady_clock::now() < deadline) {
      const int leader = EtcdLeader(members);
      if (leader >= 0) return leader;
      std::this_thread::sleep_for(milliseconds(200));
    }
    return -1;
  }

  // The journal's records in etcd (their head keys), read through `members`.
  std::vector<std::string> JournalHeads(const std::vector<int>& members) {
    RunResult r = Etcdctl(
        0, members,
        {"get", "--prefix", "--keys-only", std::string("/elastra/") + kJob + "/journal/r/"});
    std::vector<std::string> keys;
    std::istringstream in(r.output);
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) keys.push_back(line);
    }
    return keys;
  }

  // `elastra coordinator --etcd ...` in `host`, its state in `state_dir`.
  pid_t SpawnCoordinator(int host, const std::string& state_dir, const std::string& log) {
    auto pid = job_->cluster().Spawn(
        host,
        {ELASTRA_BINARY, "coordinator", "--state-dir", state_dir, "--workers", "2", "--max-workers",
         "3", "--bind", "tcp://0.0.0.0:" + std::to_string(ClusterJob::kPort), "--job", kJob,
         "--etcd", Urls(endpoints_), "--leader-ttl", std::to_string(kLeaderTtl)},
        {}, log);
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : -1;
  }

  std::string Logs() const {
    std::string out = job_->Logs() + "--- standby\n" + ReadFile(StandbyLog());
    for (int m = 0; m < kMembers; ++m) {
      const std::string log = ReadFile(EtcdLog(m));
      out += "--- etcd" + std::to_string(m) + " (end)\n" +
             (log.size() > 1500 ? log.substr(log.size() - 1500) : log);
    }
    return out;
  }
  std::string StandbyLog() const { return job_->dir() + "/standby.log"; }

  std::vector<std::string> args_ = TrainArgs();
  std::unique_ptr<ClusterJob> job_;
  std::map<int, pid_t> etcd_;
  std::vector<int> endpoints_;  // the coordinators' --etcd list: the etcd leader's URL first
};

TEST_F(EtcdClusterTest, TheEtcdLeaderLostTheJobTrainsOnAndAPlannedResizeIsJournaled) {
  ASSERT_NO_FATAL_FAILURE(StartEtcd());
  const int leader = WaitForEtcdLeader({0, 1, 2});
  ASSERT_GE(leader, 0) << Logs();
  endpoints_ = {leader};
  for (int m = 0; m < kMembers; ++m) {
    if (m != leader) endpoints_.push_back(m);
  }

  const pid_t coordinator = SpawnCoordinator(0, job_->state_dir(), job_->coordinator_log());
  ASSERT_GT(coordinator, 0);
  ASSERT_TRUE(WaitForText(job_->coordinator_log(), "{\"address\"", kEvent)) << Logs();
  const pid_t standby = SpawnCoordinator(1, job_->dir() + "/standby", StandbyLog());
  ASSERT_GT(standby, 0);
  ASSERT_TRUE(WaitForText(StandbyLog(), std::string("standby: job ") + kJob + " is led by", kEvent))
      << Logs();
  ASSERT_TRUE(job_->StartAgent(2, 3).ok()) << Logs();
  ASSERT_TRUE(job_->WaitForStep(20, kEvent)) << Logs();

  // The etcd leader dies (SIGKILL, by its pid); the other two elect another. It was the first
  // endpoint of the coordinators' lists (the one their clients use) unless leadership moved since.
  const int lost = EtcdLeader({0, 1, 2});
  ASSERT_GE(lost, 0) << Logs();
  ASSERT_EQ(kill(etcd_[lost], SIGKILL), 0);
  ASSERT_EQ(ClusterJob::WaitExit(etcd_[lost], kEvent), 128 + SIGKILL);
  etcd_.erase(lost);
  std::vector<int> live;
  for (int m = 0; m < kMembers; ++m) {
    if (m != lost) live.push_back(m);
  }
  ASSERT_GE(WaitForEtcdLeader(live), 0) << Logs();
  const nlohmann::json before = job_->JobStatus();
  ASSERT_TRUE(job_->WaitForStep(before.value("step", int64_t{0}) + 10, kEvent)) << Logs();
  const std::vector<std::string> heads_before = JournalHeads(live);
  ASSERT_FALSE(heads_before.empty()) << Logs();

  // A planned change: journaled in etcd (new records, read from the live members) and done.
  RunResult r = job_->Elastra({"resize", "--workers", "3", "--wait", "--timeout", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.output << Logs();
  ASSERT_TRUE(job_->WaitFor(
      [](const nlohmann::json& j) {
        return j.value("state", std::string()) == "running" && MemberHostsByRank(j).size() == 3;
      },
      kEvent))
      << job_->JobStatus().dump() << Logs();
  const std::vector<std::string> heads_after = JournalHeads(live);
  EXPECT_GT(heads_after.size(), heads_before.size()) << Logs();
  EXPECT_GT(heads_after.back(), heads_before.back());
  const nlohmann::json resized = job_->JobStatus();
  EXPECT_GT(History(resized).size(), History(before).size()) << resized.dump();
  EXPECT_EQ(ReadFile(StandbyLog()).find("{\"address\""), std::string::npos)
      << "the standby never led: " << Logs();

  // The job trains on and ends as the reference does.
  ASSERT_TRUE(job_->WaitForStep(resized.value("step", int64_t{0}) + 10, kEvent)) << Logs();
  job_->StopTraining();
  EXPECT_EQ(ClusterJob::WaitExit(coordinator, kEvent), 0) << Logs();
  EXPECT_EQ(ClusterJob::WaitExit(job_->agent_pid(2), kEvent), 0) << Logs();
  ExpectStoppedLogMatchesReference(job_->log_path(), job_->dir() + "/ref.jsonl", args_);
}

}  // namespace
}  // namespace elastra::testing
