// The set-up the tests of coordinators on etcd share (etcd_coordinator_test.cc,
// etcd_admin_test.cc, etcd_standby_http_test.cc): a temporary directory and a single-member etcd
// in it with 10 ms heartbeats. TearDown kills the process group of each of the test's processes,
// in the order the test gave, then stops etcd and removes the directory (kept where
// ELASTRA_KEEP_TEST_DIRS is set). Skipped without an etcd binary (tests/journal/require_etcd.h).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "tests/journal/etcd_server.h"
#include "tests/journal/require_etcd.h"

namespace elastra::testing {

class EtcdJobTest : public ::testing::Test {
 protected:
  // `dir_template`: mkdtemp's template of the test's directory ("/tmp/NAME_XXXXXX").
  // `processes`: the fixture's pid members (-1 while none runs), killed in this order.
  EtcdJobTest(std::string dir_template, std::vector<pid_t*> processes)
      : dir_template_(std::move(dir_template)), processes_(std::move(processes)) {}

  void SetUp() override {
    ELASTRA_SKIP_WITHOUT_ETCD();
    std::vector<char> tmpl(dir_template_.begin(), dir_template_.end());
    tmpl.push_back('\0');
    dir_ = mkdtemp(tmpl.data());
    // etcd grants at least 1.5 election timeouts: 150 ms here, so --leader-ttl 1 stays 1 s.
    ASSERT_EQ(etcd_.Start(dir_, {"--heartbeat-interval", "10", "--election-timeout", "100"}), "");
  }
  void TearDown() override {
    for (pid_t* process : processes_) {
      const pid_t pid = *process;
      if (pid <= 0) continue;
      kill(-pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    etcd_.Stop();
    if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  std::string dir_;
  journal::EtcdServer etcd_;

 private:
  std::string dir_template_;
  std::vector<pid_t*> processes_;
};

}  // namespace elastra::testing
