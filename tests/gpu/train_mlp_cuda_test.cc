// train_mlp --device cuda against the CPU: the same training with its state and arithmetic on the
// GPU (cuBLAS, the kernels of examples/mlp_ops_cuda.cu) follows the CPU reference's losses within
// rounding, in one process and in elastic jobs under `elastra run` whose workers share the one GPU.
// Every test skips when this process sees no CUDA device.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "elastra/device_buffer.h"
#include "examples/log_check.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using std::chrono::seconds;

// Loss agreement with the CPU: float64 on both sides, only the grouping of sums differs.
constexpr double kTolerance = 1e-9;

// Small enough that each case stays well under a minute, with every dimension splittable by 2.
// Steps are padded to 40 ms so that the job is still training when a worker that joins has set
// up CUDA.
std::vector<std::string> ModelArgs(int steps, int layers = 2, int micro_batches = 2,
                                   int global_batch = 32) {
  return {"--steps",         std::to_string(steps),
          "--step-time-ms",  "40",
          "--global-batch",  std::to_string(global_batch),
          "--hidden",        "32",
          "--ffn",           "64",
          "--layers",        std::to_string(layers),
          "--micro-batches", std::to_string(micro_batches),
          "--commit-every",  "5"};
}

std::vector<std::string> With(std::vector<std::string> args, const std::string& device) {
  args.insert(args.end(), {"--device", device});
  return args;
}

std::string Join(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += " " + a;
  return s;
}

// A scratch directory, removed at the end unless ELASTRA_KEEP_TEST_DIRS is set.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/elastra_gpu_mlp_XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    if (std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(path_, ec);
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `train_mlp --reference` on `device` into `log`; its output on failure.
::testing::AssertionResult RunReferenceOn(const std::string& device,
                                          const std::vector<std::string>& args,
                                          const std::string& log, std::string* out = nullptr) {
  CommandResult r = RunShell("ELASTRA_DEVICE=0 " + TrainBinary() + " --reference --log " + log +
                             Join(With(args, device)));
  if (out != nullptr) *out = r.out;
  if (r.exit_code != 0) {
    return ::testing::AssertionFailure() << "train_mlp --reference --device " << device
                                         << " exited " << r.exit_code << ": " << r.out;
  }
  return ::testing::AssertionSuccess();
}

// Compares the run's log against the CPU reference of the same model over `steps` steps.
examples::TrainLog ExpectMatchesCpuReference(const std::string& run_log,
                                             const std::vector<std::string>& args, int steps,
                                             const std::string& dir) {
  const std::string ref = dir + "/cpu_ref.jsonl";
  EXPECT_TRUE(RunReferenceOn("cpu", args, ref));
  return ExpectLogMatches(run_log, ref, steps, kTolerance);
}

// Whether train_mlp's final line (it starts with `prefix`) says it ran on CUDA device 0.
bool RanOnDevice0(const std::string& output, const std::string& prefix) {
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) == 0 && line.find(" on CUDA device 0") != std::string::npos) {
      return true;
    }
  }
  return false;
}

std::set<std::tuple<int, int, int>> Layouts(const examples::TrainLog& log) {
  std::set<std::tuple<int, int, int>> layouts;
  for (const auto& [step, r] : log.applied) layouts.insert({r.dp, r.pp, r.tp});
  return layouts;
}

// Resizes with --wait, then lets the job train `steps` more steps in the new generation.
void ResizeAndTrain(Job& job, const std::string& args, int steps) {
  auto r = job.Resize(args + " --wait");
  ASSERT_EQ(r.exit_code, 0) << args << ": " << r.out << LauncherLog(job);
  int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + steps, seconds(30))) << LauncherLog(job);
}

TEST(TrainMlpCuda, ReferenceOnTheGpuMatchesTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int steps = 60;
  // Three blocks and three micro-batches of uneven size (13, 13, 14 rows).
  const std::vector<std::string> args = ModelArgs(steps, 3, 3, 40);
  TempDir dir;
  const std::string gpu_log = dir.path() + "/gpu_ref.jsonl";
  std::string out;
  ASSERT_TRUE(RunReferenceOn("cuda", args, gpu_log, &out));
  EXPECT_TRUE(RanOnDevice0(out, "reference: ")) << out;
  ExpectMatchesCpuReference(gpu_log, args, steps, dir.path());
}

