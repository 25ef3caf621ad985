// The pure parts of the agent loop (launch/host_agent.h): the environment a worker starts with
// under `elastra agent` and under `elastra run`, and the settings read from flags and variables.
// The loop itself runs in agent_test (against a fake coordinator) and in the job tests.
#include "launch/host_agent.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace elastra::launch {
namespace {

HostAgentOptions AgentOptions() {
  HostAgentOptions o;
  o.registration.host = "node7";
  o.registration.max_workers = 4;
  o.registration.address = "10.1.2.3";
  o.job.address = "tcp://10.1.0.1:5555";
  o.job.job = "llm";
  o.job.server_public = "S";
  o.job.worker = {"P", "K"};
  o.job.admin = {"AP", "AK"};
  return o;
}

TEST(LaunchHostAgent, AnAgentsWorkerKnowsItsJobHostAndBindAddress) {
  HostAgentOptions o = AgentOptions();
  const std::map<std::string, std::string> env = WorkerEnvironment(o, "w12", -1);
  const std::map<std::string, std::string> want = {{"ELASTRA_COORDINATOR", "tcp://10.1.0.1:5555"},
                                                   {"ELASTRA_JOB", "llm"},
                                                   {"ELASTRA_WORKER_ID", "w12"},
                                                   {"ELASTRA_SERVER_KEY", "S"},
                                                   {"ELASTRA_WORKER_PUBLIC_KEY", "P"},
                                                   {"ELASTRA_WORKER_SECRET_KEY", "K"},
                                                   {"ELASTRA_HOST", "node7"},
                                                   {"ELASTRA_BIND_HOST", "10.1.2.3"}};
  EXPECT_EQ(env, want);  // no admin key, no state dir, no device
  o.worker_state_dir = "/var/lib/job";
  auto with = WorkerEnvironment(o, "w12", 3);
  EXPECT_EQ(with["ELASTRA_STATE_DIR"], "/var/lib/job");
  EXPECT_EQ(with["ELASTRA_DEVICE"], "3");
}

TEST(LaunchHostAgent, ElastraRunLeavesHostAndBindAddressToItsEnvironment) {
  HostAgentOptions o = AgentOptions();
  o.export_host = false;
  o.worker_state_dir = ".elastra";
  auto env = WorkerEnvironment(o, "w0", 0);
  EXPECT_EQ(env.count("ELASTRA_HOST"), 0u);
  EXPECT_EQ(env.count("ELASTRA_BIND_HOST"), 0u);
  EXPECT_EQ(env["ELASTRA_STATE_DIR"], ".elastra");
  EXPECT_EQ(env["ELASTRA_DEVICE"], "0");
  EXPECT_EQ(env.size(), 8u);
}

TEST(LaunchHostAgent, GpusAndHeartbeatSettings) {
  EXPECT_EQ(GpuCount(GpusFlag{}), 0);
  EXPECT_EQ(GpuCount(GpusFlag{4, false}), 4);
  unsetenv("ELASTRA_HEARTBEAT_MS");
  EXPECT_EQ(AgentHeartbeatInterval().count(), 200);
  setenv("ELASTRA_HEARTBEAT_MS", "50", 1);
  EXPECT_EQ(AgentHeartbeatInterval().count(), 50);
  setenv("ELASTRA_HEARTBEAT_MS", "fast", 1);
  EXPECT_EQ(AgentHeartbeatInterval().count(), 200);
  unsetenv("ELASTRA_HEARTBEAT_MS");
}

}  // namespace
}  // namespace elastra::launch
