// End-to-end: real `elastra run`, real train_mlp worker processes, real sockets, real SIGKILL.
// Each test checks the run against `train_mlp --reference`: the same loss at every applied step
// (1e-4 relative) and exact sample accounting.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "elastra/device_buffer.h"
#include "elastra/layout.h"
#include "examples/log_check.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using std::chrono::seconds;

std::vector<std::string> TrainArgs(int steps, int step_ms) {
  return {"--steps", std::to_string(steps), "--step-time-ms", std::to_string(step_ms),
          "--global-batch", "48", "--hidden", "24", "--commit-every", "5"};
}

// A model small enough for 8 workers on 2 cores, with every dimension splittable up to 4 ways.
std::vector<std::string> ThreeDArgs(int steps) {
  return {"--steps", std::to_string(steps), "--step-time-ms", "15", "--global-batch", "32",
          "--hidden", "16", "--ffn", "32", "--layers", "2", "--commit-every", "5"};
}

std::set<int> DpValues(const examples::TrainLog& log) {
  std::set<int> dps;
  for (const auto& [step, r] : log.applied) dps.insert(r.dp);
  return dps;
}

TEST(ElasticJob, ResizeDownThenUpMatchesReference) {
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(4, args);
  ASSERT_TRUE(job.WaitForStep(15, seconds(60))) << LauncherLog(job);

  auto down = job.Resize("--workers 2 --wait");
  ASSERT_EQ(down.exit_code, 0) << down.out;
  auto d = nlohmann::json::parse(down.out);
  EXPECT_EQ(d["workers"], 2);
  EXPECT_EQ(d["layout"]["dp"], 2);
  EXPECT_EQ(d["layout"]["pp"], 1);
  EXPECT_EQ(d["layout"]["tp"], 1);
  EXPECT_GE(d["generation"].get<int>(), 2);
  // The timings are the change's own: each worker's rebuild and transfer happen between the first
  // pause and the last ready report, and the change takes no longer than the request.
  EXPECT_GT(d["downtime_ms"].get<double>(), 0.0);
  EXPECT_GE(d["downtime_ms"].get<double>(), d["rebuild_ms"].get<double>());
  EXPECT_GE(d["downtime_ms"].get<double>(), d["transfer_ms"].get<double>());
  EXPECT_GT(d["rebuild_ms"].get<double>(), 0.0);
  EXPECT_GE(d["total_ms"].get<double>(), d["downtime_ms"].get<double>());

  int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 10, seconds(60)));
  auto up = job.Resize("--workers 3 --wait");
  ASSERT_EQ(up.exit_code, 0) << up.out;
  auto u = nlohmann::json::parse(up.out);
  EXPECT_EQ(u["workers"], 3);
  EXPECT_EQ(u["layout"]["dp"], 3);
  EXPECT_GT(u["generation"].get<int>(), d["generation"].get<int>());
  at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  auto log = ExpectStoppedRunMatchesReference(job, args);
  EXPECT_EQ(DpValues(log), (std::set<int>{2, 3, 4}));
}

TEST(ElasticJob, KilledWorkerIsDetectedAndSurvivorsRollBack) {
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(3, args);
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << LauncherLog(job);
  pid_t victim = job.PidOfRank(1);
  ASSERT_GT(victim, 0);
  auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  // Detected: the coordinator stops counting the worker as a member. The launcher reports the
  // exit at once (the heartbeat deadline, 1.5 s, is the fallback); the bound here only says it
  // came from one of those and not from a decision timeout, whatever the machine's load.
  bool detected = job.WaitFor(
      [&](const nlohmann::json& j) {
        for (const auto& w : j.value("workers", nlohmann::json::array())) {
          if (w.value("pid", int64_t{0}) == victim) return w.value("state", std::string()) != "member";
        }
        return true;
      },
      seconds(10));
  double detect_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSERT_TRUE(detected);
  EXPECT_LT(detect_s, 30.0);
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        return j.value("state", std::string()) == "running" && j["layout"].value("dp", 0) == 2;
      },
      seconds(30)))
      << LauncherLog(job);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  auto log = ExpectStoppedRunMatchesReference(job, args);
  EXPECT_EQ(DpValues(log), (std::set<int>{2, 3}));
}

