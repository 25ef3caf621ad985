// The mpirun bootstrap's reading of Open MPI's environment and its choice of addresses (no mpirun
// needed).
#include "worker/mpi_bootstrap.h"
#include "worker/worker_internals.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include "protocol/keys.h"
#include "protocol/net.h"
#include "elastra/worker.h"

namespace elastra {
namespace {

class MpirunEnv : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* v :
         {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
          "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_enable_recovery",
          "OMPI_MCA_orte_abort_on_non_zero_status", "ELASTRA_COORDINATOR", "ELASTRA_DEVICE",
          "ELASTRA_SERVER_KEY", "ELASTRA_WORKER_PUBLIC_KEY", "ELASTRA_WORKER_SECRET_KEY",
          "ELASTRA_STATE_DIR", "ELASTRA_WORKER_ID", "ELASTRA_BIND_HOST"}) {
      unsetenv(v);
    }
  }
};

TEST_F(MpirunEnv, NotUnderMpirun) {
  auto env = DetectMpirun();
  ASSERT_TRUE(env.ok());
  EXPECT_FALSE(env->has_value());
}

TEST_F(MpirunEnv, ReadsRankSizeAndLocalRank) {
  setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
  setenv("OMPI_COMM_WORLD_RANK", "5", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_MCA_ess_base_jobid", "1234", 1);
  auto env = DetectMpirun();
  ASSERT_TRUE(env.ok()) << env.status();
  ASSERT_TRUE(env->has_value());
  EXPECT_EQ((*env)->world_size, 8);
  EXPECT_EQ((*env)->world_rank, 5);
  EXPECT_EQ((*env)->local_size, 4);
  EXPECT_EQ((*env)->local_rank, 1);
  EXPECT_EQ((*env)->job_id, "1234");
}

TEST_F(MpirunEnv, MalformedVariablesAreClearErrors) {
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "4", 1);
  auto env = DetectMpirun();
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(env.status().message().find("OMPI_COMM_WORLD_RANK"), std::string::npos);
  setenv("OMPI_COMM_WORLD_RANK", "two", 1);
  EXPECT_EQ(DetectMpirun().status().code(), StatusCode::kInvalidArgument);
  unsetenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(DetectMpirun().status().code(), StatusCode::kInvalidArgument);
  setenv("OMPI_COMM_WORLD_SIZE", "0", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  EXPECT_EQ(DetectMpirun().status().code(), StatusCode::kInvalidArgument);
  // FromEnvironment passes the error on instead of starting anything.
  auto options = WorkerOptions::FromEnvironment();
  ASSERT_FALSE(options.ok());
  EXPECT_NE(options.status().message().find("OMPI_COMM_WORLD_SIZE"), std::string::npos);
}

TEST_F(MpirunEnv, RecoveryFlagIsRecognized) {
  EXPECT_EQ(MpirunRecoveryFlag(), "");
  setenv("OMPI_MCA_orte_abort_on_non_zero_status", "1", 1);
  EXPECT_EQ(MpirunRecoveryFlag(), "");
  setenv("OMPI_MCA_orte_abort_on_non_zero_status", "0", 1);
  EXPECT_EQ(MpirunRecoveryFlag(), "--mca orte_abort_on_non_zero_status 0");
  unsetenv("OMPI_MCA_orte_abort_on_non_zero_status");
  setenv("OMPI_MCA_orte_enable_recovery", "1", 1);
  EXPECT_EQ(MpirunRecoveryFlag(), "--enable-recovery");
}

void SetKeys() {
  auto server = GenerateKeyPair();
  auto worker = GenerateKeyPair();
  ASSERT_TRUE(server.ok() && worker.ok());
  setenv("ELASTRA_SERVER_KEY", server->public_key.c_str(), 1);
  setenv("ELASTRA_WORKER_PUBLIC_KEY", worker->public_key.c_str(), 1);
  setenv("ELASTRA_WORKER_SECRET_KEY", worker->secret_key.c_str(), 1);
}

TEST_F(MpirunEnv, ExternalCoordinatorGetsPerJobWorkerIdsAndParks) {
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_MCA_ess_base_jobid", "777", 1);
  setenv("ELASTRA_COORDINATOR", "tcp://127.0.0.1:1", 1);
  setenv("ELASTRA_DEVICE", "local", 1);
  SetKeys();
  auto options = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->worker_id, "mpi-777-1");
  EXPECT_EQ(options->coordinator, "tcp://127.0.0.1:1");
  EXPECT_EQ(options->local_rank, 1);
  EXPECT_EQ(options->device, 1);
  EXPECT_TRUE(options->park_when_removed);
  ASSERT_NE(InternalsOf(*options).mpi, nullptr);
  EXPECT_FALSE(InternalsOf(*options).mpi->hosts_coordinator());
  EXPECT_EQ(options->bind_host, "127.0.0.1");
}

// A job across hosts that joins a named coordinator binds where its route to that coordinator
// starts (no host name lookup), or where ELASTRA_BIND_HOST says.
TEST_F(MpirunEnv, ExternalCoordinatorAcrossHostsBindsTheRouteToIt) {
  setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  setenv("OMPI_COMM_WORLD_RANK", "3", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
  SetKeys();
  std::vector<std::string> coordinators = {"127.0.0.1"};
  for (const auto& i : LocalIpv4Interfaces()) coordinators.push_back(i.address);
  for (const auto& host : coordinators) {
    setenv("ELASTRA_COORDINATOR", ("tcp://" + host + ":1").c_str(), 1);
    auto options = WorkerOptions::FromEnvironment();
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->bind_host, host);
    EXPECT_EQ(options->coordinator, "tcp://" + host + ":1");
  }
  setenv("ELASTRA_BIND_HOST", "10.9.8.7", 1);
  auto options = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->bind_host, "10.9.8.7");
  EXPECT_EQ(InternalsOf(*options).mpi->bind_host(), "10.9.8.7");
}

TEST(ChooseJobAddress, TheAddressMostRanksOnOtherHostsReached) {
  // Ranks 0 and 1 on rank 0's host (no pick), 2..5 elsewhere.
  EXPECT_EQ(ChooseJobAddress({"", "", "10.0.0.5", "192.168.1.5", "10.0.0.5", ""}, "172.17.0.1"),
            "10.0.0.5");
  // A tie goes to the lowest rank's pick.
  EXPECT_EQ(ChooseJobAddress({"", "192.168.1.5", "10.0.0.5", "10.0.0.5", "192.168.1.5"}, "x"),
            "192.168.1.5");
  // Nobody reached it (or every rank is on rank 0's host): the fallback.
  EXPECT_EQ(ChooseJobAddress({"", "", ""}, "172.17.0.1"), "172.17.0.1");
  EXPECT_EQ(ChooseJobAddress({}, "172.17.0.1"), "172.17.0.1");
}

TEST_F(MpirunEnv, LocalDeviceNeedsMpirun) {
  setenv("ELASTRA_COORDINATOR", "tcp://127.0.0.1:1", 1);
  setenv("ELASTRA_DEVICE", "local", 1);
  SetKeys();
  auto options = WorkerOptions::FromEnvironment();
  ASSERT_FALSE(options.ok());
  EXPECT_EQ(options.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(options.status().message().find("ELASTRA_DEVICE=local"), std::string::npos);
  unsetenv("ELASTRA_DEVICE");
  auto plain = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->park_when_removed);
  EXPECT_EQ(InternalsOf(*plain).mpi, nullptr);
}

}  // namespace
}  // namespace elastra
