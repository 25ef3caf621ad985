// Runs the built `elastra` binary (ELASTRA_BINARY) as a child process for the command-line
// tests: its exit code, stdout and stderr, each in a file of a per-test folder.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace elastra::testing {

struct CommandResult {
  int code = -1;  // the exit code, 128+signal when killed by one
  std::string out, err;
};

std::string ReadFile(const std::string& path);
// A fresh, empty folder under the test's temp dir.
std::string TempDir(const std::string& name);

// Starts `elastra ARGS...` (no shell) with `env` added to the environment, stdout and stderr
// into `dir`/stdout and `dir`/stderr.
pid_t StartElastra(const std::vector<std::string>& args, const std::string& dir,
                   const std::map<std::string, std::string>& env = {});
// Waits for it (at most `timeout`, then SIGKILL: code -1) and reads its output.
CommandResult FinishElastra(pid_t pid, const std::string& dir,
                            std::chrono::milliseconds timeout = std::chrono::seconds(60));
// The exit code when `pid` has exited (reaping it), nullopt while it runs.
std::optional<int> ExitedCode(pid_t pid);
// Runs `elastra ARGS...` to the end.
CommandResult Elastra(const std::vector<std::string>& args);

// "elastra ARGS\n[exit N]\nstdout: ...\nstderr: ..." for failure messages.
std::string Describe(const std::vector<std::string>& args, const CommandResult& r);

// Polls until `pred` holds (true) or `timeout` passes (false).
bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

}  // namespace elastra::testing
