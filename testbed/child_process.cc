#include "testbed/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
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

int PidfdOpen(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSendSignal(int pidfd, int sig) {
  return static_cast<int>(syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
}
int CloseRange(unsigned first, unsigned last, unsigned flags) {
  return static_cast<int>(syscall(SYS_close_range, first, last, flags));
}

std::string ErrnoText(int err) { return std::strerror(err); }

// poll()'s timeout for `deadline`: 0 once it passed; capped, so that time_point::max() (no
// deadline) does not overflow an int.
int PollTimeoutMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// What a child reports through its close-on-exec pipe when a step before exec fails. Nothing
// arrives when exec succeeds; {kReady, 0} is a holder's "the namespaces exist".
enum Step : int {
  kReady = 0,
  kPdeathsig,
  kSetnsNet,
  kSetnsUts,
  kSetnsMnt,
  kChdir,
  kDup,
  kExec,
  kUnshare,
  kSethostname,
  kMountPrivate,
  kMountHosts,
  kStatNamespace,
};

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

struct StepReport {
  int step = kReady;
  int err = 0;
};

// --- Async-signal-safe pieces: only these run between fork and exec (or _exit). ---

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

// Writes "/proc/<pid>/ns/net" into `out` (at least 32 bytes).
void NetNamespacePath(pid_t pid, char* out) {
  char digits[16];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + pid % 10);
    pid /= 10;
  } while (pid > 0);
  const char prefix[] = "/proc/";
  const char suffix[] = "/ns/net";
  char* p = out;
  for (const char* s = prefix; *s != '\0'; ++s) *p++ = *s;
  while (n > 0) *p++ = digits[--n];
  for (const char* s = suffix; *s != '\0'; ++s) *p++ = *s;
  *p = '\0';
}

bool InNamespace(pid_t pid, NamespaceId ns) {
  char path[32];
  NetNamespacePath(pid, path);
  struct stat st;
  return stat(path, &st) == 0 && st.st_dev == ns.dev && st.st_ino == ns.ino;
}

pid_t ParsePid(const char* name) {
  pid_t pid = 0;
  int digits = 0;
  for (; *name != '\0'; ++name, ++digits) {
    if (*name < '0' || *name > '9' || digits >= 9) return -1;
    pid = pid * 10 + (*name - '0');
  }
  return digits == 0 ? -1 : pid;
}

struct Dirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Calls fn(pid) for every process in /proc (thread-group leaders) other than `self` that is in
// network namespace `ns` now. Returns false when /proc cannot be read.
template <typename Fn>
bool ForEachProcessIn(NamespaceId ns, pid_t self, Fn fn) {
  int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return false;
  alignas(8) char buf[8192];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      const auto* d = reinterpret_cast<const Dirent64*>(buf + off);
      off += d->d_reclen;
      pid_t pid = ParsePid(d->d_name);
      if (pid > 0 && pid != self && InNamespace(pid, ns)) fn(pid);
    }
  }
  close(dir);
  return true;
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

// The holder side of StartHolder.
struct PreparedHolder {
  int flags;
  const char* hostname;
  size_t hostname_len;
  const char* etc_hosts;  // empty: no bind mount
  int max_sweep_rounds;
  sigset_t stop_signals;
  pid_t parent;
  int report_fd;
};

[[noreturn]] void RunHolder(const PreparedHolder& h) {
  sigprocmask(SIG_SETMASK, &h.stop_signals, nullptr);
  ResetSignalDispositions();
  if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) Fail(h.report_fd, kPdeathsig);
  if (getppid() != h.parent) _exit(1);
  setpgid(0, 0);
  if (unshare(h.flags) != 0) Fail(h.report_fd, kUnshare);
  if (sethostname(h.hostname, h.hostname_len) != 0) Fail(h.report_fd, kSethostname);
  // Interfaces made or moved here later start without IPv6 (lo keeps ::1). Best effort: absent
  // when the kernel has no IPv6 at all.
  int v6 = open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_WRONLY | O_CLOEXEC);
  if (v6 >= 0) {
    ssize_t ignored = write(v6, "1", 1);
    (void)ignored;
    close(v6);
  }
  if ((h.flags & CLONE_NEWNS) != 0) {
    // Private first, or the bind mount below could propagate to the root mount namespace.
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      Fail(h.report_fd, kMountPrivate);
    }
    if (h.etc_hosts[0] != '\0' &&
        mount(h.etc_hosts, "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
      Fail(h.report_fd, kMountHosts);
    }
  }
  struct stat st;
  if (stat("/proc/self/ns/net", &st) != 0) Fail(h.report_fd, kStatNamespace);
  const NamespaceId own{st.st_dev, st.st_ino};
  if (chdir("/") != 0) {
    // Only to pin no directory of the test; staying is harmless.
  }
  StepReport ready{kReady, 0};
  if (write(h.report_fd, &ready, sizeof ready) != sizeof ready) _exit(1);
  CloseRange(0, ~0u, 0);  // hold no pipe or socket of the test open
  siginfo_t info;
  while (sigwaitinfo(&h.stop_signals, &info) < 0) {
  }
  // The parent is gone (or someone asked): take every process of this host down with us.
  const pid_t self = getpid();
  for (int round = 0; round < h.max_sweep_rounds; ++round) {
    if (KillProcessesIn(own, self) <= 0) break;
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, nullptr);
  }
  _exit(0);
}