// A worker whose arithmetic fails (a CUDA error with --device cuda; injected here through
// train_mlp's ELASTRA_TEST_FAIL_OPS) says which step failed and why and exits 1 instead of
// aborting; its peers see it gone, recover without it and still follow the reference.
TEST(ElasticJob, WorkerWhoseArithmeticFailsExitsAndTheOthersGoOn) {
  const int steps = 60;
  auto args = TrainArgs(steps, 15);
  Job job(3, args, {"ELASTRA_TEST_FAIL_OPS=w1:20"});
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("train_mlp: step 20 failed: kInternal: injected by ELASTRA_TEST_FAIL_OPS; "
                     "this worker gives up"),
            std::string::npos)
      << log;
  size_t w1 = log.find("worker w1 (pid ");
  ASSERT_NE(w1, std::string::npos) << log;
  const std::string w1_line = log.substr(w1, log.find('\n', w1) - w1);
  EXPECT_NE(w1_line.find("exited with 1"), std::string::npos) << w1_line;
  auto run = ExpectMatchesReference(job, args, steps);
  EXPECT_EQ(DpValues(run), (std::set<int>{2, 3}));
}

TEST(ElasticJob, KillDuringReconfigurationRecovers) {
  auto args = TrainArgs(kUntilStopped, 15);
  // Widen the window in which workers build the next generation so the kill lands inside it.
  Job job(3, args, {"ELASTRA_TEST_APPLY_DELAY_MS=400"});
  ASSERT_TRUE(job.WaitForStep(12, seconds(60))) << LauncherLog(job);
  pid_t victim = job.PidOfRank(2);
  ASSERT_GT(victim, 0);
  auto grow = job.Resize("--workers 4");
  ASSERT_EQ(grow.exit_code, 0) << grow.out;
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) { return j.value("state", std::string()) == "building"; },
      seconds(30)))
      << LauncherLog(job);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(job.WaitFor(
      [victim](const nlohmann::json& j) {
        if (j.value("state", std::string()) != "running") return false;
        for (const auto& w : j.value("workers", nlohmann::json::array())) {
          if (w.value("pid", int64_t{0}) == victim) return w.value("state", std::string()) != "member";
        }
        return true;
      },
      seconds(60)))
      << LauncherLog(job);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

TEST(ElasticJob, ImpossibleResizesAreRefusedAndChangeNothing) {
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(2, args);
  ASSERT_TRUE(job.WaitForStep(5, seconds(60))) << LauncherLog(job);
  uint64_t generation = job.Status().value("generation", uint64_t{0});

  auto zero = job.Resize("--workers 0");
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.out.find("--workers must be between 1"), std::string::npos) << zero.out;
  auto junk = job.Resize("--workers 3x");
  EXPECT_EQ(junk.exit_code, 2);
  EXPECT_NE(junk.out.find("must be an integer"), std::string::npos) << junk.out;
  auto too_many = job.Resize("--workers 100");
  EXPECT_EQ(too_many.exit_code, 1);
  EXPECT_NE(too_many.out.find("refused"), std::string::npos) << too_many.out;
  // Three pipeline stages for a model of two blocks: the state cannot be laid out so.
  auto bad_layout = job.Resize("--workers 3 --layout dp=1,pp=3,tp=1");
  EXPECT_EQ(bad_layout.exit_code, 1);
  EXPECT_NE(bad_layout.out.find("refused"), std::string::npos) << bad_layout.out;
  EXPECT_NE(bad_layout.out.find("does not fit the job's state"), std::string::npos)
      << bad_layout.out;
  auto mismatched = job.Resize("--workers 3 --layout dp=2");
  EXPECT_EQ(mismatched.exit_code, 1) << mismatched.out;

  auto status = job.Status();
  EXPECT_EQ(status.value("generation", uint64_t{0}), generation);
  EXPECT_EQ(status["layout"].value("dp", 0), 2);
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

