// A train_mlp job started by the real `mpirun --oversubscribe -np 4` with no other set-up: MPI
// rank 0 hosts the coordinator and writes .elastra/coordinator.json in the working directory; the
// real `elastra resize --state-dir .elastra --wait` shrinks it to 2 (the two removed ranks park)
// and grows it back to 4 (the parked ranks come back, no process is started); the log matches
// `train_mlp --reference`.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "examples/log_check.h"
#include "testbed/sanitizers.h"

namespace elastra {
namespace {

using std::chrono::seconds;

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

CommandResult RunShell(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool HaveMpirun() { return access(MPIRUN_BINARY, X_OK) == 0; }

std::vector<std::string> TrainArgs(int steps, int step_ms) {
  return {"--steps", std::to_string(steps), "--step-time-ms", std::to_string(step_ms),
          "--global-batch", "48", "--hidden", "24", "--commit-every", "5"};
}

// `mpirun ... train_mlp ARGS --log run.jsonl` in a fresh directory, as a child process group.
class MpirunJob {
 public:
  MpirunJob(int np, const std::vector<std::string>& mpirun_flags,
            const std::vector<std::string>& train_args) {
    char tmpl[] = "/tmp/elastra-mpirun-XXXXXX";
    dir_ = mkdtemp(tmpl);
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      if (chdir(dir_.c_str()) != 0) _exit(127);
      FILE* out = std::freopen("mpirun.out", "w", stdout);
      if (out == nullptr) _exit(127);
      dup2(fileno(stdout), 2);
      setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
      setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
      if (testbed::kUnderAddressSanitizer) {
        setenv("ASAN_OPTIONS", testbed::AsanOptionsWith(testbed::kMpiAsanOptions).c_str(), 1);
      }
      // Nothing from the test's own environment may point the job elsewhere.
      unsetenv("ELASTRA_COORDINATOR");
      unsetenv("ELASTRA_STATE_DIR");
      std::vector<std::string> args = {MPIRUN_BINARY, "--oversubscribe", "-np",
                                       std::to_string(np)};
      args.insert(args.end(), mpirun_flags.begin(), mpirun_flags.end());
      args.push_back(TRAIN_MLP_BINARY);
      args.insert(args.end(), train_args.begin(), train_args.end());
      args.push_back("--log");
      args.push_back(dir_ + "/run.jsonl");
      args.push_back("--stop-file");
      args.push_back(stop_path());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    setpgid(pid_, pid_);
  }

  ~MpirunJob() {
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    RunShell("rm -rf " + dir_);
  }

  const std::string& dir() const { return dir_; }
  std::string state_dir() const { return dir_ + "/.elastra"; }
  std::string output() const { return ReadFile(dir_ + "/mpirun.out"); }
  // train_mlp's --stop-file: the ranks end the job together once it exists (a test trains with
  // kUntilStopped steps and stops when it is done, instead of hoping the job is still running).
  std::string stop_path() const { return dir_ + "/stop"; }
  void StopTraining() const { std::ofstream(stop_path()) << "stop\n"; }
  // The steps the job applied, from its log.
  int64_t StepsApplied() const {
    auto log = examples::ReadTrainLog(dir_ + "/run.jsonl");
    return log.ok() && !log->applied.empty() ? log->applied.rbegin()->first + 1 : 0;
  }

  nlohmann::json Status() {
    auto r = RunShell(std::string(ELASTRA_BINARY) + " status --json --state-dir " + state_dir());
    if (r.exit_code != 0) return nlohmann::json::object();
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }

  bool WaitFor(const std::function<bool(const nlohmann::json&)>& pred, seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited()) return false;
      auto j = Status();
      if (!j.empty() && pred(j)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  bool WaitForStep(int64_t step, seconds timeout) {
    return WaitFor([&](const nlohmann::json& j) { return j.value("step", int64_t{0}) >= step; },
                   timeout);
  }

  CommandResult Resize(const std::string& args) {
    return RunShell(std::string(ELASTRA_BINARY) + " resize --state-dir " + state_dir() + " " +
                    args);
  }

  // mpirun's exit code, or -1 after killing it at the timeout.
  int Wait(seconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (Exited()) return exit_code_;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(-pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }

 private:
  bool Exited() {
    if (pid_ <= 0) return true;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    pid_ = -1;
    return true;
  }

  std::string dir_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

// Runs `train_mlp --reference` with the job's `args` (--steps set to `steps`) next to its log and
// matches the log against it (examples::MatchLogs: exact sample accounting over `steps` steps, loss within 1e-4
// relative).
examples::LogMatch MatchReference(const std::string& log, const std::string& dir,
                                  std::vector<std::string> args, int steps) {
  std::string ref = dir + "/ref.jsonl";
  std::string cmd = std::string(TRAIN_MLP_BINARY) + " --reference --log " + ref;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--steps") args[i + 1] = std::to_string(steps);
  }
  for (const auto& a : args) cmd += " " + a;
  auto r = RunShell(cmd);
  if (r.exit_code != 0) {
    examples::LogMatch failed;
    failed.status = InternalError("train_mlp --reference exited with " +
                                  std::to_string(r.exit_code) + ": " + r.out);
    return failed;
  }
  return examples::MatchLogs(log, ref, steps, 1e-4);
}

examples::LogMatch MatchReference(const MpirunJob& job, std::vector<std::string> args,
                                  int steps) {
  return MatchReference(job.dir() + "/run.jsonl", job.dir(), std::move(args), steps);
}

std::map<std::string, nlohmann::json> WorkersById(const nlohmann::json& status) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& w : status.value("workers", nlohmann::json::array())) {
    out[w.value("id", std::string())] = w;
  }
  return out;
}

// Measured with Open MPI 4.1.4: with --enable-recovery the survivors of a killed rank live on and
// mpirun exits 0 once they are done; with --mca orte_abort_on_non_zero_status 0 they live on too,
// but mpirun kills them at the end.
const std::vector<std::string> kKeepAlive = {"--enable-recovery"};

// The step budget of a job the test ends with StopTraining().
constexpr int kUntilStopped = 1000000;

TEST(MpirunJob, ShrinkParksGrowBringsBackAndMatchesReference) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  auto args = TrainArgs(kUntilStopped, 15);
  MpirunJob job(4, kKeepAlive, args);
  ASSERT_TRUE(job.WaitForStep(15, seconds(40))) << job.output();
  auto start = job.Status();
  auto ids = WorkersById(start);
  ASSERT_EQ(ids.size(), 4u) << start.dump();
  std::set<int64_t> pids;
  for (int r = 0; r < 4; ++r) {
    auto it = ids.find("mpi-" + std::to_string(r));
    ASSERT_NE(it, ids.end()) << start.dump();
    EXPECT_EQ(it->second.value("state", std::string()), "member");
    pids.insert(it->second.value("pid", int64_t{0}));
  }
  EXPECT_EQ(start["layout"].value("dp", 0), 4);

  auto down = job.Resize("--workers 2 --wait --timeout 30");
  ASSERT_EQ(down.exit_code, 0) << down.out << job.output();
  auto d = nlohmann::json::parse(down.out);
  EXPECT_EQ(d["workers"], 2);
  EXPECT_EQ(d["layout"]["dp"], 2);
  // The two removed ranks stay in the job as standby (parked), their processes alive.
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        int standby = 0;
        for (const auto& w : j["workers"]) standby += w.value("state", std::string()) == "standby";
        return standby == 2;
      },
      seconds(10)))
      << job.Status().dump();
  for (const auto& [id, w] : WorkersById(job.Status())) {
    if (w.value("state", std::string()) == "standby") {
      EXPECT_EQ(kill(static_cast<pid_t>(w.value("pid", int64_t{0})), 0), 0) << id;
    }
  }

  int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 15, seconds(30))) << job.output();
  auto up = job.Resize("--workers 4 --wait --timeout 30");
  ASSERT_EQ(up.exit_code, 0) << up.out << job.output();
  auto u = nlohmann::json::parse(up.out);
  EXPECT_EQ(u["workers"], 4);
  EXPECT_EQ(u["layout"]["dp"], 4);
  EXPECT_GT(u["generation"].get<int>(), d["generation"].get<int>());
  // The same four processes: the parked ranks came back, nothing was started.
  auto after = job.Status();
  std::set<int64_t> pids_after;
  for (const auto& [id, w] : WorkersById(after)) {
    if (w.value("state", std::string()) == "member") pids_after.insert(w.value("pid", int64_t{0}));
  }
  EXPECT_EQ(pids_after, pids) << after.dump();
  at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(30))) << job.output();

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << job.output();
  std::string out = job.output();
  EXPECT_EQ(out.find("to keep it alive"), std::string::npos)
      << "warned although the flag was given";
  EXPECT_NE(out.find("parked after step"), std::string::npos);

  auto match = MatchReference(job, args, static_cast<int>(job.StepsApplied()));
  EXPECT_TRUE(match.status.ok()) << match.status;
  std::set<int> dps;
  for (const auto& [step, rec] : match.run.applied) dps.insert(rec.dp);
  EXPECT_EQ(dps, (std::set<int>{2, 4}));
}