// --- Parent side. ---

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

// Reads the child's StepReport; false when the pipe closed first (exec succeeded).
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

}  // namespace

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

StatusOr<NamespaceId> NetNamespaceOf(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return NotFoundError(path + ": " + ErrnoText(errno));
  return NamespaceId{st.st_dev, st.st_ino};
}

int KillProcessesIn(NamespaceId ns, pid_t self, KilledFn on_killed, void* arg) {
  int killed = 0;
  bool read = ForEachProcessIn(ns, self, [&](pid_t pid) {
    int pidfd = PidfdOpen(pid);
    if (pidfd < 0) return;
    // Checked again through the pidfd's process: the pid may have been reused since the scan.
    if (InNamespace(pid, ns) && PidfdSendSignal(pidfd, SIGKILL) == 0) {
      ++killed;
      if (on_killed != nullptr) on_killed(arg, pid, pidfd);
    }
    close(pidfd);
  });
  return read ? killed : -1;
}

std::vector<pid_t> ProcessesIn(NamespaceId ns, pid_t self) {
  std::vector<pid_t> pids;
  ForEachProcessIn(ns, self, [&pids](pid_t pid) { pids.push_back(pid); });
  return pids;
}

namespace {

StatusOr<Child> StartHolder(ForkThread& forker, const HolderSpec& spec,
                            std::chrono::steady_clock::time_point deadline) {
  int report_fds[2];
  if (pipe2(report_fds, O_CLOEXEC) != 0) return InternalError("pipe2: " + ErrnoText(errno));
  UniqueFd report_read(report_fds[0]);
  UniqueFd report_write(report_fds[1]);
  PreparedHolder holder{};
  holder.flags = spec.unshare_flags;
  holder.hostname = spec.hostname.c_str();
  holder.hostname_len = spec.hostname.size();
  holder.etc_hosts = spec.etc_hosts.c_str();
  holder.max_sweep_rounds = spec.max_sweep_rounds;
  sigemptyset(&holder.stop_signals);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) sigaddset(&holder.stop_signals, sig);
  holder.parent = getpid();
  holder.report_fd = report_write.get();

  pid_t pid = forker.Run([&holder] {
    pid_t p = fork();
    if (p == 0) RunHolder(holder);
    return p < 0 ? -errno : p;
  });
  report_write.Reset();
  if (pid < 0) return ResourceExhaustedError("fork: " + ErrnoText(-pid));
  StepReport report;
  auto got = ReadReport(report_read.get(), &report, deadline);
  if (!got.ok() || !*got || report.step != kReady) {
    KillAndReapPid(pid);
    if (!got.ok()) return got.status().WithContext("namespace holder for " + spec.hostname);
    if (!*got) return InternalError("namespace holder for " + spec.hostname + " exited");
    return UnavailableError("namespace holder for " + spec.hostname + ": " + StepName(report.step) +
                            ": " + ErrnoText(report.err));
  }
  UniqueFd pidfd(PidfdOpen(pid));
  if (!pidfd.valid()) {
    int e = errno;
    KillAndReapPid(pid);
    return InternalError("pidfd_open: " + ErrnoText(e));
  }
  return Child{pid, std::move(pidfd)};
}

}  // namespace

StatusOr<HeldNamespace> HoldNamespace(ForkThread& forker, const HolderSpec& spec,
                                      std::chrono::steady_clock::time_point deadline) {
  HeldNamespace ns;
  ns.name = spec.hostname;
  ELASTRA_ASSIGN_OR_RETURN(ns.holder, StartHolder(forker, spec, deadline));
  const std::string dir = "/proc/" + std::to_string(ns.holder.pid) + "/ns/";
  auto open_ns = [&](const char* kind, UniqueFd* fd) -> Status {
    fd->Reset();
    *fd = UniqueFd(open((dir + kind).c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd->valid()) return InternalError("open " + dir + kind + ": " + ErrnoText(errno));
    return OkStatus();
  };
  Status opened = open_ns("net", &ns.net);
  if (opened.ok()) opened = open_ns("uts", &ns.uts);
  if (opened.ok() && (spec.unshare_flags & CLONE_NEWNS) != 0) opened = open_ns("mnt", &ns.mnt);
  struct stat theirs;
  struct stat ours;
  if (opened.ok() &&
      (fstat(ns.net.get(), &theirs) != 0 || stat("/proc/thread-self/ns/net", &ours) != 0)) {
    opened = InternalError("stat of a network namespace: " + ErrnoText(errno));
  }
  if (opened.ok() && theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino) {
    opened = InternalError("the holder of " + spec.hostname +
                           " is in this process's network namespace; refusing to configure it");
  }
  if (!opened.ok()) {
    KillAndReap(ns.holder);
    return opened;
  }
  ns.net_id = NamespaceId{theirs.st_dev, theirs.st_ino};
  return ns;
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
