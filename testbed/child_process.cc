#include "testbed/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "testbed/child_process_internal.h"

extern char** environ;

namespace elastra::testing::cluster_internal {
namespace {

// New system calls, the same number on every architecture (glibc 2.36 wraps only some of them).
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
constexpr unsigned kCloseRangeCloexec = 1u << 2;         // CLOSE_RANGE_CLOEXEC
constexpr idtype_t kIdPidfd = static_cast<idtype_t>(3);  // P_PIDFD

// poll()'s timeout for `deadline`: 0 once it passed; capped, so that time_point::max() (no
// deadline) does not overflow an int.
int PollTimeoutMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// The child side of StartChild. `argv` and `envp` are null-terminated.
struct PreparedChild {
  const char* path;
  char* const* argv;
  char* const* envp;
  NamespaceFds ns;
  int stdin_fd;
  int stdout_fd;
  int stderr_fd;
  const char* cwd;
  pid_t parent;
  int report_fd;
};

[[noreturn]] void RunChild(const PreparedChild& c) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  ResetSignalDispositions();
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Fail(c.report_fd, kPdeathsig);
  if (getppid() != c.parent) _exit(127);  // the parent died before the prctl
  setpgid(0, 0);  // so that a terminal's ^C or a group kill aimed at the test misses it
  if (c.ns.net >= 0 && setns(c.ns.net, CLONE_NEWNET) != 0) Fail(c.report_fd, kSetnsNet);
  if (c.ns.uts >= 0 && setns(c.ns.uts, CLONE_NEWUTS) != 0) Fail(c.report_fd, kSetnsUts);
  if (c.ns.mnt >= 0 && setns(c.ns.mnt, CLONE_NEWNS) != 0) Fail(c.report_fd, kSetnsMnt);
  if (chdir(c.cwd) != 0) Fail(c.report_fd, kChdir);  // a new mount namespace starts at "/"
  if (dup2(c.stdin_fd, 0) < 0 || dup2(c.stdout_fd, 1) < 0 || dup2(c.stderr_fd, 2) < 0) {
    Fail(c.report_fd, kDup);
  }
  CloseRange(3, ~0u, kCloseRangeCloexec);  // no fd of the test leaks into the child
  execve(c.path, c.argv, c.envp);
  Fail(c.report_fd, kExec);
}

// Returns `fd` moved to a number >= 3 (close-on-exec), so that the child's dup2 onto 0..2 cannot
// overwrite another of its stream fds.
StatusOr<UniqueFd> AboveStdio(int fd) {
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (copy < 0) return InternalError("fcntl(F_DUPFD_CLOEXEC): " + ErrnoText(errno));
  return UniqueFd(copy);
}

std::vector<std::string> MergedEnvironment(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::string key = entry.substr(0, entry.find('='));
    if (env.count(key) == 0) out.push_back(std::move(entry));
  }
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
int CloseRange(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

std::string ErrnoText(int err) { return std::strerror(err); }

const char* StepName(int step) {
  switch (step) {
    case kReady:
      return "ready";
    case kPdeathsig:
      return "prctl(PR_SET_PDEATHSIG)";
    case kSetnsNet:
      return "setns(net)";
    case kSetnsUts:
      return "setns(uts)";
    case kSetnsMnt:
      return "setns(mnt)";
    case kChdir:
      return "chdir";
    case kDup:
      return "dup2";
    case kExec:
      return "execve";
    case kUnshare:
      return "unshare";
    case kSethostname:
      return "sethostname";
    case kMountPrivate:
      return "mount(/, MS_REC|MS_PRIVATE)";
    case kMountHosts:
      return "mount(/etc/hosts, MS_BIND)";
    case kStatNamespace:
      return "stat(/proc/self/ns/net)";
  }
  return "unknown step";
}

[[noreturn]] void Fail(int report_fd, int step) {
  StepReport r{step, errno};
  ssize_t ignored = write(report_fd, &r, sizeof r);
  (void)ignored;
  _exit(127);
}

void ResetSignalDispositions() {
  struct sigaction dfl;
  std::memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) sigaction(sig, &dfl, nullptr);  // SIGKILL etc. just fail
}

StatusOr<bool> ReadReport(int fd, StepReport* report,
                          std::chrono::steady_clock::time_point deadline) {
  char* p = reinterpret_cast<char*>(report);
  size_t got = 0;
  while (got < sizeof *report) {
    struct pollfd pfd = {fd, POLLIN, 0};
    int ready = poll(&pfd, 1, PollTimeoutMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return TimedOutError("no report from the child in time");
    ssize_t n = read(fd, p + got, sizeof *report - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return InternalError("read: " + ErrnoText(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got == 0) return false;
  if (got != sizeof *report) return InternalError("short report from the child");
  return true;
}

void KillAndReapPid(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int UniqueFd::Release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void UniqueFd::Reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

ForkThread::ForkThread() : thread_([this] { Loop(); }) {}

ForkThread::~ForkThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

pid_t ForkThread::Run(std::function<pid_t()> fork_fn) {
  std::packaged_task<pid_t()> task(std::move(fork_fn));
  std::future<pid_t> result = task.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
  return result.get();
}

void ForkThread::Loop() {
  for (;;) {
    std::packaged_task<pid_t()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

std::string FindExecutable(const std::string& name) {
  auto executable = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path_env = std::getenv("PATH");
  std::string dirs = std::string(path_env != nullptr ? path_env : "") +
                     ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (!dir.empty() && executable(dir + "/" + name)) return dir + "/" + name;
    start = end + 1;
  }
  return "";
}

StatusOr<Child> StartChild(ForkThread& forker, const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env, const NamespaceFds& ns,
                           const ChildIo& io) {
  if (argv.empty()) return InvalidArgumentError("StartChild: empty argv");
  const std::string path = FindExecutable(argv[0]);
  if (path.empty())
    return NotFoundError("no executable '" + argv[0] + "' (PATH and sbin searched)");
  std::vector<std::string> args = argv;
  std::vector<std::string> env_strings = MergedEnvironment(env);
  std::vector<char*> c_argv = NullTerminated(args);
  std::vector<char*> c_envp = NullTerminated(env_strings);
  std::string cwd = io.cwd;
  if (cwd.empty()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf) == nullptr) return InternalError("getcwd: " + ErrnoText(errno));
    cwd = buf;
  }

  UniqueFd devnull(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull.valid()) return InternalError("open /dev/null: " + ErrnoText(errno));
  ELASTRA_ASSIGN_OR_RETURN(UniqueFd in, AboveStdio(io.stdin_fd >= 0 ? io.stdin_fd : devnull.get()));
  ELASTRA_ASSIGN_OR_RETURN(UniqueFd out,
                           AboveStdio(io.stdout_fd >= 0 ? io.stdout_fd : devnull.get()));
  ELASTRA_ASSIGN_OR_RETURN(UniqueFd err,
                           AboveStdio(io.stderr_fd >= 0 ? io.stderr_fd : devnull.get()));
  int report_fds[2];
  if (pipe2(report_fds, O_CLOEXEC) != 0) return InternalError("pipe2: " + ErrnoText(errno));
  UniqueFd report_read(report_fds[0]);
  UniqueFd report_write(report_fds[1]);

  const PreparedChild child{path.c_str(), c_argv.data(),     c_envp.data(), ns,
                            in.get(),     out.get(),         err.get(),     cwd.c_str(),
                            getpid(),     report_write.get()};
  pid_t pid = forker.Run([&child] {
    pid_t p = fork();
    if (p == 0) RunChild(child);
    return p < 0 ? -errno : p;
  });
  report_write.Reset();
  if (pid < 0) return ResourceExhaustedError("fork: " + ErrnoText(-pid));

  StepReport report;
  // The pipe closes at exec; a child stuck before it would be a kernel problem, so no deadline.
  auto got = ReadReport(report_read.get(), &report, std::chrono::steady_clock::time_point::max());
  if (!got.ok() || *got) {
    KillAndReapPid(pid);
    if (!got.ok()) return got.status().WithContext("starting " + path);
    std::string what =
        std::string(StepName(report.step)) + " for " + path + ": " + ErrnoText(report.err);
    if (report.step == kExec && report.err == ENOENT) return NotFoundError(what);
    return InternalError(what);
  }
  UniqueFd pidfd(PidfdOpen(pid));  // valid: the child is ours and not reaped yet
  if (!pidfd.valid()) {
    int e = errno;
    KillAndReapPid(pid);
    return InternalError("pidfd_open: " + ErrnoText(e));
  }
  return Child{pid, std::move(pidfd)};
}

StatusOr<int> WaitChild(const Child& child, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    struct pollfd pfd = {child.pidfd.get(), POLLIN, 0};
    int ready = poll(&pfd, 1, PollTimeoutMs(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return InternalError("poll(pidfd): " + ErrnoText(errno));
    if (ready == 0) return TimedOutError("pid " + std::to_string(child.pid) + " still runs");
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    if (waitid(kIdPidfd, static_cast<id_t>(child.pidfd.get()), &info, WEXITED) != 0) {
      if (errno == EINTR) continue;
      if (errno == ECHILD) {
        return FailedPreconditionError("pid " + std::to_string(child.pid) +
                                       " was reaped elsewhere");
      }
      return InternalError("waitid: " + ErrnoText(errno));
    }
    if (info.si_code == CLD_EXITED) return W_EXITCODE(info.si_status, 0);
    return info.si_status | (info.si_code == CLD_DUMPED ? WCOREFLAG : 0);
  }
}

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

StatusOr<RunResult> RunInNamespace(ForkThread& forker, const NamespaceFds& ns,
                                   const std::vector<std::string>& argv,
                                   const std::map<std::string, std::string>& env,
                                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int out_fds[2];
  if (pipe2(out_fds, O_CLOEXEC) != 0) return InternalError("pipe2: " + ErrnoText(errno));
  UniqueFd out_read(out_fds[0]);
  UniqueFd out_write(out_fds[1]);
  ChildIo io;
  io.stdout_fd = out_write.get();
  io.stderr_fd = out_write.get();
  ELASTRA_ASSIGN_OR_RETURN(Child child, StartChild(forker, argv, env, ns, io));
  out_write.Reset();
  fcntl(out_read.get(), F_SETFL, O_NONBLOCK);

  RunResult result;
  auto drain = [&] {  // what the pipe holds now; a background grandchild may keep it open
    char buf[4096];
    ssize_t n;
    while ((n = read(out_read.get(), buf, sizeof buf)) > 0) result.output.append(buf, n);
  };
  bool exited = false;
  bool eof = false;
  while (!exited) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    struct pollfd pfds[2] = {{child.pidfd.get(), POLLIN, 0}, {out_read.get(), POLLIN, 0}};
    int ready = poll(pfds, eof ? 1 : 2, PollTimeoutMs(deadline));
    if (ready < 0 && errno != EINTR) return InternalError("poll: " + ErrnoText(errno));
    if (ready <= 0) continue;
    if (!eof && (pfds[1].revents & (POLLIN | POLLHUP)) != 0) {
      char buf[4096];
      ssize_t n = read(out_read.get(), buf, sizeof buf);
      if (n > 0) result.output.append(buf, n);
      if (n == 0) eof = true;
    }
    exited = (pfds[0].revents & POLLIN) != 0;
  }
  if (!exited) {
    kill(-child.pid, SIGKILL);  // its process group: a shell's children too
    KillAndReap(child);
    drain();
    return TimedOutError("'" + argv[0] + "' ran past " + std::to_string(timeout.count()) +
                         " ms; output: " + result.output);
  }
  drain();
  ELASTRA_ASSIGN_OR_RETURN(int status, WaitChild(child, deadline));
  result.exit_code = ExitCodeOf(status);
  return result;
}

void KillAndReap(const Child& child) {
  if (!child.pidfd.valid()) return;
  PidfdSendSignal(child.pidfd.get(), SIGKILL);
  siginfo_t info;
  while (waitid(kIdPidfd, static_cast<id_t>(child.pidfd.get()), &info, WEXITED) != 0 &&
         errno == EINTR) {
  }
}

void ReapIfExited(int pidfd) {
  siginfo_t info;
  waitid(kIdPidfd, static_cast<id_t>(pidfd), &info, WEXITED | WNOHANG);
}

bool WaitAllExited(const std::vector<int>& pidfds, std::chrono::steady_clock::time_point deadline) {
  std::vector<struct pollfd> pending;
  for (int fd : pidfds) pending.push_back({fd, POLLIN, 0});
  while (!pending.empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    int ready = poll(pending.data(), pending.size(), PollTimeoutMs(deadline));
    if (ready < 0 && errno != EINTR) return false;
    // POLLIN: the process exited; POLLHUP: it was reaped as well.
    std::erase_if(pending,
                  [](const struct pollfd& p) { return (p.revents & (POLLIN | POLLHUP)) != 0; });
  }
  return true;
}

}  // namespace elastra::testing::cluster_internal
