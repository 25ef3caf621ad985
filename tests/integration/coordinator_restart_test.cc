// End-to-end: the coordinator of a real `elastra run` job is killed with SIGKILL, mid-run and
// mid-reconfiguration. The launcher starts it again on the same state directory; it takes the job
// back from its journal, the same worker processes reconnect and training continues. Each run
// must exit 0 and match `train_mlp --reference` (1e-4 relative loss, exact sample accounting).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "examples/log_check.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using std::chrono::seconds;

std::vector<std::string> TrainArgs(int steps, int step_ms) {
  return {"--steps",        std::to_string(steps),
          "--step-time-ms", std::to_string(step_ms),
          "--global-batch", "48",
          "--hidden",       "24",
          "--commit-every", "5"};
}

std::string Launcher(const Job& job) {
  std::ifstream in(job.dir() + "/launcher.log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

examples::TrainLog ExpectMatchesReference(const Job& job, const std::vector<std::string>& args,
                                          int steps) {
  std::string ref = job.dir() + "/ref.jsonl";
  EXPECT_TRUE(RunReference(args, ref));
  auto run = examples::ReadTrainLog(job.log_path());
  auto reference = examples::ReadTrainLog(ref);
  EXPECT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(reference.ok()) << reference.status();
  if (!run.ok() || !reference.ok()) return {};
  auto c = examples::Compare(*run, *reference, steps);
  EXPECT_TRUE(c.accounting_ok) << c.problem;
  EXPECT_EQ(c.steps, steps);
  EXPECT_LE(c.max_rel_loss_diff, 1e-4);
  return *run;
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
  for (const auto& [rank, pid] : by_rank) pids.push_back(pid);
  return pids;
}

// Kills the coordinator and waits until a new coordinator process answers.
pid_t KillCoordinatorAndWaitForRestart(Job& job) {
  const pid_t old_pid = job.CoordinatorPid();
  EXPECT_GT(old_pid, 0);
  if (old_pid <= 0) return -1;
  EXPECT_EQ(kill(old_pid, SIGKILL), 0);
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t now = job.CoordinatorPid();
    if (now > 0 && now != old_pid) return now;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "no new coordinator within 10 s\n" << Launcher(job);
  return -1;
}

TEST(CoordinatorRestart, KilledMidRunTakesTheJobBackWithoutRestartingWorkers) {
  const int steps = 150;
  auto args = TrainArgs(steps, 15);
  Job job(2, args);
  ASSERT_TRUE(job.WaitForStep(20, seconds(60))) << Launcher(job);
  const auto before = job.Status();
  const auto pids = MemberPids(before);
  ASSERT_EQ(pids.size(), 2u);
  const int64_t step_at_kill = before.value("step", int64_t{-1});

  pid_t restarted = KillCoordinatorAndWaitForRestart(job);
  ASSERT_GT(restarted, 0);
  // The new coordinator knows the job: same generation, same worker processes, and training
  // goes on past the step of the kill.
  ASSERT_TRUE(job.WaitFor(
      [&](const nlohmann::json& j) { return j.value("step", int64_t{-1}) > step_at_kill + 10; },
      seconds(20)))
      << Launcher(job);
  auto after = job.Status();
  EXPECT_EQ(after.value("generation", uint64_t{0}), before.value("generation", uint64_t{1}));
  EXPECT_EQ(MemberPids(after), pids);
  EXPECT_EQ(after.value("state", std::string()), "running");

  ASSERT_EQ(job.Wait(seconds(60)), 0) << Launcher(job);
  const std::string log = Launcher(job);
  EXPECT_NE(log.find("took back job"), std::string::npos) << log;
  // No worker was restarted and no recovery was needed: one generation in the whole run.
  auto run = ExpectMatchesReference(job, args, steps);
  EXPECT_EQ(run.applied.size(), static_cast<size_t>(steps));
  for (const auto& [step, r] : run.applied) EXPECT_EQ(r.generation, 1u) << step;
}

TEST(CoordinatorRestart, KilledMidGrowRecoversAndFinishesTheResize) {
  const int steps = 150;
  auto args = TrainArgs(steps, 15);
  // Widen the window in which the workers build the next generation.
  Job job(2, args, {"ELASTRA_TEST_APPLY_DELAY_MS=400"});
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << Launcher(job);
  auto grow = job.Resize("--workers 3");
  ASSERT_EQ(grow.exit_code, 0) << grow.out;
  ASSERT_NE(grow.out.find("accepted"), std::string::npos) << grow.out;
  // Kill while the workers build the next generation (the build takes 400 ms or more).
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  std::string state;
  while (state != "building" && std::chrono::steady_clock::now() < deadline) {
    state = job.Status().value("state", std::string());
  }
  ASSERT_EQ(state, "building") << Launcher(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_EQ(job.Wait(seconds(60)), 0) << Launcher(job);
  const std::string log = Launcher(job);
  EXPECT_NE(log.find("a change was in flight"), std::string::npos) << log;
  auto run = ExpectMatchesReference(job, args, steps);
  // The journaled resize still happened: the job ends with three workers.
  std::set<int> dps;
  for (const auto& [step, r] : run.applied) dps.insert(r.dp);
  EXPECT_TRUE(dps.count(3)) << log;
  std::ifstream final_status(job.state_dir() + "/status.json");
  auto status = nlohmann::json::parse(final_status, nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status.value("state", std::string()), "finished");
  EXPECT_EQ(status["layout"].value("dp", 0), 3);
}

TEST(CoordinatorRestart, KilledMidShrinkRecoversAndFinishesTheResize) {
  const int steps = 150;
  auto args = TrainArgs(steps, 15);
  Job job(3, args, {"ELASTRA_TEST_APPLY_DELAY_MS=400"});
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << Launcher(job);
  auto shrink = job.Resize("--workers 2");
  ASSERT_EQ(shrink.exit_code, 0) << shrink.out;
  // Right after the resize was accepted: the pause is in flight.
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_EQ(job.Wait(seconds(60)), 0) << Launcher(job);
  const std::string log = Launcher(job);
  EXPECT_NE(log.find("a change was in flight"), std::string::npos) << log;
  auto run = ExpectMatchesReference(job, args, steps);
  std::ifstream final_status(job.state_dir() + "/status.json");
  auto status = nlohmann::json::parse(final_status, nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status.value("state", std::string()), "finished");
  EXPECT_EQ(status["layout"].value("dp", 0), 2);
}

TEST(CoordinatorRestart, KilledTwiceStillFinishes) {
  const int steps = 150;
  auto args = TrainArgs(steps, 15);
  Job job(2, args);
  ASSERT_TRUE(job.WaitForStep(10, seconds(60))) << Launcher(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_TRUE(job.WaitForStep(40, seconds(20))) << Launcher(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_EQ(job.Wait(seconds(60)), 0) << Launcher(job);
  ExpectMatchesReference(job, args, steps);
}

}  // namespace
}  // namespace elastra::testing
