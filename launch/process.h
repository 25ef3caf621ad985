// Starting and reaping worker processes for `elastra run`.
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
  // Starts `argv` with `env` added to this process's environment. kInternal when fork/exec fails
  // (exec failure is reported by the child exiting 127).
  StatusOr<pid_t> Spawn(const std::string& worker_id, const std::vector<std::string>& argv,
                        const std::map<std::string, std::string>& env);

  // Reaps one exited child without blocking.
  std::optional<ExitInfo> Reap();

  // Sends `sig` to every live child.
  void SignalAll(int sig);

  size_t live() const { return live_.size(); }
  const std::map<pid_t, std::string>& children() const { return live_; }

 private:
  std::map<pid_t, std::string> live_;  // pid -> worker id
};

}  // namespace elastra::launch