TEST(ElasticJob, LayoutChangesOfEveryDimensionMatchReference) {
  // (dp,pp,tp) = (2,1,2) -> (1,2,2) -> (4,1,1) -> (1,2,4): tensor and pipeline shards move live.
  std::vector<std::string> args = ThreeDArgs(kUntilStopped);
  Job job(4, args);
  ASSERT_TRUE(job.WaitForStep(5, seconds(60))) << LauncherLog(job);
  const char* changes[][2] = {{"4", "dp=2,pp=1,tp=2"},
                              {"4", "dp=1,pp=2,tp=2"},
                              {"4", "dp=4,pp=1,tp=1"},
                              {"8", "dp=1,pp=2,tp=4"}};
  for (const auto& change : changes) {
    auto r = job.Resize(std::string("--workers ") + change[0] + " --layout " + change[1] + " --wait");
    ASSERT_EQ(r.exit_code, 0) << r.out << LauncherLog(job);
    Layout want;
    ASSERT_TRUE(ParseLayout(change[1], &want));
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["layout"]["dp"], want.dp);
    EXPECT_EQ(j["layout"]["pp"], want.pp);
    EXPECT_EQ(j["layout"]["tp"], want.tp);
    int64_t at = job.Status().value("step", int64_t{0});
    ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));
  }
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  auto log = ExpectStoppedRunMatchesReference(job, args);
  std::set<std::tuple<int, int, int>> layouts;
  for (const auto& [step, r] : log.applied) layouts.insert({r.dp, r.pp, r.tp});
  EXPECT_TRUE(layouts.count({1, 2, 2}) && layouts.count({2, 1, 2}) && layouts.count({4, 1, 1}) &&
              layouts.count({1, 2, 4}))
      << "not every layout trained";
}

TEST(ElasticJob, ReplicatedTensorShardsSurviveAKilledRank) {
  // dp=2 x tp=2: every TP shard has a DP replica, so a killed rank is rebuilt from memory.
  std::vector<std::string> args = ThreeDArgs(kUntilStopped);
  Job job(4, args);
  ASSERT_TRUE(job.WaitForStep(3, seconds(60))) << LauncherLog(job);
  auto r = job.Resize("--workers 4 --layout dp=2,pp=1,tp=2 --wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 8, seconds(60)));
  pid_t victim = job.PidOfRank(3);
  ASSERT_GT(victim, 0);
  // Recovered: a generation of the failure formed and trains on.
  ASSERT_NO_FATAL_FAILURE(KillWorkerAndRecover(job, victim));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

// A generation whose build fails on one worker after the state moved (its shards are in the new
// layout, its commits in the old one; the others may have finished and committed the new layout,
// and then hold nothing of the old one: GenerationManager::NoteBuiltWorkers): the recovery rolls
// back to a commit of the committed layout, and the job still matches the reference, whatever
// layout it goes on in.
TEST(ElasticJob, BuildFailingAfterTheStateMovedRollsBack) {
  std::vector<std::string> args = ThreeDArgs(kUntilStopped);
  Job job(2, args, {"ELASTRA_TEST_FAIL_AFTER_MOVE=w1:2"});
  ASSERT_TRUE(job.WaitForStep(4, seconds(60))) << LauncherLog(job);
  auto r = job.Resize("--workers 2 --layout dp=1,pp=1,tp=2");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // The failed build is recovered from: a generation of the failure formed and the job trains
  // on (the resize, still wanted, may have been made again since).
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        const auto h = j.value("history", nlohmann::json::array());
        return j.value("state", std::string()) == "running" &&
               std::any_of(h.begin(), h.end(), [](const nlohmann::json& e) {
                 return e.value("reason", std::string()) == "failure";
               });
      },
      seconds(60)))
      << LauncherLog(job);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  EXPECT_NE(log.find("injected by ELASTRA_TEST_FAIL_AFTER_MOVE"), std::string::npos) << log;
  ExpectStoppedRunMatchesReference(job, args);
}

TEST(ElasticJob, PlannerPicksTheLayoutUnderAPin) {
  // With a model description and tp pinned to 2, a resize that names only a worker count gets a
  // tp=2 layout from the planner, and training still matches the reference.
  std::vector<std::string> args = ThreeDArgs(kUntilStopped);
  std::vector<std::string> planned = args;
  planned.insert(planned.end(), {"--plan", "--pin-tp", "2"});
  Job job(4, planned);
  ASSERT_TRUE(job.WaitForStep(5, seconds(60))) << LauncherLog(job);
  EXPECT_EQ(job.Status()["layout"].value("tp", 0), 2);
  auto r = job.Resize("--workers 2 --wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["tp"], 2);
  EXPECT_EQ(j["layout"]["dp"], 1);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(60)));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

