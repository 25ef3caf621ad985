// Starting and killing the processes of a NamespaceCluster from a multi-threaded test process.
// Internal to testbed/; its users include namespace_cluster.h.
//
// - Children are forked on one dedicated thread (ForkThread): PR_SET_PDEATHSIG fires when the
//   *thread* that forked exits, so forking there ties a child's life to the cluster (or to the
//   process, when it is killed), never to a test's helper thread that returned.
// - Between fork and exec a child of a multi-threaded process may only make async-signal-safe
//   calls, so everything a child needs is prepared before the fork and the child makes system calls
//   only (no allocation, no locks).
// - Processes are signalled through pidfds, so a pid that was reused is never signalled.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "elastra/status.h"

namespace elastra::testing {

// What a command run to completion printed, and how it ended.
struct RunResult {
  int exit_code = -1;  // the exit code, or 128 + the signal that killed it (as a shell shows it)
  std::string output;  // stdout and stderr together
};

namespace cluster_internal {

// An owned file descriptor; closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

// Runs fork calls on one long-lived thread (see the top of this file). Thread-safe.
class ForkThread {
 public:
  ForkThread();
  ~ForkThread();  // joins; every child forked here then gets its PR_SET_PDEATHSIG signal
  ForkThread(const ForkThread&) = delete;
  ForkThread& operator=(const ForkThread&) = delete;

  // Runs `fork_fn` on the thread and returns its result (a pid, or -1 with errno's value negated).
  pid_t Run(std::function<pid_t()> fork_fn);

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<pid_t()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// The namespaces a child enters, as open namespace fds (-1: stays in the caller's).
struct NamespaceFds {
  int net = -1;
  int uts = -1;
  int mnt = -1;
};

// Where a child's standard streams go (-1: /dev/null) and where it starts.
struct ChildIo {
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  std::string cwd;  // empty: the caller's working directory
};

// A started child: its pid and a pidfd for it (for polling, signalling and reaping).
struct Child {
  pid_t pid = -1;
  UniqueFd pidfd;
};

// Starts `argv` (argv[0] looked up in PATH) with the current environment plus `env`, inside `ns`,
// in a process group of its own and with PR_SET_PDEATHSIG(SIGKILL), forked on `forker`.
// Returns kNotFound when argv[0] is not an executable, and the failing step (setns, chdir, exec)
// with its errno otherwise; a child that failed is reaped before this returns.
StatusOr<Child> StartChild(ForkThread& forker, const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env, const NamespaceFds& ns,
                           const ChildIo& io);

// Waits until the child exits or `deadline` passes. Returns its wait status (as waitpid's), or
// kTimedOut (the child is left running), or kFailedPrecondition when it was reaped elsewhere.
StatusOr<int> WaitChild(const Child& child, std::chrono::steady_clock::time_point deadline);

// A wait status as a shell shows it: the exit code, or 128 + the signal that killed the process.
int ExitCodeOf(int wait_status);

// The path of executable `name` (a name with a '/' is taken as is): PATH is searched, then the
// sbin and bin folders `ip` and `nsenter` live in. Empty when there is none.
std::string FindExecutable(const std::string& name);

// Identifies a namespace: the device and inode of its nsfs file.
struct NamespaceId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const NamespaceId&) const = default;
};

// The network namespace of process `pid` (kNotFound when it is gone).
StatusOr<NamespaceId> NetNamespaceOf(pid_t pid);

// Signals SIGKILL, once, to every process (other than `self`) whose network namespace is `ns`.
// Async-signal-safe: a holder runs it in a forked child. `on_killed(pid, pidfd)`, when set, is
// called for each process signalled, before its pidfd is closed (dup it to keep it). Returns how
// many processes were signalled; a process that is already a zombie has left its namespaces and is
// not counted.
using KilledFn = void (*)(void* arg, pid_t pid, int pidfd);
int KillProcessesIn(NamespaceId ns, pid_t self, KilledFn on_killed = nullptr, void* arg = nullptr);

// The pids of the processes (other than `self`) now in network namespace `ns`.
std::vector<pid_t> ProcessesIn(NamespaceId ns, pid_t self);

// What a namespace's holder process does (see namespace_cluster.h): prepared before the fork.
struct HolderSpec {
  int unshare_flags = 0;         // CLONE_NEWNET | CLONE_NEWUTS [| CLONE_NEWNS]
  std::string hostname;          // set in the new UTS namespace
  std::string etc_hosts;         // bind-mounted on /etc/hosts when a mount namespace is made
  int max_sweep_rounds = 30000;  // rounds of KillProcessesIn, 1 ms apart, when the parent dies
};

// Namespaces held by a holder process, with fds open on them (close-on-exec).
struct HeldNamespace {
  std::string name;
  Child holder;
  NamespaceId net_id;
  UniqueFd net;
  UniqueFd uts;
  UniqueFd mnt;  // invalid when no mount namespace was made
  NamespaceFds fds() const { return {net.get(), uts.get(), mnt.get()}; }
};

// Forks a holder on `forker`: it blocks SIGTERM, sets PR_SET_PDEATHSIG(SIGTERM), unshares the
// namespaces, names the host, turns IPv6 off for interfaces made later (so a host's veth only ever
// has its 198.18.0.0/24 address), closes every fd and waits. On SIGTERM (its parent thread died)
// it kills every process in its network namespace and exits, and the kernel frees the namespaces.
// Returns once the namespaces exist and are open here. Refuses (kInternal) namespaces that turn
// out to be this process's own, so that nothing is ever configured in the root namespace.
// Returns kUnavailable with the step that failed (unshare, sethostname, mount) and its errno.
StatusOr<HeldNamespace> HoldNamespace(ForkThread& forker, const HolderSpec& spec,
                                      std::chrono::steady_clock::time_point deadline);

// Runs argv inside `ns` (as StartChild) with its stdout and stderr captured, and waits for it.
// Returns kTimedOut after `timeout`, when the command's process group has been killed.
StatusOr<RunResult> RunInNamespace(ForkThread& forker, const NamespaceFds& ns,
                                   const std::vector<std::string>& argv,
                                   const std::map<std::string, std::string>& env,
                                   std::chrono::milliseconds timeout);

// SIGKILLs the child through its pidfd and reaps it; nothing when it is gone already.
void KillAndReap(const Child& child);

// Reaps the exited process of `pidfd` if it is this process's child; never blocks.
void ReapIfExited(int pidfd);

// Waits until the processes of all `pidfds` have exited; false when `deadline` passes first.
bool WaitAllExited(const std::vector<int>& pidfds, std::chrono::steady_clock::time_point deadline);

}  // namespace cluster_internal
}  // namespace elastra::testing