// Host backend: the collectives take host buffers, so the model's device buffers go through host
// copies (examples/mlp_ops.h, OpsCollectives); the worker stages its state moves the same way.
TEST(TrainMlpCuda, ElasticJobOverGlooResized2To1To2MatchesCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int steps = 200;
  const std::vector<std::string> args = ModelArgs(steps);
  Job job(2, With(args, "cuda"), {"ELASTRA_DEVICE=0", "ELASTRA_BACKEND=gloo"});
  ASSERT_TRUE(job.WaitForStep(10, seconds(45))) << LauncherLog(job);
  ResizeAndTrain(job, "--workers 1", 10);
  // Back to two workers as two pipeline stages: activations and gradients go stage to stage.
  ResizeAndTrain(job, "--workers 2 --layout dp=1,pp=2,tp=1", 5);
  ASSERT_EQ(job.Wait(seconds(45)), 0) << LauncherLog(job);
  EXPECT_TRUE(RanOnDevice0(LauncherLog(job), "train_mlp: ")) << LauncherLog(job);
  auto log = ExpectMatchesCpuReference(job.log_path(), args, steps, job.dir());
  EXPECT_EQ(Layouts(log), (std::set<std::tuple<int, int, int>>{{2, 1, 1}, {1, 1, 1}, {1, 2, 1}}));
}

// NCCL backend: device buffers straight to NCCL. Two ranks on one GPU need a host of their own
// each (the worker sets NCCL_HOSTID per worker under ELASTRA_NCCL_HOSTID_PER_WORKER=1) and the
// network transport. Every collective the model has: the DP allreduce, then the TP allreduces,
// then pipeline send/recv and the loss's world allreduce.
TEST(TrainMlpCuda, ElasticJobOverNcclChangingLayoutMatchesCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int steps = 200;
  const std::vector<std::string> args = ModelArgs(steps);
  Job job(2, With(args, "cuda"),
          {"ELASTRA_DEVICE=0", "ELASTRA_BACKEND=nccl", "ELASTRA_NCCL_HOSTID_PER_WORKER=1",
           "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1"});
  ASSERT_TRUE(job.WaitForStep(10, seconds(45))) << LauncherLog(job);
  ResizeAndTrain(job, "--workers 2 --layout dp=1,pp=1,tp=2", 10);
  ResizeAndTrain(job, "--workers 2 --layout dp=1,pp=2,tp=1", 5);
  ASSERT_EQ(job.Wait(seconds(45)), 0) << LauncherLog(job);
  auto log = ExpectMatchesCpuReference(job.log_path(), args, steps, job.dir());
  EXPECT_EQ(Layouts(log), (std::set<std::tuple<int, int, int>>{{2, 1, 1}, {1, 1, 2}, {1, 2, 1}}));
}

// A worker killed in an NCCL job: the survivors' recovery interrupts their NCCL world instead of
// releasing it, and the next generation is made from it by ncclCommShrink where NCCL allows it,
// or by a fresh init where it does not (NCCL 2.28 refuses to shrink a world whose own state is an
// error, which it usually is once its proxy has seen the killed peer's socket close); either way
// all survivors agree on the same, and training goes on from the newest in-memory commit and
// still matches the CPU reference.
TEST(TrainMlpCuda, KilledWorkerInNcclJobSurvivorsRebuildAndMatchCpuReference) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const int steps = 150;
  const std::vector<std::string> args = ModelArgs(steps, 2, 2, 48);  // 48 splits over 3 and 2
  Job job(3, With(args, "cuda"),
          {"ELASTRA_DEVICE=0", "ELASTRA_BACKEND=nccl", "ELASTRA_NCCL_HOSTID_PER_WORKER=1",
           "NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "ELASTRA_COLLECTIVE_TIMEOUT_MS=3000"});
  ASSERT_TRUE(job.WaitForStep(15, seconds(60))) << LauncherLog(job);
  pid_t victim = job.PidOfRank(2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        return j.value("state", std::string()) == "running" && j["layout"].value("dp", 0) == 2;
      },
      seconds(40)))
      << LauncherLog(job);
  ASSERT_EQ(job.Wait(seconds(60)), 0) << LauncherLog(job);
  const std::string log = LauncherLog(job);
  const bool shrunk = log.find("by ncclCommShrink") != std::string::npos;
  const bool afresh = log.find("starting NCCL afresh") != std::string::npos;
  EXPECT_TRUE(shrunk || afresh) << log;
  std::printf("[   INFO   ] the survivors' NCCL world was %s\n",
              shrunk ? "shrunk (ncclCommShrink)" : "initialized afresh");
  auto run = ExpectMatchesCpuReference(job.log_path(), args, steps, job.dir());
  EXPECT_EQ(Layouts(run), (std::set<std::tuple<int, int, int>>{{3, 1, 1}, {2, 1, 1}}));
}