// A training backend the worker cannot provide is refused at start with a clear message, and the
// job ends instead of waiting for workers that will never join.
TEST(ElasticJob, UnusableBackendIsRefusedClearly) {
  auto args = TrainArgs(20, 15);
  {
    Job job(1, args, {"ELASTRA_BACKEND=tpu"});
    EXPECT_NE(job.Wait(seconds(60)), 0);
    EXPECT_NE(LauncherLog(job).find("ELASTRA_BACKEND='tpu' (auto, gloo or nccl)"),
              std::string::npos)
        << LauncherLog(job);
  }
  // NCCL needs a device: train_mlp's CPU state has none and ELASTRA_DEVICE is unset.
  Job job(2, args, {"ELASTRA_BACKEND=nccl"});
  EXPECT_NE(job.Wait(seconds(60)), 0);
  const std::string log = LauncherLog(job);
  EXPECT_TRUE(log.find("ELASTRA_BACKEND=nccl needs a CUDA device") != std::string::npos ||
              log.find("has no NCCL") != std::string::npos)
      << log;
}

// `elastra run --gpus N` gives each worker a device of its own (ELASTRA_DEVICE; the workers
// report it when they join, and this CPU model only carries it): a worker that a shrink removes
// frees its device, and the worker a grow starts takes it. Bad values are refused.
TEST(ElasticJob, GpusFlagGivesEachWorkerItsOwnDevice) {
  auto devices = [](const nlohmann::json& status) {
    std::multiset<int> out;
    for (const auto& w : status.value("workers", nlohmann::json::array())) {
      if (w.value("state", std::string()) == "member") out.insert(w.value("device", -1));
    }
    return out;
  };
  auto args = TrainArgs(kUntilStopped, 15);
  Job job(2, args, {}, {"--gpus", "2"});
  ASSERT_TRUE(job.WaitForStep(5, seconds(60))) << LauncherLog(job);
  EXPECT_EQ(devices(job.Status()), (std::multiset<int>{0, 1})) << job.Status().dump();
  auto shrink = job.Resize("--workers 1 --wait");
  ASSERT_EQ(shrink.exit_code, 0) << shrink.out;
  // The removed worker's device is free once the launcher has reaped it.
  const auto deadline = std::chrono::steady_clock::now() + seconds(20);
  while (LauncherLog(job).find(") exited with 0") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(LauncherLog(job).find(") exited with 0"), std::string::npos) << LauncherLog(job);
  auto grow = job.Resize("--workers 2 --wait");
  ASSERT_EQ(grow.exit_code, 0) << grow.out;
  EXPECT_EQ(devices(job.Status()), (std::multiset<int>{0, 1})) << job.Status().dump();
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);

  for (const std::string bad : {"0", "two", "-1"}) {
    auto r = RunShell(ElastraBinary() + " run --nproc 1 --gpus " + bad + " -- /bin/true");
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.out;
  }
  if (CudaDeviceCount() == 0) {
    auto r = RunShell(ElastraBinary() + " run --nproc 1 --gpus auto -- /bin/true");
    EXPECT_EQ(r.exit_code, 2) << r.out;
    EXPECT_NE(r.out.find("no CUDA device"), std::string::npos) << r.out;
  }
}

TEST(ElasticJob, ClientWithWrongKeyIsRefusedClearly) {
  Job job(1, TrainArgs(kUntilStopped, 10));
  ASSERT_TRUE(job.WaitForStep(1, seconds(60))) << LauncherLog(job);
  // A copy of coordinator.json whose admin key pair the coordinator never saw.
  auto info = nlohmann::json::parse(std::ifstream(job.state_dir() + "/coordinator.json"));
  auto fresh = nlohmann::json::parse(RunShell(ElastraBinary() + " keygen").out);
  std::string stranger = job.dir() + "/stranger";
  std::filesystem::create_directories(stranger);
  std::string text = info.dump();
  std::string old_pub = info["admin"]["public"], old_sec = info["admin"]["secret"];
  text.replace(text.find(old_pub), old_pub.size(), fresh["public"].get<std::string>());
  text.replace(text.find(old_sec), old_sec.size(), fresh["secret"].get<std::string>());
  std::ofstream(stranger + "/coordinator.json") << text;
  auto r = RunShell(ElastraBinary() + " status --state-dir " + stranger);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("refused this client's key"), std::string::npos) << r.out;
  auto resize = RunShell(ElastraBinary() + " resize --workers 2 --state-dir " + stranger);
  EXPECT_EQ(resize.exit_code, 1);
  EXPECT_NE(resize.out.find("refused this client's key"), std::string::npos) << resize.out;
  // The job itself is untouched.
  EXPECT_EQ(job.Status().value("generation", uint64_t{0}), 1u);
  job.StopTraining();
  EXPECT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
}

}  // namespace
}  // namespace elastra::testing
