// The fixture every test on a testbed cluster shares: the namespace cluster's own tests, the
// many-host job and mpirun scenarios (tests/cluster) and the Slurm jobs (tests/slurm). Where the
// testbed cannot make its cluster here (no root, no namespaces, no Slurm) a test skips with the
// testbed's reason; where the environment variable the test names is set, it fails instead: CI
// runs as root and sets it, so that a machine that cannot make the cluster fails instead of
// skipping every test. A test that asks for one has a scratch folder, removed after its cluster
// is gone unless ELASTRA_KEEP_TEST_DIRS is set.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

namespace elastra::testing {

// `Cluster` is NamespaceCluster or SlurmCluster: its static Unavailable() says why it cannot be
// made here, or is empty.
template <typename Cluster>
class ClusterFixture : public ::testing::Test {
 protected:
  // `require_env`: the environment variable that makes a cluster that cannot be made here a
  // failure instead of a skip ("ELASTRA_REQUIRE_NAMESPACES"). `scratch_prefix`: dir_'s path before
  // its random suffix ("/tmp/elastra_cluster_test_"); empty for no scratch folder.
  ClusterFixture(const char* require_env, std::string scratch_prefix)
      : require_env_(require_env), scratch_prefix_(std::move(scratch_prefix)) {}

  void SetUp() override {
    static const std::string why = Cluster::Unavailable();
    if (!why.empty()) {
      if (std::getenv(require_env_) != nullptr) FAIL() << why;
      GTEST_SKIP() << why;
    }
    if (scratch_prefix_.empty()) return;
    std::string tmpl = scratch_prefix_ + "XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  // Ends the cluster first (every daemon and process of it, even after a failed assertion), then
  // removes the scratch folder.
  void TearDown() override {
    cluster_.reset();
    if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  std::string dir_;                   // the scratch folder; empty without one
  std::unique_ptr<Cluster> cluster_;  // the cluster the test made itself, if it did

 private:
  const char* const require_env_;
  const std::string scratch_prefix_;
};

}  // namespace elastra::testing
