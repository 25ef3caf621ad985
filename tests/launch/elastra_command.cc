#include "tests/launch/elastra_command.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace elastra::testing {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempDir(const std::string& name) {
  const std::string dir =
      ::testing::TempDir() + "/elastra_cli_" + name + "_" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

pid_t StartElastra(const std::vector<std::string>& args, const std::string& dir,
                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv = {ELASTRA_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open((dir + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open((dir + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

std::optional<int> ExitedCode(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return std::nullopt;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

CommandResult FinishElastra(pid_t pid, const std::string& dir, std::chrono::milliseconds timeout) {
  CommandResult r;
  std::optional<int> code;
  if (!WaitUntil([&] { return (code = ExitedCode(pid)).has_value(); }, timeout)) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  r.code = code.value_or(-1);
  r.out = ReadFile(dir + "/stdout");
  r.err = ReadFile(dir + "/stderr");
  return r;
}

CommandResult Elastra(const std::vector<std::string>& args) {
  const std::string dir = TempDir("run");
  return FinishElastra(StartElastra(args, dir), dir);
}

std::string Describe(const std::vector<std::string>& args, const CommandResult& r) {
  std::string s = "elastra";
  for (const auto& a : args) s += " " + a;
  return s + "\n[exit " + std::to_string(r.code) + "]\nstdout: " + r.out + "\nstderr: " + r.err;
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (pred()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace elastra::testing
