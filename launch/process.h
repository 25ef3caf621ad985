// Starting and reaping the worker processes of an agent (`elastra run`, `elastra agent`).
#pragma once

#include <sys/types.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "elastra/status.h"

namespace elastra::launch {

struct ExitInfo {
  pid_t pid = 0;
  std::string worker_id;
  int exit_code = 0;  // valid when signal == 0
  int signal = 0;
};

// The workers this agent started. Not thread-safe.
class ProcessGroup {
 public:
  // Starts `argv` with `env` added to this process's environment. The child gets SIGTERM when
  // this process dies. With `own_process_group` it leads a process group of its own, so that a
  // signal to ours (a terminal's Ctrl-C) reaches only us. With `ignore_sigterm` the child starts
  // with SIGTERM ignored (a scheduler that signals every process of a host, as Slurm does, then
  // reaches only the agent) and gets SIGKILL rather than SIGTERM when this process dies.
  // kInternal when fork fails (exec failure is reported by the child exiting 127).
  StatusOr<pid_t> Spawn(const std::string& worker_id, const std::vector<std::string>& argv,
                        const std::map<std::string, std::string>& env,
                        bool own_process_group = false, bool ignore_sigterm = false);

  // Reaps one exited child of this group without blocking (other children of the process are
  // left to their owners).
  std::optional<ExitInfo> Reap();

  // Sends `sig` to every live child.
  void SignalAll(int sig);

  size_t live() const { return live_.size(); }
  const std::map<pid_t, std::string>& children() const { return live_; }

 private:
  std::map<pid_t, std::string> live_;  // pid -> worker id
};

}  // namespace elastra::launch