TEST(MpirunJob, ParkedRanksLeaveWhenTheJobFinishes) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  auto args = TrainArgs(kUntilStopped, 10);
  MpirunJob job(3, kKeepAlive, args);
  ASSERT_TRUE(job.WaitForStep(10, seconds(40))) << job.output();
  auto down = job.Resize("--workers 1 --wait --timeout 30");
  ASSERT_EQ(down.exit_code, 0) << down.out << job.output();
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(30))) << job.output();
  job.StopTraining();
  // Two ranks stay parked to the end; they leave when the job finishes, and mpirun exits 0.
  ASSERT_EQ(job.Wait(seconds(60)), 0) << job.output();
  std::string out = job.output();
  size_t left = 0;
  for (size_t p = out.find("finished while this worker was parked"); p != std::string::npos;
       p = out.find("finished while this worker was parked", p + 1)) {
    ++left;
  }
  EXPECT_EQ(left, 2u) << out;
  auto run = examples::ReadTrainLog(job.dir() + "/run.jsonl");
  ASSERT_TRUE(run.ok()) << run.status();
  // Every step up to the stop applied once.
  EXPECT_EQ(run->applied.size(), static_cast<size_t>(job.StepsApplied()));
  EXPECT_GE(job.StepsApplied(), at + 5);
}

