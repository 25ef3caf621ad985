// The `elastra` command line (launch/cli.h on CLI11), end to end through the binary: help and
// usage errors with their exit codes, the program after `--` left alone, and JSON outputs that
// stay valid whatever the strings in them.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/launch/elastra_command.h"

namespace {

namespace fs = std::filesystem;
using elastra::testing::CommandResult;
using elastra::testing::Describe;
using elastra::testing::Elastra;
using elastra::testing::FinishElastra;
using elastra::testing::ReadFile;
using elastra::testing::StartElastra;
using elastra::testing::TempDir;

const std::vector<std::string> kCommands = {"run",    "coordinator", "agent", "resize", "drain",
                                            "status", "plan",        "ckpt",  "keygen"};

TEST(LaunchCli, HelpPrintsUsageAndExitsZero) {
  CommandResult top = Elastra({"--help"});
  EXPECT_EQ(top.code, 0) << Describe({"--help"}, top);
  for (const auto& command : kCommands) {
    EXPECT_NE(top.out.find("  " + command + " "), std::string::npos) << command << "\n" << top.out;
    CommandResult r = Elastra({command, "--help"});
    EXPECT_EQ(r.code, 0) << Describe({command, "--help"}, r);
    EXPECT_NE(r.out.find("Usage: elastra " + command), std::string::npos)
        << Describe({command, "--help"}, r);
    EXPECT_TRUE(r.err.empty()) << Describe({command, "--help"}, r);
  }
  CommandResult verify = Elastra({"ckpt", "verify", "--help"});
  EXPECT_EQ(verify.code, 0);
  EXPECT_NE(verify.out.find("Usage: elastra ckpt verify"), std::string::npos) << verify.out;
  // Every flag docs/launching.md documents for `elastra run` is in its help.
  CommandResult run = Elastra({"run", "--help"});
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
      {{"resize"}, "elastra resize: --workers or --spares is required"},
      {{"resize", "--layout", "dp=2,pp=1,tp=1", "--spares", "1"},
       "elastra resize: --layout needs --workers"},
      {{"resize", "--spares", "-1"}, "--spares must be between 0 and 65536, got -1"},
      {{"coordinator", "--spares", "x"}, "--spares must be an integer, got 'x'"},
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
      // A job may be larger than one machine's 4096 processes (docs/scale.md), up to 65536.
      {{"coordinator", "--workers", "65537"}, "--workers must be between 1 and 65536, got 65537"},
      {{"run", "--nproc", "2", "--max-workers", "70000", "--", "/bin/true"},
       "--max-workers must be between 1 and 65536"},
      {{"resize", "--workers"}, "--workers"},
      {{"drain"}, "elastra drain: --host is required"},
      {{"drain", "--host", "a", "--timeout", "0"}, "--timeout must be between 1 and 86400"},
      {{"drain", "--host", "a", "extra"}, "elastra drain: unexpected argument 'extra'"},
      {{"run", "--nproc", "1", "--http", "8080", "--", "/bin/true"},
       "--http '8080' is not HOST:PORT or :PORT"},
      {{"coordinator", "--http", ":70000"}, "--http ':70000': the port must be 0..65535"},
      {{"status", "--url", "http://127.0.0.1:1"}, "--url requires --token-file"},
      {{"resize", "--workers", "2", "--token-file", "t"}, "--token-file requires --url"},
  };
  for (const Case& c : cases) {
    CommandResult r = Elastra(c.args);
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
  CommandResult r = Elastra(args);
  EXPECT_NE(r.code, 2) << Describe(args, r);
  EXPECT_EQ(ReadFile(script + ".out"), "--nproc\n7\n--help\n--\n--state-dir\nstatus\n")
      << Describe(args, r);
}

TEST(LaunchCli, KeygenPrintsValidJsonWhateverTheFileName) {
  CommandResult pair = Elastra({"keygen"});
  ASSERT_EQ(pair.code, 0) << pair.err;
  auto j = nlohmann::json::parse(pair.out);
  EXPECT_EQ(j["public"].get<std::string>().size(), 40u);
  EXPECT_EQ(j["secret"].get<std::string>().size(), 40u);

  const std::string file = TempDir("keygen") + "/a \"quoted\" \\ name.key";
  CommandResult written = Elastra({"keygen", "--out", file});
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
  const pid_t pid = StartElastra({"coordinator", "--state-dir", state, "--workers", "1"}, dir);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string line;
  while (std::chrono::steady_clock::now() < deadline) {
    line = ReadFile(dir + "/stdout");
    if (line.find('\n') != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGTERM);
  CommandResult r = FinishElastra(pid, dir);
  ASSERT_NE(line.find('\n'), std::string::npos) << "no address within 20 s\n" << r.err;
  auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j["state_dir"], state);
  EXPECT_EQ(j["address"].get<std::string>().rfind("tcp://127.0.0.1:", 0), 0u) << line;
  EXPECT_EQ(j["join"], state + "/join.json") << line;
  EXPECT_EQ(r.code, 0) << r.err;
}

}  // namespace
