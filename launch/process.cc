#include "launch/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace elastra::launch {

StatusOr<pid_t> ProcessGroup::Spawn(const std::string& worker_id,
                                    const std::vector<std::string>& argv,
                                    const std::map<std::string, std::string>& env,
                                    bool own_process_group, bool ignore_sigterm) {
  if (argv.empty()) return InvalidArgumentError("no program to run");
  // Build everything before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    if (env.count(key) == 0) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  pid_t pid = fork();
  if (pid < 0) return InternalError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Die with the agent: a worker must not outlive the launcher that reports its exit.
    // A child that ignores SIGTERM would outlive it: SIGKILL then.
    prctl(PR_SET_PDEATHSIG, ignore_sigterm ? SIGKILL : SIGTERM);
    if (own_process_group) setpgid(0, 0);
    // An ignored disposition survives exec; the agent's own handler would not.
    signal(SIGTERM, ignore_sigterm ? SIG_IGN : SIG_DFL);
    execvpe(args[0], args.data(), envp.data());
    _exit(127);
  }
  live_[pid] = worker_id;
  return pid;
}

std::optional<ExitInfo> ProcessGroup::Reap() {
  for (auto it = live_.begin(); it != live_.end(); ++it) {
    int status = 0;
    if (waitpid(it->first, &status, WNOHANG) != it->first) continue;
    ExitInfo info;
    info.pid = it->first;
    info.worker_id = it->second;
    if (WIFEXITED(status)) info.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) info.signal = WTERMSIG(status);
    live_.erase(it);
    return info;
  }
  return std::nullopt;
}

void ProcessGroup::SignalAll(int sig) {
  for (const auto& [pid, id] : live_) kill(pid, sig);
}

}  // namespace elastra::launch