// Under mpirun a rank that a shrink takes out parks (it cannot be started again); train_mlp then
// gives the model's scratch memory (the CUDA pool's free memory, the cuBLAS workspace) back to the
// device, and makes it again when the rank comes back at the grow. Two ranks on the one GPU over
// gloo. Skips without Open MPI's mpirun or a train_mlp built with MPI.
TEST(TrainMlpCuda, ParkedMpirunRankGivesItsScratchMemoryBack) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  if (RunShell("mpirun --version | grep -q 'Open MPI'").exit_code != 0) {
    GTEST_SKIP() << "no Open MPI mpirun";
  }
  if (RunShell("ldd " + TrainBinary() + " | grep -q libmpi").exit_code != 0) {
    GTEST_SKIP() << "train_mlp built without MPI";
  }
  const int steps = 200;
  const std::vector<std::string> args = ModelArgs(steps);
  TempDir dir;
  const std::string d = dir.path();
  // mpirun in the background; its exit code lands in `rc`.
  CommandResult started = RunShell(
      "cd " + d +
      " && (OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ELASTRA_DEVICE=0 "
      "ELASTRA_BACKEND=gloo mpirun --oversubscribe -np 2 --enable-recovery -x ELASTRA_DEVICE "
      "-x ELASTRA_BACKEND " +
      TrainBinary() + " --log " + d + "/run.jsonl" + Join(With(args, "cuda")) +
      "; echo $? > rc) > mpirun.out 2>&1 & echo $! > " + d + "/pid");
  ASSERT_EQ(started.exit_code, 0) << started.out;
  auto output = [&] { return RunShell("cat " + d + "/mpirun.out").out; };
  struct Stop {  // mpirun (the child of the shell whose pid is in `pid`) goes at the end
    std::string dir;
    ~Stop() {
      RunShell("p=$(cat " + dir + "/pid) && [ -n \"$p\" ] && pkill -TERM -P \"$p\" && sleep 2");
    }
  } stop{d};
  auto status = [&]() -> nlohmann::json {
    CommandResult r = RunShell(ElastraBinary() + " status --json --state-dir " + d + "/.elastra");
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return r.exit_code == 0 && j.is_object() ? j : nlohmann::json::object();
  };
  auto wait_for = [&](const std::function<bool()>& done, seconds timeout) {
    for (auto end = std::chrono::steady_clock::now() + timeout;
         std::chrono::steady_clock::now() < end;
         std::this_thread::sleep_for(std::chrono::milliseconds(200))) {
      if (done()) return true;
    }
    return false;
  };
  auto at_step = [&](int64_t step) {
    return wait_for([&] { return status().value("step", int64_t{0}) >= step; }, seconds(45));
  };
  ASSERT_TRUE(at_step(10)) << output();
  CommandResult down =
      RunShell(ElastraBinary() + " resize --state-dir " + d + "/.elastra --workers 1 --wait");
  ASSERT_EQ(down.exit_code, 0) << down.out << output();
  // "train_mlp: parked: N bytes of scratch memory back to the device" from the parked rank.
  const std::string kParked = "train_mlp: parked: ";
  ASSERT_TRUE(wait_for([&] { return output().find(kParked) != std::string::npos; }, seconds(10)))
      << output();
  const std::string out = output();
  const long long released = std::atoll(out.c_str() + out.find(kParked) + kParked.size());
  EXPECT_GT(released, 0) << out;
  ASSERT_TRUE(at_step(status().value("step", int64_t{0}) + 10)) << output();
  CommandResult up =
      RunShell(ElastraBinary() + " resize --state-dir " + d + "/.elastra --workers 2 --wait");
  ASSERT_EQ(up.exit_code, 0) << up.out << output();
  // Back from parking, the rank allocates and multiplies (a new cuBLAS handle) again.
  ASSERT_TRUE(at_step(status().value("step", int64_t{0}) + 5)) << output();
  ASSERT_TRUE(wait_for([&] { return RunShell("test -s " + d + "/rc").exit_code == 0; },
                       seconds(45)))
      << output();
  EXPECT_EQ(RunShell("cat " + d + "/rc").out, "0\n") << output();
  EXPECT_TRUE(RanOnDevice0(output(), "train_mlp: ")) << output();
  auto log = ExpectMatchesCpuReference(d + "/run.jsonl", args, steps, d);
  EXPECT_EQ(Layouts(log), (std::set<std::tuple<int, int, int>>{{2, 1, 1}, {1, 1, 1}}));
}

}  // namespace
}  // namespace elastra::testing
