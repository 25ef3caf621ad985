// Small programs the cluster tests run inside hosts: the test binary re-executed with a flag, so
// that the tests need nothing but themselves (no python, no netcat).
//
//   --listen ADDR PORT COUNT        listens on ADDR:PORT, prints "listening", then answers COUNT
//                                   connections (0: forever) with "host=<hostname> peer=<address>"
//   --connect ADDR PORT TIMEOUT_MS  connects within TIMEOUT_MS and prints "connected: <answer>"
//                                   (exit 0), or "connect failed: <why>" (exit 1)
//   --hostname                      prints gethostname()
//   --hold-cluster HOSTS DIR        makes a cluster of HOSTS hosts, starts a sleeper and a shell
//                                   with a background child in each, prints "pids P... netns I...",
//                                   and waits to be killed (the SIGKILL test's owner process)
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>

#include "elastra/status.h"
#include "testbed/namespace_cluster.h"

namespace elastra::testing {

// Runs the program argv[1] names and returns its exit code; nullopt when argv[1] names none.
std::optional<int> RunTestProgram(int argc, char** argv);

// This binary, for re-executing it inside a host.
std::string SelfPath();

// Polls the file at `path` until it has a line starting with `prefix` and returns that line, or
// returns kTimedOut at `deadline`.
StatusOr<std::string> WaitForLine(const std::string& path, const std::string& prefix,
                                  std::chrono::steady_clock::time_point deadline);

// A shell in `host` with a background child (sleep) that it waits for: a process tree, as an
// agent and its workers. Returns once the child's pid is known.
struct ShellWithChild {
  pid_t shell = -1;
  pid_t child = -1;
};
StatusOr<ShellWithChild> StartShellWithChild(NamespaceCluster& cluster, int host,
                                             const std::string& log_path,
                                             std::chrono::steady_clock::time_point deadline);

}  // namespace elastra::testing
