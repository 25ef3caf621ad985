// CoordinatorProcess: the job's coordinator as a child process (`elastra coordinator`). `elastra
// run` and MPI rank 0 of an mpirun job start it this way, so that the coordinator never lives in
// a training process and killing it loses nothing: its owner starts it again with --restart on
// the same state directory and it takes the job back from its journal (docs/journal.md).
// Not thread-safe: one owner drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "protocol/keys.h"
#include "elastra/status.h"

namespace elastra {

// The path of the `elastra` command for a program linked with Elastra's libraries:
// $ELASTRA_BIN when set; else the one of the build tree these libraries were loaded from; else
// the installed one beside them (<prefix>/bin/elastra); else "elastra", looked up in PATH.
std::string ElastraBinary();

class CoordinatorProcess {
 public:
  // `elastra`: the command to run (ElastraBinary(), or the launcher's own path). `first_args`:
  // the flags of the first start, after `coordinator --state-dir DIR` (--workers, --bind, ...).
  CoordinatorProcess(std::string elastra, std::string state_dir,
                     std::vector<std::string> first_args);
  ~CoordinatorProcess();  // Stop(5 s) when it still runs
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  // Starts it (with --restart after the first time) and waits until it wrote coordinator.json:
  // the connection it serves. kUnavailable when it exits first or is not up within `ready`.
  // The child runs in its own process group and gets SIGTERM when the calling thread ends.
  StatusOr<ConnectionInfo> Start(std::chrono::milliseconds ready = std::chrono::seconds(15));

  // The running child's pid, 0 when none.
  pid_t pid() const { return pid_; }
  // For owners that reap every child themselves (waitpid(-1)): whether `pid` is this process,
  // and Reaped() once it was.
  bool IsIt(pid_t pid) const { return pid_ != 0 && pid == pid_; }
  void Reaped() { pid_ = 0; }
  // For owners that do not: reaps it without blocking when it has exited; true then, with its
  // wait status in `status`, and pid() becomes 0.
  bool PollExited(int* status);

  // SIGTERM, then SIGKILL after `grace`; waits for it. With `own_exit` > 0 it first waits up to
  // that long for the process to exit by itself (a coordinator exits once the job is over).
  void Stop(std::chrono::milliseconds grace,
            std::chrono::milliseconds own_exit = std::chrono::milliseconds(0));

  // "exit code N" or "signal N" for a wait status.
  static std::string Describe(int status);
  // Whether a running coordinator that exited with wait status `status` ended its job: it exits
  // by itself with 0 (finished) or 1 (failed) once the job is over and every agent was told. A
  // coordinator that died otherwise (a signal, a crash) is restarted by its owner.
  static bool EndedTheJob(int status);

 private:
  std::string elastra_;
  std::string state_dir_;
  std::vector<std::string> first_args_;
  bool started_ = false;
  pid_t pid_ = 0;
};

}  // namespace elastra
