// End-to-end: the coordinator of a real `elastra run` job is killed with SIGKILL, mid-run and
// mid-reconfiguration. The launcher starts it again on the same state directory; it takes the job
// back from its journal, the same worker processes reconnect and training continues. Each run
// must exit 0 and match `train_mlp --reference` (1e-4 relative loss, exact sample accounting).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
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
  ADD_FAILURE() << "no new coordinator within 10 s\n" << LauncherLog(job);
  return -1;
}

TEST(CoordinatorRestart, KilledMidRunTakesTheJobBackWithoutRestartingWorkers) {
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(2, args);
  ASSERT_TRUE(job.WaitForStep(20, seconds(60))) << LauncherLog(job);
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
      << LauncherLog(job);
  auto after = job.Status();
  EXPECT_EQ(after.value("generation", uint64_t{0}), before.value("generation", uint64_t{1}));
  EXPECT_EQ(MemberPids(after), pids);
  EXPECT_EQ(after.value("state", std::string()), "running");

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("took back job"), std::string::npos) << log;
  // No worker was restarted and no recovery was needed: one generation in the whole run.
  auto run = ExpectStoppedRunMatchesReference(job, args);
  EXPECT_EQ(run.applied.size(), static_cast<size_t>(StepsApplied(job)));
  for (const auto& [step, r] : run.applied) EXPECT_EQ(r.generation, 1u) << step;
}

TEST(CoordinatorRestart, KilledMidGrowRecoversAndFinishesTheResize) {
  auto args = TrainArgs(kUntilStopped, 15);
  // Widen the window in which the workers build the next generation.
  Job job(2, args, {"ELASTRA_TEST_APPLY_DELAY_MS=400"});
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << LauncherLog(job);
  // A scheduler waits for the resize; the coordinator that accepted it dies before it is done.
  testing::CommandResult grow;
  std::thread waiter([&] { grow = job.Resize("--workers 3 --wait --timeout 60"); });
  // Kill while the workers build the next generation (the build takes 400 ms or more).
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  std::string state;
  while (state != "building" && std::chrono::steady_clock::now() < deadline) {
    state = job.Status().value("state", std::string());
  }
  if (state != "building") waiter.join();
  ASSERT_EQ(state, "building") << LauncherLog(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  waiter.join();
  // The waiting command still learns that the resize is done (from the restarted coordinator's
  // status, which has the generation's timings).
  EXPECT_EQ(grow.exit_code, 0) << grow.out;
  EXPECT_NE(grow.out.find("\"phase\":\"done\""), std::string::npos) << grow.out;
  EXPECT_NE(grow.out.find("\"workers\":3"), std::string::npos) << grow.out;
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60))) << LauncherLog(job);
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("a change was in flight"), std::string::npos) << log;
  auto run = ExpectStoppedRunMatchesReference(job, args);
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
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(3, args, {"ELASTRA_TEST_APPLY_DELAY_MS=400"});
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << LauncherLog(job);
  auto shrink = job.Resize("--workers 2");
  ASSERT_EQ(shrink.exit_code, 0) << shrink.out;
  // Right after the resize was accepted: the pause is in flight.
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  // The restarted coordinator finishes the shrink, and the job trains on at two workers.
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        return j.value("state", std::string()) == "running" && j["layout"].value("dp", 0) == 2;
      },
      seconds(60)))
      << LauncherLog(job);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60))) << LauncherLog(job);
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("a change was in flight"), std::string::npos) << log;
  auto run = ExpectStoppedRunMatchesReference(job, args);
  std::ifstream final_status(job.state_dir() + "/status.json");
  auto status = nlohmann::json::parse(final_status, nullptr, false);
  ASSERT_FALSE(status.is_discarded());
  EXPECT_EQ(status.value("state", std::string()), "finished");
  EXPECT_EQ(status["layout"].value("dp", 0), 2);
}

TEST(CoordinatorRestart, KilledTwiceStillFinishes) {
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(2, args);
  ASSERT_TRUE(job.WaitForStep(10, seconds(60))) << LauncherLog(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_TRUE(job.WaitForStep(40, seconds(60))) << LauncherLog(job);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60))) << LauncherLog(job);
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

