#include "tests/integration/job_harness.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

namespace elastra::testing {

std::string ElastraBinary() { return ELASTRA_BINARY; }
std::string TrainBinary() { return TRAIN_MLP_BINARY; }

CommandResult RunShell(const std::string& command) {
  CommandResult r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

pid_t SpawnLogged(const std::vector<std::string>& argv, const std::string& log_path,
                  const std::vector<std::string>& env, ProcessGroup group) {
  // Everything is built before fork: the child calls only async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    const bool replaced =
        eq != std::string::npos && std::any_of(env.begin(), env.end(), [&](const std::string& v) {
          return v.compare(0, eq + 1, entry, 0, eq + 1) == 0;  // the same "K="
        });
    if (!replaced) env_strings.push_back(entry);
  }
  env_strings.insert(env_strings.end(), env.begin(), env.end());
  std::vector<std::string> args_strings = argv;
  std::vector<char*> args;
  std::vector<char*> envp;
  for (auto& a : args_strings) args.push_back(a.data());
  args.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = fork();
  if (pid == 0) {
    if (group == ProcessGroup::kOwn) setpgid(0, 0);
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0666);
    if (fd < 0) _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    if (fd > STDERR_FILENO) close(fd);
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  // In the parent too, so that the group exists before the caller can kill it (harmless when the
  // child made it first and has exec'd: then this fails).
  if (pid > 0 && group == ProcessGroup::kOwn) setpgid(pid, pid);
  return pid;
}

int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Only a leader's pid names a group (a pid in use is never another group's id).
  if (kill(-pid, SIGKILL) != 0) kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

Job::Job(int nproc, std::vector<std::string> train_args, std::vector<std::string> env,
         std::vector<std::string> run_args) {
  char tmpl[] = "/tmp/elastra_it_XXXXXX";
  dir_ = mkdtemp(tmpl);
  std::vector<std::string> argv = {ElastraBinary(), "run", "--nproc", std::to_string(nproc),
                                   "--state-dir", state_dir(), "--max-workers", "8"};
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  argv.insert(argv.end(), {"--", TrainBinary(), "--log", log_path(), "--stop-file", stop_path()});
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  pid_ = SpawnLogged(argv, dir_ + "/launcher.log", env);
}

Job::Job(Job&& other) noexcept
    : dir_(std::exchange(other.dir_, std::string())), pid_(std::exchange(other.pid_, -1)) {}

Job::~Job() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    Wait(std::chrono::seconds(10));
  }
  if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

nlohmann::json Job::Status() {
  auto r = RunShell(ElastraBinary() + " status --json --state-dir " + state_dir());
  if (r.exit_code != 0) return nlohmann::json::object();
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  return j.is_discarded() ? nlohmann::json::object() : j;
}

