// The pieces child_process.cc and namespace_holder.cc share: the system calls glibc does not
// wrap, and the report a forked child sends through its close-on-exec pipe when a step before exec
// (or before a holder is ready) fails. Internal to testbed/.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "elastra/status.h"

namespace elastra::testing::cluster_internal {

// System calls by number, the same on every architecture (glibc 2.36 wraps only some of them).
// Each returns what the system call returns (-1 with errno set on failure).
int PidfdOpen(pid_t pid);
int PidfdSendSignal(int pidfd, int sig);
int CloseRange(unsigned first, unsigned last, unsigned flags);

// strerror(err) as a string.
std::string ErrnoText(int err);

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

// The step's name as an error message shows it ("setns(net)"); "unknown step" for another value.
const char* StepName(int step);

struct StepReport {
  int step = kReady;
  int err = 0;
};

// Async-signal-safe: a forked child calls these between fork and exec (or _exit).
// Writes {step, errno} to `report_fd` and exits with 127.
[[noreturn]] void Fail(int report_fd, int step);
// Sets every signal's disposition back to SIG_DFL.
void ResetSignalDispositions();

// Reads the child's StepReport from `fd`; false when the pipe closed first (exec succeeded).
// Returns kTimedOut when `deadline` passes first, kInternal on a read error or a short report.
StatusOr<bool> ReadReport(int fd, StepReport* report,
                          std::chrono::steady_clock::time_point deadline);

// SIGKILLs `pid` and reaps it (a child that failed to start; no pidfd yet).
void KillAndReapPid(pid_t pid);

}  // namespace elastra::testing::cluster_internal
