// The `elastra` command line (launch/cli.h on CLI11), end to end through the binary: help and
// usage errors with their exit codes, the program after `--` left alone, and JSON outputs that
// stay valid whatever the strings in them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

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

// Starts `elastra ARGS...` (no shell) with stdout and stderr into files under `dir`.
pid_t Start(const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> argv = {ELASTRA_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open((dir + "/stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open((dir + "/stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  return pid;
}

Result Finish(pid_t pid, const std::string& dir) {
  int status = 0;
  waitpid(pid, &status, 0);
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(dir + "/stdout");
  r.err = ReadFile(dir + "/stderr");
  return r;
}

Result Elastra(const std::vector<std::string>& args) {
  const std::string dir = TempDir("run");
  return Finish(Start(args, dir), dir);
}

std::string Describe(const std::vector<std::string>& args, const Result& r) {
  std::string s = "elastra";
  for (const auto& a : args) s += " " + a;
  return s + "\n[exit " + std::to_string(r.code) + "]\nstdout: " + r.out + "\nstderr: " + r.err;
}

const std::vector<std::string> kCommands = {"run",  "coordinator", "resize", "status",
                                            "plan", "ckpt",        "keygen"};

TEST(LaunchCli, HelpPrintsUsageAndExitsZero) {
  Result top = Elastra({"--help"});
  EXPECT_EQ(top.code, 0) << Describe({"--help"}, top);
  for (const auto& command : kCommands) {
    EXPECT_NE(top.out.find("  " + command + " "), std::string::npos) << command << "\n" << top.out;
    Result r = Elastra({command, "--help"});
    EXPECT_EQ(r.code, 0) << Describe({command, "--help"}, r);
    EXPECT_NE(r.out.find("Usage: elastra " + command), std::string::npos)
        << Describe({command, "--help"}, r);
    EXPECT_TRUE(r.err.empty()) << Describe({command, "--help"}, r);
  }
  Result verify = Elastra({"ckpt", "verify", "--help"});
  EXPECT_EQ(verify.code, 0);
  EXPECT_NE(verify.out.find("Usage: elastra ckpt verify"), std::string::npos) << verify.out;
  // Every flag README.md documents for `elastra run` is in its help.
  Result run = Elastra({"run", "--help"});
  for (const char* flag : {"--nproc", "--state-dir", "--max-workers", "--job", "--resume", "--gpus",
                           "-- PROGRAM ARGS..."}) {
    EXPECT_NE(run.out.find(flag), std::string::npos) << flag << "\n" << run.out;
  }
}

TEST(LaunchCli, BadUsageExitsTwoNamingWhatIsWrong) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;  // in stderr
  };
  const std::vector<Case> cases = {
      {{}, "Usage: elastra"},
      {{"bogus"}, "elastra: unknown command 'bogus'"},
      {{"run", "--bogus", "--nproc", "1", "--", "/bin/true"}, "elastra run: unknown flag --bogus"},
      {{"status", "--state-dir", "x", "--verbose"}, "elastra status: unknown flag --verbose"},
      {{"status", "extra"}, "elastra status: unexpected argument 'extra'"},
      {{"ckpt"}, "elastra ckpt: a command is required: list, verify, inspect"},
      {{"ckpt", "bogus", "dir"}, "elastra ckpt: unknown command 'bogus'"},
      {{"ckpt", "list"}, "elastra ckpt list: DIR is required"},
      {{"run", "--", "/bin/true"}, "elastra run: --nproc is required"},
      {{"run", "--nproc", "1"}, "elastra run: no program given"},
      {{"resize"}, "elastra resize: --workers is required"},
      {{"plan", "--workers", "4"}, "elastra plan: --model is required"},
      {{"run", "--nproc", "x", "--", "/bin/true"}, "--nproc must be an integer, got 'x'"},
      {{"run", "--nproc", "0", "--", "/bin/true"}, "--nproc must be between 1 and 4096, got 0"},
      {{"run", "--nproc", "99999999999999999999", "--", "/bin/true"},
       "--nproc must be between 1 and 4096"},
      {{"run", "--nproc", "1", "--gpus", "two", "--", "/bin/true"},
       "--gpus must be an integer, got 'two'"},
      {{"resize", "--workers", "0"}, "elastra resize: --workers must be between 1 and"},
      {{"resize", "--workers=3x"}, "elastra resize: --workers must be an integer, got '3x'"},
      {{"resize", "--workers", "2", "--timeout", "-5"}, "--timeout must be between 1 and 86400"},
      {{"resize", "--workers", "2", "--layout", "dp=2,xp=1"},
       "--layout 'dp=2,xp=1' is not a layout like dp=2,pp=1,tp=2"},
      {{"coordinator", "--workers", "many"}, "--workers must be an integer, got 'many'"},
      {{"resize", "--workers"}, "--workers"},
  };
  for (const Case& c : cases) {
    Result r = Elastra(c.args);
    EXPECT_EQ(r.code, 2) << Describe(c.args, r);
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << Describe(c.args, r);
    EXPECT_TRUE(r.out.empty()) << Describe(c.args, r);
  }
}

TEST(LaunchCli, EverythingAfterDoubleDashIsTheProgramsOwn) {
  const std::string dir = TempDir("program");
  // The worker writes its arguments, one a line; the launcher must pass on our own flag names,
  // --help and a second -- untouched.
  const std::string script = dir + "/args.sh";
  std::ofstream(script) << "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done > \"$0.out\"\n";
  fs::permissions(script, fs::perms::owner_all);
  const std::vector<std::string> args = {
      "run",     "--nproc", "1",      "--state-dir", dir + "/state", "--",    script,
      "--nproc", "7",       "--help", "--",          "--state-dir",  "status"};
  Result r = Elastra(args);
  EXPECT_NE(r.code, 2) << Describe(args, r);
  EXPECT_EQ(ReadFile(script + ".out"), "--nproc\n7\n--help\n--\n--state-dir\nstatus\n")
      << Describe(args, r);
}

TEST(LaunchCli, KeygenPrintsValidJsonWhateverTheFileName) {
  Result pair = Elastra({"keygen"});
  ASSERT_EQ(pair.code, 0) << pair.err;
  auto j = nlohmann::json::parse(pair.out);
  EXPECT_EQ(j["public"].get<std::string>().size(), 40u);
  EXPECT_EQ(j["secret"].get<std::string>().size(), 40u);

  const std::string file = TempDir("keygen") + "/a \"quoted\" \\ name.key";
  Result written = Elastra({"keygen", "--out", file});
  ASSERT_EQ(written.code, 0) << written.err;
  auto w = nlohmann::json::parse(written.out);
  EXPECT_EQ(w["file"], file);
  EXPECT_EQ(w["public"].get<std::string>().size(), 40u);
  EXPECT_FALSE(w.contains("secret"));
  EXPECT_TRUE(fs::exists(file));
}

TEST(LaunchCli, CoordinatorPrintsValidJsonWhateverTheStateDir) {
  const std::string dir = TempDir("coordinator");
  const std::string state = dir + "/state \"one\"\\";
  const pid_t pid = Start({"coordinator", "--state-dir", state, "--workers", "1"}, dir);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string line;
  while (std::chrono::steady_clock::now() < deadline) {
    line = ReadFile(dir + "/stdout");
    if (line.find('\n') != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  Result r = Finish(pid, dir);
  ASSERT_NE(line.find('\n'), std::string::npos) << "no address within 20 s\n" << r.err;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["state_dir"], state);
  EXPECT_EQ(j["address"].get<std::string>().rfind("tcp://127.0.0.1:", 0), 0u) << line;
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