TEST(MpirunJob, KilledRankIsSurvivedWithEnableRecovery) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  auto args = TrainArgs(kUntilStopped, 15);
  std::vector<std::string> flags = kKeepAlive;
  // A dead rank never reaches MPI_Finalize; do not wait long for it.
  for (const char* f : {"-x", "ELASTRA_MPI_FINALIZE_TIMEOUT_MS=3000"}) flags.push_back(f);
  MpirunJob job(3, flags, args);
  ASSERT_TRUE(job.WaitForStep(15, seconds(40))) << job.output();
  auto ids = WorkersById(job.Status());
  ASSERT_EQ(ids.count("mpi-2"), 1u);
  pid_t victim = static_cast<pid_t>(ids["mpi-2"].value("pid", int64_t{0}));
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        return j.value("state", std::string()) == "running" && j["layout"].value("dp", 0) == 2;
      },
      seconds(60)))
      << job.output();
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, seconds(30))) << job.output();
  job.StopTraining();
  // The survivors finish the training and mpirun ends (not hung in MPI_Finalize) with 0.
  ASSERT_EQ(job.Wait(seconds(60)), 0) << job.output();
  auto match = MatchReference(job, args, static_cast<int>(job.StepsApplied()));
  EXPECT_TRUE(match.status.ok()) << match.status;
}