bool Job::WaitFor(const std::function<bool(const nlohmann::json&)>& pred,
                  std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(state_dir() + "/coordinator.json")) {
      auto j = Status();
      if (!j.empty() && pred(j)) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

bool Job::WaitForStep(int64_t step, std::chrono::seconds timeout) {
  return WaitFor([&](const nlohmann::json& j) { return j.value("step", int64_t{-1}) >= step; },
                 timeout);
}

CommandResult Job::Resize(const std::string& args) {
  return RunShell(ElastraBinary() + " resize --state-dir " + state_dir() + " " + args);
}

pid_t Job::PidOfRank(int rank) {
  auto j = Status();
  for (const auto& w : j.value("workers", nlohmann::json::array())) {
    if (w.value("rank", -1) == rank && w.value("state", std::string()) == "member") {
      return static_cast<pid_t>(w.value("pid", int64_t{-1}));
    }
  }
  return -1;
}

pid_t Job::CoordinatorPid() const {
  std::ifstream in(state_dir() + "/coordinator.json");
  if (!in) return -1;
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return -1;
  return static_cast<pid_t>(j.value("pid", int64_t{-1}));
}

int Job::Wait(std::chrono::seconds timeout) {
  if (pid_ <= 0) return -1;
  const int code = WaitExit(pid_, timeout);
  pid_ = -1;
  return code;
}

void Job::Signal(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

void KillWorkerAndRecover(Job& job, pid_t victim) {
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  WaitForFailureRecovery(job);
}

void KillHeldWorkerAndRecover(Job& job, const std::string& hold, pid_t victim) {
  std::ofstream(hold).put('\n');
  ASSERT_TRUE(job.WaitFor(
      [&hold](const nlohmann::json&) { return std::filesystem::exists(hold + ".held"); },
      std::chrono::seconds(60)))
      << LauncherLog(job);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  std::filesystem::remove(hold);
  WaitForFailureRecovery(job);
}

void WaitForFailureRecovery(Job& job) {
  ASSERT_TRUE(job.WaitFor(
      [](const nlohmann::json& j) {
        auto h = j.value("history", nlohmann::json::array());
        return j.value("state", std::string()) == "running" && !h.empty() &&
               h.back().value("reason", std::string()) == "failure";
      },
      std::chrono::seconds(60)))
      << LauncherLog(job);
  const int64_t at = job.Status().value("step", int64_t{0});
  ASSERT_TRUE(job.WaitForStep(at + 5, std::chrono::seconds(60))) << LauncherLog(job);
}

std::string LauncherLog(const Job& job) {
  std::ifstream in(job.dir() + "/launcher.log");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

examples::TrainLog ExpectLogMatches(const std::string& run_log, const std::string& ref_log,
                                    int steps, double tolerance) {
  examples::LogMatch m = examples::MatchLogs(run_log, ref_log, steps, tolerance);
  EXPECT_TRUE(m.status.ok()) << m.status;
  const double diff = m.comparison.max_rel_loss_diff;
  ::testing::Test::RecordProperty("max_rel_loss_diff", std::to_string(diff));
  std::printf("max relative loss difference against the reference: %.3g\n", diff);
  return std::move(m.run);
}

examples::TrainLog ExpectMatchesReference(const Job& job,
                                          const std::vector<std::string>& train_args, int steps) {
  std::string ref = job.dir() + "/ref.jsonl";
  EXPECT_TRUE(RunReference(train_args, ref));
  return ExpectLogMatches(job.log_path(), ref, steps, 1e-4);
}

void Job::StopTraining() {
  std::ofstream(stop_path()) << "stop\n";
}

int64_t StepsApplied(const Job& job) { return StepsApplied(job.log_path()); }

int64_t StepsApplied(const std::string& run_log) {
  auto log = examples::ReadTrainLog(run_log);
  if (!log.ok() || log->applied.empty()) return 0;
  return log->applied.rbegin()->first + 1;
}

examples::TrainLog ExpectStoppedLogMatchesReference(const std::string& run_log,
                                                    const std::string& ref_log,
                                                    std::vector<std::string> train_args) {
  const int64_t steps = StepsApplied(run_log);
  EXPECT_GT(steps, 0) << "the job applied no step";
  for (size_t i = 0; i + 1 < train_args.size(); ++i) {
    if (train_args[i] == "--steps") train_args[i + 1] = std::to_string(steps);
  }
  EXPECT_TRUE(RunReference(train_args, ref_log));
  return ExpectLogMatches(run_log, ref_log, static_cast<int>(steps), 1e-4);
}

examples::TrainLog ExpectStoppedRunMatchesReference(const Job& job,
                                                    std::vector<std::string> train_args) {
  return ExpectStoppedLogMatchesReference(job.log_path(), job.dir() + "/ref.jsonl",
                                          std::move(train_args));
}

bool RunReference(const std::vector<std::string>& train_args, const std::string& log) {
  std::string cmd = TrainBinary() + " --reference --log " + log;
  for (const auto& a : train_args) cmd += " " + a;
  return RunShell(cmd).exit_code == 0;
}

}  // namespace elastra::testing
