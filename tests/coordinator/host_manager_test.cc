// The host manager driven without a core: agents registering and heartbeating, the first
// generation's workers started in free slots, failed starts backing a host off, and hosts lost as
// one event, stepped with a FakeClock.
#include "coordinator/host_manager.h"

#include <gtest/gtest.h>

#include <map>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class HostManagerTest : public ManagerTest {
 protected:
  // The spawn requests sent since the last call, by recipient identity.
  std::map<std::string, std::vector<std::string>> Spawned() {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& [to, req] : Sent<proto::SpawnRequest>(T::kSpawnRequest)) {
      auto& ids = out[to];
      ids.insert(ids.end(), req.worker_ids.begin(), req.worker_ids.end());
    }
    return out;
  }
  // Process `id` exited, as its agent reports it.
  void Exited(const std::string& id) { host_manager_.OnExited(id); }
  // `ms` pass with host a's agent heartbeating, then a tick.
  void Step(int ms) {
    clock_.Advance(Duration(ms));
    host_manager_.OnAgentHeartbeat("agent-a");
    host_manager_.Tick();
  }
};

TEST_F(HostManagerTest, AnAgentRegistersAndIsAcknowledged) {
  proto::Envelope e;
  e.type = T::kAgentRegister;
  e.sender = "agent-a";
  e.request_id = 4;
  e.payload = proto::EncodePayload(proto::AgentRegister{"a", 3, "10.0.0.1", 2});
  host_manager_.OnAgentRegister("id-a", e);
  EXPECT_EQ(Sent<proto::Ack>(T::kAck).size(), 1u);
  const HostInfo* a = hosts_.Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->agent, "agent-a");
  EXPECT_EQ(a->identity, "id-a");
  EXPECT_EQ(a->slots, 3);
  EXPECT_EQ(a->gpus, 2);
  EXPECT_FALSE(a->heartbeats);
  EXPECT_TRUE(host_manager_.OnAgentHeartbeat("agent-a"));
  EXPECT_TRUE(a->heartbeats);
  EXPECT_FALSE(host_manager_.OnAgentHeartbeat("w0")) << "not an agent";
  // Another agent claiming the same host name while the first is alive is refused.
  e.sender = "agent-impostor";
  host_manager_.OnAgentRegister("id-x", e);
  auto errors = Sent<proto::ErrorReply>(T::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].second.code, static_cast<int32_t>(StatusCode::kFailedPrecondition));
}

TEST_F(HostManagerTest, AnAgentRegisteringAfterTheEndIsToldToShutDown) {
  StartTwo();
  generations_.LoseWorkers({"a", "b"}, "gone");
  outbox_.Take();
  RegisterHost("n1", 4);
  auto shutdown = Sent<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(shutdown[0].first, "id-agent-n1");
  EXPECT_EQ(shutdown[0].second.exit_code, 1);
  EXPECT_EQ(hosts_.hosts().size(), 1u);
}

TEST_F(HostManagerTest, TheFirstWorkersStartInFreeSlotsHostByHostInRegistrationOrder) {
  options_.initial_workers = 5;
  RegisterHost("a", 2);
  // The first host fills up; each request goes to its own agent only.
  auto first = Spawned();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(first["id-agent-a"].size(), 2u);
  // An agent that never heartbeats starts its first workers itself (elastra run before agents
  // heartbeated): nothing is asked of it.
  RegisterHost("legacy", 8, /*heartbeats=*/false);
  EXPECT_TRUE(Spawned().empty());
  RegisterHost("b", 2);
  RegisterHost("c", 4);
  auto later = Spawned();
  EXPECT_EQ(later["id-agent-b"].size(), 2u);
  EXPECT_EQ(later["id-agent-c"].size(), 1u) << "5 = 2 on a + 2 on b + 1 on c";
  EXPECT_EQ(later.count("id-agent-legacy"), 0u);
  EXPECT_EQ(hosts_.Outstanding(), 5);
  // Joined or on their way: nothing more is asked, also when another host registers.
  Join(first["id-agent-a"][0], "a");
  RegisterHost("d", 4);
  EXPECT_TRUE(Spawned().empty());
  // They join (one with another host name: it runs where its agent started it) and form the
  // first generation.
  Join(first["id-agent-a"][1], "a");
  Join(later["id-agent-b"][0], "b");
  Join(later["id-agent-b"][1], "elsewhere");
  EXPECT_EQ(membership_.Find(later["id-agent-b"][1])->host, "b");
  Join(later["id-agent-c"][0], "c");
  EXPECT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 5u);
  EXPECT_EQ(hosts_.Outstanding(), 0);
}

TEST_F(HostManagerTest, AWorkerThatExitsBeforeJoiningBacksItsHostOff) {
  options_.initial_workers = 1;
  options_.heartbeat_timeout = Duration(1500);
  options_.spawn_timeout = Duration(60000);
  RegisterHost("a", 4);
  auto spawned = Spawned()["id-agent-a"];
  ASSERT_EQ(spawned.size(), 1u);
  // It exits at once (a program that cannot start): no new start there for the heartbeat
  // timeout, then twice that after the next failure.
  Exited(spawned[0]);
  EXPECT_EQ(hosts_.Find("a")->failed_starts, 1);
  host_manager_.MaybeStartFirstWorkers();
  EXPECT_TRUE(Spawned().empty());
  Step(1499);
  EXPECT_TRUE(Spawned().empty());
  Step(1);  // the backoff ended: the listeners start the worker again
  auto again = Spawned()["id-agent-a"];
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0], spawned[0]) << "a fresh id";
  Exited(again[0]);
  Step(1500);
  EXPECT_TRUE(Spawned().empty());
  Step(1500);
  auto third = Spawned()["id-agent-a"];
  ASSERT_EQ(third.size(), 1u);
  // A worker that joins clears the count.
  Join(third[0], "a");
  EXPECT_EQ(hosts_.Find("a")->failed_starts, 0);
}