// The checkpoint of the job's last step is committed before mpirun returns (issue 38): a
// checkpoint every 1 ms step keeps a write in flight at almost every step end, the last one
// included. A second mpirun with ELASTRA_RESUME, at another size, starts after it.
TEST(MpirunJob, TheLastStepsCheckpointIsCommittedAndResumedFrom) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  char tmpl[] = "/tmp/elastra-mpirun-ckpt-XXXXXX";
  const std::string root = mkdtemp(tmpl);
  const std::string ckpt = root + "/ckpt";
  const int first = 30, steps = 45;
  auto with_checkpoints = [&](std::vector<std::string> args, int every) {
    for (const std::string& a : {std::string("--checkpoint-dir"), ckpt,
                                 std::string("--checkpoint-every"), std::to_string(every)}) {
      args.push_back(a);
    }
    return args;
  };
  {
    MpirunJob job(3, kKeepAlive, with_checkpoints(TrainArgs(first, 1), 1));
    ASSERT_EQ(job.Wait(seconds(120)), 0) << job.output();
    RunShell("cp " + job.dir() + "/run.jsonl " + root + "/all.jsonl");
  }
  auto listed = RunShell(std::string(ELASTRA_BINARY) + " ckpt list " + ckpt);
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  const size_t row = listed.out.find('\n') + 1;  // the newest, under the header
  EXPECT_EQ(listed.out.substr(row, listed.out.find(' ', row) - row), std::to_string(first))
      << listed.out;
  auto uncommitted = RunShell("cd " + ckpt + " && for d in ckpt-*; do [ -f \"$d/MANIFEST\" ] || " +
                              "echo \"$d\"; done");
  EXPECT_EQ(uncommitted.out, "") << "uncommitted checkpoint directories left";

  std::vector<std::string> flags = kKeepAlive;
  for (const std::string& f : {std::string("-x"), "ELASTRA_RESUME=" + ckpt}) flags.push_back(f);
  const auto args = TrainArgs(steps, 1);
  MpirunJob job(2, flags, with_checkpoints(args, 10));
  ASSERT_EQ(job.Wait(seconds(120)), 0) << job.output();
  auto resumed = examples::ReadTrainLog(job.dir() + "/run.jsonl");
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_FALSE(resumed->applied.empty());
  EXPECT_EQ(resumed->applied.begin()->first, first) << "resumed at the wrong step";
  RunShell("cat " + job.dir() + "/run.jsonl >> " + root + "/all.jsonl");
  auto match = MatchReference(root + "/all.jsonl", root, args, steps);
  EXPECT_TRUE(match.status.ok()) << match.status;
  RunShell("rm -rf " + root);
}

// A job that fails ends mpirun with a non-zero code, also under --enable-recovery (where mpirun
// itself ignores its ranks' exit codes): here the job cannot resume from a root that holds no
// checkpoint, so the coordinator fails it at the start.
TEST(MpirunJob, AFailedJobEndsMpirunNonZeroWithEnableRecovery) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  std::vector<std::string> flags = kKeepAlive;
  for (const char* f : {"-x", "ELASTRA_RESUME=/nonexistent/elastra-checkpoints"}) {
    flags.push_back(f);
  }
  MpirunJob job(2, flags, TrainArgs(20, 1));
  const int code = job.Wait(seconds(120));
  EXPECT_NE(code, 0) << job.output();
  EXPECT_NE(code, -1) << "mpirun did not end by itself: " << job.output();
  EXPECT_NE(job.output().find("cannot resume"), std::string::npos) << job.output();
}

// The coordinator runs as a child process of MPI rank 0 (`elastra coordinator`), not inside a
// training process: SIGKILLed, it is started again by rank 0 on the same state directory, takes
// the job back from its journal, and the same ranks go on training.
TEST(MpirunJob, KilledCoordinatorIsRestartedByRankZero) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  auto args = TrainArgs(kUntilStopped, 15);
  MpirunJob job(3, kKeepAlive, args);
  ASSERT_TRUE(job.WaitForStep(10, seconds(40))) << job.output();
  auto coordinator_pid = [&] {
    std::ifstream in(job.state_dir() + "/coordinator.json");
    auto j = nlohmann::json::parse(in, nullptr, false);
    return j.is_discarded() ? int64_t{0} : j.value("pid", int64_t{0});
  };
  const int64_t first = coordinator_pid();
  ASSERT_GT(first, 0);
  std::set<int64_t> ranks;
  for (const auto& [id, w] : WorkersById(job.Status())) ranks.insert(w.value("pid", int64_t{0}));
  EXPECT_EQ(ranks.count(first), 0u) << "the coordinator runs inside a rank";
  const int64_t step_at_kill = job.Status().value("step", int64_t{0});
  ASSERT_EQ(kill(static_cast<pid_t>(first), SIGKILL), 0);
  ASSERT_TRUE(job.WaitFor(
      [&](const nlohmann::json& j) {
        return coordinator_pid() != first && j.value("step", int64_t{0}) > step_at_kill + 5;
      },
      seconds(60)))
      << job.output();
  std::set<int64_t> after;
  for (const auto& [id, w] : WorkersById(job.Status())) after.insert(w.value("pid", int64_t{0}));
  EXPECT_EQ(after, ranks);
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(60)), 0) << job.output();
  EXPECT_NE(job.output().find("the coordinator process died"), std::string::npos)
      << job.output();
  auto match = MatchReference(job, args, static_cast<int>(job.StepsApplied()));
  EXPECT_TRUE(match.status.ok()) << match.status;
  // Trained in one generation: the restart needed no recovery.
  for (const auto& [step, rec] : match.run.applied) EXPECT_EQ(rec.generation, 1u) << step;
}

