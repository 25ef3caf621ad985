// Starting NCCL ranks as processes on one host (one-GPU machines included): fork + exec of a helper
// with the environment that lets several ranks share one GPU for functional tests (a distinct
// NCCL_HOSTID per rank, no P2P/SHM transports, sockets over loopback). Header-only, for tests and
// benchmarks.
#pragma once

#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace elastra::testing {

// The variables each rank gets. Values already set in the parent's environment win for the
// tuning knobs (NCCL_DEBUG, NCCL_SOCKET_IFNAME), never for NCCL_HOSTID.
inline std::vector<std::pair<std::string, std::string>> RankEnvironment(int rank) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"NCCL_HOSTID", "elastra-rank-" + std::to_string(rank)},
      {"NCCL_P2P_DISABLE", "1"},
      {"NCCL_SHM_DISABLE", "1"},
      {"NCCL_IB_DISABLE", "1"},
      {"NCCL_NVLS_ENABLE", "0"},
      {"NCCL_MNNVL_ENABLE", "0"},
      {"NCCL_COLLNET_ENABLE", "0"},
  };
  if (getenv("NCCL_SOCKET_IFNAME") == nullptr) env.push_back({"NCCL_SOCKET_IFNAME", "lo"});
  if (getenv("NCCL_DEBUG") == nullptr) env.push_back({"NCCL_DEBUG", "WARN"});
  return env;
}

// Starts `exe args...` with RankEnvironment(rank). Returns the pid, or -1.
inline pid_t SpawnRank(const std::string& exe, const std::vector<std::string>& args, int rank) {
  std::vector<std::string> argv_s;
  argv_s.push_back(exe);
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  auto env = RankEnvironment(rank);
  pid_t pid = fork();
  if (pid != 0) return pid;  // parent (or -1)
  // Child: only async-signal-safe work would be strictly correct after fork in a threaded parent;
  // setenv before exec is the usual, practical exception (no other thread runs here).
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  execv(exe.c_str(), argv.data());
  std::perror("execv");
  _exit(127);
}

// Waits for every pid until `deadline`; SIGKILLs the ones still running then. Returns exit codes:
// the exit status, 128 + signal for a killed process, -1 for one killed at the deadline.
inline std::vector<int> WaitRanks(const std::vector<pid_t>& pids,
                                  std::chrono::steady_clock::time_point deadline) {
  std::vector<int> codes(pids.size(), -2);
  size_t left = pids.size();
  while (left > 0) {
    for (size_t i = 0; i < pids.size(); ++i) {
      if (codes[i] != -2 || pids[i] <= 0) {
        if (pids[i] <= 0 && codes[i] == -2) {
          codes[i] = -1;
          --left;
        }
        continue;
      }
      int status = 0;
      pid_t r = waitpid(pids[i], &status, WNOHANG);
      if (r == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status)
                                     : (WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1);
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < pids.size(); ++i) {
        if (codes[i] == -2) {
          kill(pids[i], SIGKILL);
          int status = 0;
          waitpid(pids[i], &status, 0);
          codes[i] = -1;
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

// A fresh directory for a FileKeyValueStore; removed with RemoveTree.
inline std::string MakeTempDir(const char* tag) {
  const char* base = getenv("TMPDIR");
  std::string templ = std::string(base != nullptr ? base : "/tmp") + "/" + tag + "_XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) return "";
  return std::string(buf.data());
}

}  // namespace elastra::testing
