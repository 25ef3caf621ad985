// A real job for integration tests: `elastra run` as a child process with train_mlp workers, driven
// through the real `elastra resize` / `elastra status` commands and real signals.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "examples/log_check.h"
#include <string>
#include <vector>

namespace elastra::testing {

// The step budget (--steps) of a job that the test ends with Job::StopTraining() once it is done
// with it: far more steps than any test runs, so the job never ends on its own under the test's
// feet.
inline constexpr int kUntilStopped = 1000000;

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// Runs a shell command, capturing its output.
CommandResult RunShell(const std::string& command);

// The process group of a process SpawnLogged starts.
enum class ProcessGroup {
  kInherit,  // the test's own (a terminal's Ctrl-C reaches it with the test)
  kOwn,      // a new one it leads, so that a kill of the group reaches what it started too
};

// Starts `argv` (argv[0] is a path: no PATH search) with its stdout and stderr appended to
// `log_path` (created when missing), this process's environment with `env` entries ("K=V") set on
// top of it, in the process group `group` says. Returns the child's pid, or -1 when fork fails;
// the child exits 127 when it cannot open the log or run argv[0].
pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log_path,
                  const std::vector<std::string>& env = {},
                  ProcessGroup group = ProcessGroup::kInherit);

// Waits up to `timeout` for `pid`, a child of this process, to exit, and reaps it. Returns its
// exit code, or 128 + the signal that ended it. Past `timeout` it SIGKILLs the process group that
// `pid` leads (ProcessGroup::kOwn), or `pid` alone when it leads none, reaps it and returns -1;
// -1 at once when `pid` is no child to wait for.
int WaitExit(pid_t pid, std::chrono::milliseconds timeout);

class Job {
 public:
  // `train_args` are train_mlp's flags; --log is added. `env` entries ("K=V") are set for the
  // launcher and its workers (short timeouts injected by tests).
  // `run_args` go to `elastra run` itself (e.g. {"--resume", DIR}).
  Job(int nproc, std::vector<std::string> train_args, std::vector<std::string> env = {},
      std::vector<std::string> run_args = {});
  ~Job();  // kills whatever is left
  // Movable, so that a helper can start a job and hand it back (StartHttpJob); a copy would kill
  // the same process twice.
  Job(Job&& other) noexcept;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  const std::string& dir() const { return dir_; }
  std::string state_dir() const { return dir_ + "/state"; }
  std::string log_path() const { return dir_ + "/run.jsonl"; }
  // train_mlp runs with --stop-file at this path: StopTraining() creates it, and the workers end
  // the job together after the step at which they agree they see it. A test that resizes or
  // kills workers mid-run trains for "forever" (a large --steps) and stops the job once it is done
  // with it, so the job never finishes under the test's feet however fast or slow the machine is.
  std::string stop_path() const { return dir_ + "/stop"; }
  void StopTraining();

  // `elastra status --json`, parsed; an empty object when it fails.
  nlohmann::json Status();
  // Polls status until the job's step reaches `step` (true) or `timeout` passes (false).
  bool WaitForStep(int64_t step, std::chrono::seconds timeout);
  // Polls until status satisfies `pred`.
  bool WaitFor(const std::function<bool(const nlohmann::json&)>& pred, std::chrono::seconds timeout);
  // `elastra resize --state-dir ... <args>`.
  CommandResult Resize(const std::string& args);
  // The pid of the member with `rank`, or -1.
  pid_t PidOfRank(int rank);
  // The coordinator's process (the "pid" of <state_dir>/coordinator.json), or -1.
  pid_t CoordinatorPid() const;
  // Waits for `elastra run` to exit; returns its exit code (-1 on timeout, after killing it).
  int Wait(std::chrono::seconds timeout);
  // Sends `sig` to `elastra run` (as a user's Ctrl-C or a scheduler's SIGTERM would).
  void Signal(int sig);

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

// SIGKILLs `victim`, a worker of `job`, and waits until the generation formed for the failure
// runs (the newest in the history has reason "failure") and the job has trained 5 more steps; 60 s
// for each. Fatal gtest failures, with the launcher's log, when it does not get there: call it
// under ASSERT_NO_FATAL_FAILURE.
void KillWorkerAndRecover(Job& job, pid_t victim);
// KillWorkerAndRecover's wait, for a test that failed a worker itself.
void WaitForFailureRecovery(Job& job);
// KillWorkerAndRecover while the members hold between two steps: creates `hold` (the job's
// --hold-file), waits for `hold`.held (60 s), SIGKILLs `victim`, removes `hold` and waits as
// KillWorkerAndRecover does. No dp, pp or tp call is then in flight, so only the groups whose
// members changed are rebuilt (docs/recovery.md).
void KillHeldWorkerAndRecover(Job& job, const std::string& hold, pid_t victim);

// Path of a built binary (set by CMake).
std::string ElastraBinary();
std::string TrainBinary();

// Runs train_mlp --reference with the same flags into `log`.
bool RunReference(const std::vector<std::string>& train_args, const std::string& log);

// What `elastra run` printed so far (for failure messages).
std::string LauncherLog(const Job& job);

// Checks a run's log against a reference log (a gtest expectation on examples::MatchLogs: exact
// sample accounting over `steps` steps, loss within `tolerance` relative). Returns the run's log.
examples::TrainLog ExpectLogMatches(const std::string& run_log, const std::string& ref_log,
                                    int steps, double tolerance);

// Checks the job's log against `train_mlp --reference` with `train_args` (gtest expectations: exact
// sample accounting over `steps` steps, loss within 1e-4 relative). Returns the run's log.
examples::TrainLog ExpectMatchesReference(const Job& job,
                                          const std::vector<std::string>& train_args, int steps);

// The steps the job applied, from its log (the highest applied step + 1); 0 when none.
int64_t StepsApplied(const Job& job);
int64_t StepsApplied(const std::string& run_log);
// For a run ended by its --stop-file, whatever launched it: checks the log at `run_log` against
// `train_mlp --reference` (run into `ref_log`) over the steps it applied (train_args' --steps
// replaced by that count).
examples::TrainLog ExpectStoppedLogMatchesReference(const std::string& run_log,
                                                    const std::string& ref_log,
                                                    std::vector<std::string> train_args);
// For a job ended by StopTraining(): checks its log against the reference over the steps it
// applied (train_args' --steps replaced by that count).
examples::TrainLog ExpectStoppedRunMatchesReference(const Job& job,
                                                    std::vector<std::string> train_args);

}  // namespace elastra::testing