TEST_F(HostManagerTest, ASpawnThatNeverJoinsFreesItsSlotAtSpawnTimeout) {
  options_.initial_workers = 1;
  options_.spawn_timeout = Duration(1000);
  RegisterHost("a", 1);
  ASSERT_EQ(Spawned()["id-agent-a"].size(), 1u);
  EXPECT_EQ(hosts_.FreeSlots(*hosts_.Find("a")), 0);
  clock_.Advance(Duration(999));
  host_manager_.OnAgentHeartbeat("agent-a");
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Outstanding(), 1);
  clock_.Advance(Duration(1));
  host_manager_.OnAgentHeartbeat("agent-a");
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Outstanding(), 0);
  EXPECT_EQ(hosts_.FreeSlots(*hosts_.Find("a")), 1);
  EXPECT_EQ(hosts_.Find("a")->failed_starts, 1);
}

TEST_F(HostManagerTest, ASilentAgentLosesItsHostAndAllItsWorkersInOneRound) {
  options_.initial_workers = 4;
  RegisterHost("a", 2);
  RegisterHost("b", 2);
  auto spawned = Spawned();
  for (const auto& id : spawned["id-agent-a"]) Join(id, "a");
  for (const auto& id : spawned["id-agent-b"]) Join(id, "b");
  outbox_.Take();
  Join("spare", "b");
  for (const auto& id : membership_.Members()) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{1, 0, 0, 0}).ok());
  }
  ASSERT_EQ(generations_.generation(), 1u);
  outbox_.Take();
  // Host b's agent falls silent; a keeps heartbeating.
  clock_.Advance(Duration(1000));
  host_manager_.OnAgentHeartbeat("agent-a");
  host_manager_.Tick();
  clock_.Advance(Duration(501));
  host_manager_.OnAgentHeartbeat("agent-a");
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Find("b")->state, proto::HostState::kLost);
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kUp);
  EXPECT_EQ(recoveries_, 1);
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u) << "to the two members on a";
  std::vector<std::string> lost = recover[0].second.lost;
  std::sort(lost.begin(), lost.end());
  auto on_b = spawned["id-agent-b"];
  std::sort(on_b.begin(), on_b.end());
  EXPECT_EQ(lost, on_b);
  EXPECT_EQ(membership_.Find("spare")->state, WorkerState::kLost) << "standby on b too";
}

// An agent's silence counts from its latest heartbeat or registration, and a host back after it
// was lost is watched again from its return (the deadlines wait in a queue: a tick looks only at
// the hosts whose deadline passed).
TEST_F(HostManagerTest, AnAgentsDeadlineMovesWithItsRegistrationsAndAReturnedHostIsWatchedAgain) {
  RegisterHost("a", 2);  // registers and heartbeats: watched (heartbeat timeout 1500 ms)
  clock_.Advance(Duration(1000));
  RegisterHost("a", 2, /*heartbeats=*/false);  // registers again, no heartbeat: a fresh deadline
  clock_.Advance(Duration(1000));
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kUp) << "1 s after its registration";
  clock_.Advance(Duration(501));
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kLost);
  RegisterHost("a", 2, /*heartbeats=*/false);
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kUp) << "back";
  clock_.Advance(Duration(1500));
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kUp) << "exactly at its deadline";
  clock_.Advance(Duration(1));
  host_manager_.Tick();
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kLost) << "silent again since its return";
}

TEST_F(HostManagerTest, AMissedDeadlineIsAHostLossOnlyWhenItsAgentIsSilentToo) {
  RegisterHost("a", 4);
  RegisterHost("b", 4);
  Join("a0", "a");
  Join("b0", "b");
  ASSERT_TRUE(generations_.OnReady("a0", proto::GenerationReady{1, 0, 0, 0}).ok());
  ASSERT_TRUE(generations_.OnReady("b0", proto::GenerationReady{1, 0, 0, 0}).ok());
  outbox_.Take();
  clock_.Advance(Duration(751));
  host_manager_.OnAgentHeartbeat("agent-a");  // a's agent is alive; b's has been silent 751 ms
  auto rest = host_manager_.LoseHostsOf({"a0", "b0"});
  EXPECT_EQ(rest, (std::vector<std::string>{"a0"})) << "a worker loss, its agent alive";
  EXPECT_EQ(hosts_.Find("b")->state, proto::HostState::kLost);
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kUp);
  EXPECT_EQ(membership_.Find("b0")->state, WorkerState::kLost);
}

TEST_F(HostManagerTest, ADrainedHostsAgentAndStandbyWorkersAreToldToExitZero) {
  RegisterHost("a", 4);
  Join("s", "a");
  outbox_.Take();
  host_manager_.FinishDrain(hosts_.Find("a"));
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kDrained);
  EXPECT_EQ(membership_.Find("s"), nullptr);
  auto shutdown = Sent<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(shutdown.size(), 2u);
  for (const auto& [to, s] : shutdown) {
    EXPECT_TRUE(to == "id-s" || to == "id-agent-a") << to;
    EXPECT_EQ(s.exit_code, 0);
    EXPECT_EQ(s.reason, "host drained");
  }
  // Registering again does not bring it back; its agent hears the same.
  RegisterHost("a", 4);
  EXPECT_EQ(hosts_.Find("a")->state, proto::HostState::kDrained);
  EXPECT_EQ(Sent<proto::Shutdown>(T::kShutdown).size(), 1u);
}

}  // namespace
}  // namespace elastra::coordinator
