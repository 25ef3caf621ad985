// mpirun across two namespace hosts (issue 10, item 8): Open MPI's mpirun, started in host 0 with
// the cluster's rsh agent (NamespaceCluster::RshAgent(), an `ssh` that enters a host's
// namespaces), runs four train_mlp ranks, two on each host, with no other set-up: MPI rank 0's
// coordinator binds every interface of host 0 and the ranks on host 1 reach it by route
// (docs/mpi.md, "Across hosts"). The real `elastra resize`, run in host 0, shrinks the job to 2
// (two ranks park as standby) and grows it back to 4 (the parked ranks come back: the same four
// processes throughout); the log matches `train_mlp --reference` with exact sample accounting.
//
// Needs root and mpirun; skips with the reason elsewhere (ELASTRA_REQUIRE_NAMESPACES=1 makes a
// machine without namespaces a failure).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <set>

#include "tests/cluster/cluster_job.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using std::chrono::seconds;

constexpr seconds kEvent{60};

std::vector<std::string> TrainArgs() {
  return {"--steps",        std::to_string(kUntilStopped),
          "--step-time-ms", "20",
          "--global-batch", "48",
          "--hidden",       "24",
          "--commit-every", "5"};
}

std::string Str(const nlohmann::json& j, const char* key) { return j.value(key, std::string()); }

// id -> {state, host, pid} of every worker in a status.
std::map<std::string, std::tuple<std::string, std::string, int64_t>> Workers(
    const nlohmann::json& status) {
  std::map<std::string, std::tuple<std::string, std::string, int64_t>> out;
  for (const auto& w : status.value("workers", nlohmann::json::array())) {
    out[Str(w, "id")] = {Str(w, "state"), Str(w, "host"), w.value("pid", int64_t{0})};
  }
  return out;
}

TEST(ClusterMpirun, FourRanksOnTwoHostsShrinkToTwoAndGrowBackToFour) {
  static const std::string why = NamespaceCluster::Unavailable();
  if (!why.empty()) {
    if (std::getenv("ELASTRA_REQUIRE_NAMESPACES") != nullptr) FAIL() << why;
    GTEST_SKIP() << why;
  }
  if (access(MPIRUN_BINARY, X_OK) != 0) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  ClusterJob::Options o;
  o.hosts = 2;
  o.train_args = TrainArgs();
  o.state_dir_name = ".elastra";
  auto made = ClusterJob::Create(o);
  ASSERT_TRUE(made.ok()) << made.status();
  ClusterJob& job = **made;
  auto mpirun =
      job.StartMpirun({MPIRUN_BINARY, "--host", "host0:2,host1:2", "-np", "4", "--enable-recovery",
                       "--bind-to", "none", "--mca", "plm_rsh_agent", job.cluster().RshAgent()});
  ASSERT_TRUE(mpirun.ok()) << mpirun.status();

  ASSERT_TRUE(job.WaitForStep(10, kEvent)) << job.Logs();
  auto start = job.JobStatus();
  auto workers = Workers(start);
  ASSERT_EQ(workers.size(), 4u) << start.dump();
  std::set<int64_t> pids;
  std::multiset<std::string> hosts;
  for (const auto& [id, w] : workers) {
    EXPECT_EQ(std::get<0>(w), "member") << id;
    hosts.insert(std::get<1>(w));
    pids.insert(std::get<2>(w));
  }
  EXPECT_EQ(hosts, (std::multiset<std::string>{"host0", "host0", "host1", "host1"}))
      << start.dump();

  RunResult down = job.Elastra({"resize", "--workers", "2", "--wait", "--timeout", "60"});
  ASSERT_EQ(down.exit_code, 0) << down.output << job.Logs();
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        int standby = 0, members = 0;
        for (const auto& [id, w] : Workers(j)) {
          standby += std::get<0>(w) == "standby";
          members += std::get<0>(w) == "member";
        }
        return standby == 2 && members == 2;
      },
      kEvent))
      << job.JobStatus().dump() << job.Logs();
  auto shrunk = job.JobStatus();
  std::printf("after the shrink:");
  for (const auto& [id, w] : Workers(shrunk)) {
    std::printf(" %s=%s@%s", id.c_str(), std::get<0>(w).c_str(), std::get<1>(w).c_str());
  }
  std::printf("\n");
  int64_t at = shrunk.value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, kEvent)) << job.Logs();

  RunResult up = job.Elastra({"resize", "--workers", "4", "--wait", "--timeout", "60"});
  ASSERT_EQ(up.exit_code, 0) << up.output << job.Logs();
  auto grown = job.JobStatus();
  std::set<int64_t> pids_after;
  for (const auto& [id, w] : Workers(grown)) {
    if (std::get<0>(w) == "member") pids_after.insert(std::get<2>(w));
  }
  // The same four processes: the parked ranks came back, nothing was started.
  EXPECT_EQ(pids_after, pids) << grown.dump();
  at = grown.value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, kEvent)) << job.Logs();

  job.StopTraining();
  ASSERT_EQ(ClusterJob::WaitExit(*mpirun, kEvent), 0) << job.Logs();
  auto log =
      ExpectStoppedLogMatchesReference(job.log_path(), job.dir() + "/ref.jsonl", TrainArgs());
  std::set<int> dps;
  for (const auto& [step, r] : log.applied) dps.insert(r.dp);
  EXPECT_EQ(dps, (std::set<int>{2, 4}));
}

}  // namespace
}  // namespace elastra::testing