// A checkpointing tp=2 job (no replica of any shard): the coordinator is killed right after a
// checkpoint of that layout committed, and a TP rank right after the restart. Only the journal
// tells the new coordinator which checkpoint the survivors must reload.
TEST(CoordinatorRestart, CommittedCheckpointSurvivesTheRestart) {
  char tmpl[] = "/tmp/elastra_it_XXXXXX";
  const std::string ckpt = std::string(mkdtemp(tmpl)) + "/ckpt";
  std::vector<std::string> args = {"--steps",        std::to_string(kUntilStopped),
                                   "--step-time-ms", "15",
                                   "--global-batch", "32",
                                   "--hidden",       "16",
                                   "--ffn",          "32",
                                   "--layers",       "2",
                                   "--commit-every", "5"};
  std::vector<std::string> run_args = args;
  run_args.insert(run_args.end(), {"--checkpoint-dir", ckpt, "--checkpoint-every", "40"});
  Job job(2, run_args);
  ASSERT_TRUE(job.WaitForStep(3, seconds(60))) << LauncherLog(job);
  auto r = job.Resize("--workers 2 --layout dp=1,pp=1,tp=2 --wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto committed_tp = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(ckpt, ec)) {
      if (e.path().filename().string().find("-g000002") != std::string::npos &&
          std::filesystem::exists(e.path() / "MANIFEST")) {
        return true;
      }
    }
    return false;
  };
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (!committed_tp() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(committed_tp()) << LauncherLog(job);
  pid_t victim = job.PidOfRank(1);
  ASSERT_GT(victim, 0);
  ASSERT_GT(KillCoordinatorAndWaitForRestart(job), 0);
  ASSERT_NO_FATAL_FAILURE(KillWorkerAndRecover(job, victim));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("took back job"), std::string::npos) << log;
  EXPECT_NE(log.find("loaded checkpoint"), std::string::npos) << log;
  ExpectStoppedRunMatchesReference(job, args);
  std::error_code ec;
  std::filesystem::remove_all(std::filesystem::path(ckpt).parent_path(), ec);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  auto j = nlohmann::json::parse(in, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

nlohmann::json StatusOf(const std::string& state_dir) {
  auto r = RunShell(ElastraBinary() + " status --json --state-dir " + state_dir + " 2>/dev/null");
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return r.exit_code != 0 || j.is_discarded() ? nlohmann::json::object() : j;
}

TEST(CoordinatorRestart, StandaloneCoordinatorTakesTheJobBackWithRestartFlag) {
  char tmpl[] = "/tmp/elastra_it_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string state = dir + "/state";
  const std::string log = dir + "/processes.log";

  // Nothing to take back: a clear error, exit 1.
  auto none =
      RunShell(ElastraBinary() + " coordinator --restart --state-dir " + dir + "/empty 2>&1");
  EXPECT_EQ(none.exit_code, 1) << none.out;
  EXPECT_NE(none.out.find("restarting"), std::string::npos) << none.out;

  pid_t coordinator = SpawnLogged({ElastraBinary(), "coordinator", "--state-dir", state,
                                   "--workers", "2", "--job", "standalone"},
                                  log);
  const auto up = std::chrono::steady_clock::now() + seconds(10);
  while (ReadJson(state + "/coordinator.json").value("pid", int64_t{0}) != coordinator &&
         std::chrono::steady_clock::now() < up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto info = ReadJson(state + "/coordinator.json");
  ASSERT_EQ(info.value("pid", int64_t{0}), coordinator);

  const int steps = 150;
  auto args = TrainArgs(steps, 15);
  std::vector<pid_t> workers;
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> argv = {TrainBinary(), "--log", dir + "/run.jsonl"};
    argv.insert(argv.end(), args.begin(), args.end());
    workers.push_back(SpawnLogged(
        argv, log, {"ELASTRA_STATE_DIR=" + state, "ELASTRA_WORKER_ID=w" + std::to_string(i)}));
  }
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  while (StatusOf(state).value("step", int64_t{-1}) < 20 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_GE(StatusOf(state).value("step", int64_t{-1}), 20);

  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  EXPECT_EQ(WaitExit(coordinator, seconds(5)), 128 + SIGKILL);
  pid_t restarted =
      SpawnLogged({ElastraBinary(), "coordinator", "--state-dir", state, "--restart"}, log);
  for (pid_t w : workers) EXPECT_EQ(WaitExit(w, seconds(60)), 0);
  const auto after = ReadJson(state + "/coordinator.json");
  EXPECT_EQ(after.value("pid", int64_t{0}), restarted);
  EXPECT_EQ(after.value("address", std::string()), info.value("address", std::string("?")));
  auto status = StatusOf(state);
  EXPECT_EQ(status.value("state", std::string()), "finished");
  EXPECT_EQ(status.value("job", std::string()), "standalone");
  EXPECT_EQ(status.value("generation", uint64_t{0}), 1u);
  kill(restarted, SIGTERM);
  EXPECT_EQ(WaitExit(restarted, seconds(10)), 0);

  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(text.find("took back job standalone"), std::string::npos) << text;
  ASSERT_TRUE(RunReference(args, dir + "/ref.jsonl"));
  ExpectLogMatches(dir + "/run.jsonl", dir + "/ref.jsonl", steps, 1e-4);
  if (std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
}

}  // namespace
}  // namespace elastra::testing
