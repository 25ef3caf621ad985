#include "protocol/coordinator_process.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace elastra {
namespace {

using std::chrono::milliseconds;

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

}  // namespace

std::string ElastraBinary() {
  if (const char* bin = std::getenv("ELASTRA_BIN"); bin != nullptr && *bin != '\0') return bin;
  // Where this library was loaded from tells a build tree from an installation.
  Dl_info info{};
  std::string self;
  if (dladdr(reinterpret_cast<void*>(&ElastraBinary), &info) != 0 && info.dli_fname != nullptr) {
    self = info.dli_fname;
  }
  const std::string build_dir = ELASTRA_BUILD_DIR;
  const std::string built = build_dir + "/launch/elastra";
  if (self.rfind(build_dir + "/", 0) == 0 && IsExecutable(built)) return built;
  if (!self.empty()) {
    const std::string installed = DirName(self) + "/" + ELASTRA_LIB_TO_BIN + "/elastra";
    if (IsExecutable(installed)) return installed;
  }
  if (IsExecutable(built)) return built;
  return "elastra";
}

CoordinatorProcess::CoordinatorProcess(std::string elastra, std::string state_dir,
                                       std::vector<std::string> first_args)
    : elastra_(std::move(elastra)),
      state_dir_(std::move(state_dir)),
      first_args_(std::move(first_args)) {}

CoordinatorProcess::~CoordinatorProcess() { Stop(milliseconds(5000)); }

StatusOr<ConnectionInfo> CoordinatorProcess::Start(milliseconds ready) {
  std::vector<std::string> argv = {elastra_, "coordinator", "--state-dir", state_dir_};
  if (started_) {
    argv.push_back("--restart");
  } else {
    argv.insert(argv.end(), first_args_.begin(), first_args_.end());
    std::remove((state_dir_ + "/coordinator.json").c_str());  // never read an old job's file
  }
  std::vector<char*> args;
  for (auto& s : argv) args.push_back(s.data());
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return InternalError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) {
    // Its own process group: a Ctrl-C on the owner stops the workers first, and the owner stops
    // the coordinator last. It dies with the thread that started it.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);  // it prints its address; we read the file
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s (set ELASTRA_BIN to the elastra command)\n", args[0],
                 std::strerror(errno));
    _exit(127);
  }
  started_ = true;
  pid_ = pid;
  const auto deadline = std::chrono::steady_clock::now() + ready;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      pid_ = 0;
      return UnavailableError("the coordinator process (" + elastra_ + ") exited (" +
                              Describe(status) + ") before it was ready");
    }
    auto info = ReadConnectionInfo(state_dir_ + "/coordinator.json");
    if (info.ok() && info->pid == pid) return info;
    std::this_thread::sleep_for(milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid_ = 0;
  return UnavailableError("the coordinator process did not come up within " +
                          std::to_string(ready.count()) + " ms");
}

bool CoordinatorProcess::PollExited(int* status) {
  if (pid_ == 0) return false;
  int s = 0;
  if (waitpid(pid_, &s, WNOHANG) != pid_) return false;
  pid_ = 0;
  if (status != nullptr) *status = s;
  return true;
}

void CoordinatorProcess::Stop(milliseconds grace, milliseconds own_exit) {
  if (pid_ == 0) return;
  const auto exit_by = std::chrono::steady_clock::now() + own_exit;
  while (std::chrono::steady_clock::now() < exit_by) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = 0;
      return;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  kill(pid_, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = 0;
      return;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = 0;
}

std::string CoordinatorProcess::Describe(int status) {
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

bool CoordinatorProcess::EndedTheJob(int status) {
  return WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1);
}

}  // namespace elastra