TEST(MpirunJob, JoinsANamedCoordinator) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  char tmpl[] = "/tmp/elastra-coordinator-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string state = dir + "/state";
  auto started = RunShell("cd " + dir + " && (" + ELASTRA_BINARY + " coordinator --state-dir " +
                          state + " --workers 2 > coordinator.out 2> coordinator.err & echo $!)");
  pid_t coordinator = static_cast<pid_t>(std::atoll(started.out.c_str()));
  ASSERT_GT(coordinator, 0) << started.out;
  struct Stop {
    pid_t pid;
    std::string dir;
    ~Stop() {
      kill(pid, SIGTERM);
      RunShell("rm -rf " + dir);
    }
  } stop{coordinator, dir};
  std::string address;
  for (int i = 0; i < 100 && address.empty(); ++i) {
    auto j = nlohmann::json::parse(ReadFile(dir + "/coordinator.out"), nullptr, false);
    if (!j.is_discarded() && j.is_object()) address = j.value("address", std::string());
    if (address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(address.empty()) << ReadFile(dir + "/coordinator.out");
  {
    // The address from the environment, the keys from the state directory.
    MpirunJob job(2, {"--enable-recovery", "-x", "ELASTRA_COORDINATOR=" + address, "-x",
                      "ELASTRA_STATE_DIR=" + state},
                  TrainArgs(30, 0));
    EXPECT_EQ(job.Wait(seconds(40)), 0) << job.output();
    // No embedded coordinator was started.
    EXPECT_NE(access((job.dir() + "/.elastra").c_str(), F_OK), 0);
  }
  auto st = RunShell(std::string(ELASTRA_BINARY) + " status --json --state-dir " + state);
  auto j = nlohmann::json::parse(st.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << st.out;
  EXPECT_EQ(j.value("state", std::string()), "finished") << st.out;
  std::set<std::string> ids;
  for (const auto& w : j["workers"]) ids.insert(w.value("id", std::string()));
  ASSERT_EQ(ids.size(), 2u) << st.out;
  for (const auto& id : ids) {
    // mpi-<mpirun job id>-<rank>: two mpirun jobs can share one coordinator.
    EXPECT_EQ(id.rfind("mpi-", 0), 0u) << id;
    EXPECT_GT(id.size(), std::string("mpi-0").size()) << id;
  }
}

TEST(MpirunJob, WarnsWithoutTheKeepAliveFlagAndStillTrains) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  MpirunJob job(2, {}, TrainArgs(20, 0));
  ASSERT_EQ(job.Wait(seconds(40)), 0) << job.output();
  std::string out = job.output();
  EXPECT_NE(out.find("add --enable-recovery to keep it alive"),
            std::string::npos)
      << out;
  // coordinator.json went to .elastra in the working directory, as with `elastra run`.
  struct stat st;
  EXPECT_EQ(stat((job.dir() + "/.elastra/coordinator.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(MpirunJob, UnusableStateDirIsAClearErrorOnEveryRank) {
  if (!HaveMpirun()) GTEST_SKIP() << "mpirun not found at " << MPIRUN_BINARY;
  MpirunJob job(2, {"-x", "ELASTRA_STATE_DIR=/proc/elastra-cannot-be-here"}, TrainArgs(20, 0));
  int code = job.Wait(seconds(40));
  EXPECT_NE(code, 0);
  EXPECT_NE(code, -1) << "hung: " << job.output();
  std::string out = job.output();
  // Rank 0 cannot start the coordinator; every rank says why and exits. mpirun may kill a rank
  // that has not printed yet once the first one exited non-zero, so at least one says it.
  size_t n = 0;
  for (size_t p = out.find("could not start the coordinator"); p != std::string::npos;
       p = out.find("could not start the coordinator", p + 1)) {
    ++n;
  }
  EXPECT_GE(n, 1u) << out;
  EXPECT_LE(n, 2u) << out;
}

}  // namespace
}  // namespace elastra
