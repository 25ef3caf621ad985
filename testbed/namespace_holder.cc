// Namespace holders (HoldNamespace) and the processes inside a namespace (KillProcessesIn): what
// makes a host of a NamespaceCluster exist, and what takes it down. child_process.cc starts and
// waits for the processes themselves.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "testbed/child_process.h"
#include "testbed/child_process_internal.h"

namespace elastra::testing::cluster_internal {
namespace {

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

}  // namespace elastra::testing::cluster_internal
