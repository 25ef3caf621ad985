// The host table without a core: registrations and who may hold a host name, the workers and free
// slots of each host, where new workers go, and the spawns on their way, stepped with a FakeClock.
#include "coordinator/host_table.h"

#include <gtest/gtest.h>

namespace elastra::coordinator {
namespace {

class HostTableTest : public ::testing::Test {
 protected:
  HostInfo* Register(const std::string& name, int slots, const std::string& agent = "") {
    auto h = hosts_.Register(proto::AgentRegister{name, slots, "10.0.0." + name, 0},
                             agent.empty() ? "agent-" + name : agent, "id-" + name, clock_.Now(),
                             kTimeout);
    EXPECT_TRUE(h.ok()) << h.status();
    return h.ok() ? *h : nullptr;
  }
  void Join(const std::string& id, const std::string& host, WorkerState state) {
    ASSERT_TRUE(membership_.Join(proto::JoinRequest{id, host, 0, 1}, "id-" + id).ok());
    if (state == WorkerState::kMember) {
      membership_.AssignRanks({id});
    } else {
      membership_.SetState(id, state);
    }
  }
  std::vector<std::pair<std::string, int>> Names(
      const std::vector<std::pair<HostInfo*, int>>& placed) {
    std::vector<std::pair<std::string, int>> out;
    for (const auto& [h, n] : placed) out.emplace_back(h->name, n);
    return out;
  }

  static constexpr Duration kTimeout{1500};
  FakeClock clock_;
  Membership membership_;
  HostTable hosts_{&membership_};
};

TEST_F(HostTableTest, AnAgentRegistersItsHostAndUpdatesItByRegisteringAgain) {
  HostInfo* a = Register("a", 4);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->state, proto::HostState::kUp);
  EXPECT_EQ(a->address, "10.0.0.a");
  EXPECT_FALSE(a->heartbeats);
  Register("b", 2);
  // The same agent again: the same host, updated; nothing is added.
  auto again = hosts_.Register(proto::AgentRegister{"a", 8, "10.1.1.1", 2}, "agent-a", "id-new",
                               clock_.Now(), kTimeout);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, a);
  ASSERT_EQ(hosts_.hosts().size(), 2u);
  EXPECT_EQ(hosts_.hosts()[0].slots, 8);
  EXPECT_EQ(hosts_.hosts()[0].gpus, 2);
  EXPECT_EQ(hosts_.hosts()[0].identity, "id-new");
  EXPECT_EQ(hosts_.FindByAgent("agent-b")->name, "b");
  EXPECT_EQ(hosts_.FindByAgent("nobody"), nullptr);
}

TEST_F(HostTableTest, TwoLiveAgentsCannotShareAHostName) {
  Register("a", 4);
  auto second = hosts_.Register(proto::AgentRegister{"a", 4, "", 0}, "agent-other", "id-x",
                                clock_.Now(), kTimeout);
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("--name"), std::string::npos);
  EXPECT_EQ(hosts_.Find("a")->agent, "agent-a");
  // Once the first agent has been silent past the timeout, another may take the name.
  clock_.Advance(Duration(1501));
  auto later = hosts_.Register(proto::AgentRegister{"a", 4, "", 0}, "agent-other", "id-x",
                               clock_.Now(), kTimeout);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(hosts_.Find("a")->agent, "agent-other");
  EXPECT_EQ(hosts_.Register(proto::AgentRegister{"", 4, "", 0}, "x", "y", clock_.Now(), kTimeout)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(hosts_.Register(proto::AgentRegister{"c", -1, "", 0}, "x", "y", clock_.Now(), kTimeout)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(HostTableTest, ALostHostComesBackWhenItsAgentRegistersADrainedOneDoesNot) {
  HostInfo* a = Register("a", 4);
  HostInfo* b = Register("b", 4);
  a->state = proto::HostState::kLost;
  b->state = proto::HostState::kDrained;
  Register("a", 4);
  Register("b", 4);
  EXPECT_EQ(a->state, proto::HostState::kUp);
  EXPECT_EQ(b->state, proto::HostState::kDrained);
}

TEST_F(HostTableTest, WorkersAndFreeSlotsCountMembersStandbyLeavingAndSpawns) {
  HostInfo* a = Register("a", 4);
  Join("m", "a", WorkerState::kMember);
  Join("s", "a", WorkerState::kStandby);
  Join("l", "a", WorkerState::kLeaving);
  Join("x", "a", WorkerState::kLost);
  Join("f", "a", WorkerState::kFinished);
  Join("o", "b", WorkerState::kMember);
  EXPECT_EQ(hosts_.WorkersOn("a"), (std::vector<std::string>{"m", "s", "l"}));
  EXPECT_EQ(hosts_.FreeSlots(*a), 1);
  hosts_.AddSpawn(a, "w9", clock_.Now() + Duration(100));
  EXPECT_EQ(hosts_.FreeSlots(*a), 0);
  hosts_.AddSpawn(a, "w10", clock_.Now() + Duration(100));
  EXPECT_EQ(hosts_.FreeSlots(*a), 0) << "never below zero";
}

TEST_F(HostTableTest, TheFirstWorkersFillHostsInRegistrationOrder) {
  Register("a", 2);
  Register("b", 4);
  Register("c", 4);
  for (auto& h : hosts_.hosts()) h.heartbeats = true;
  Join("w0", "b", WorkerState::kStandby);
  EXPECT_EQ(Names(hosts_.Place(5, Placement::kInOrder, clock_.Now(), true)),
            (std::vector<std::pair<std::string, int>>{{"a", 2}, {"b", 3}}));
  // Never more than the free slots; a host left out is skipped.
  EXPECT_EQ(Names(hosts_.Place(20, Placement::kInOrder, clock_.Now(), true, "b")),
            (std::vector<std::pair<std::string, int>>{{"a", 2}, {"c", 4}}));
}

TEST_F(HostTableTest, AGrowFillsTheFullestHostFirst) {
  Register("a", 4);
  Register("b", 4);
  Register("c", 4);
  Join("a0", "a", WorkerState::kMember);
  Join("b0", "b", WorkerState::kMember);
  Join("b1", "b", WorkerState::kMember);
  Join("b2", "b", WorkerState::kMember);
  EXPECT_EQ(Names(hosts_.Place(3, Placement::kFullestFirst, clock_.Now(), false)),
            (std::vector<std::pair<std::string, int>>{{"b", 1}, {"a", 2}}));
}

// Hosts named first take one worker a name where a slot is free (c twice, b full, z unknown);
// the rest goes by the placement.
TEST_F(HostTableTest, NamedHostsTakeOneWorkerANameFirst) {
  Register("a", 4);
  Register("b", 1);
  Register("c", 4);
  Join("a0", "a", WorkerState::kMember);
  Join("a1", "a", WorkerState::kMember);
  Join("b0", "b", WorkerState::kMember);
  EXPECT_EQ(Names(hosts_.Place(4, Placement::kFullestFirst, clock_.Now(), false, "",
                               {"c", "b", "z", "c"})),
            (std::vector<std::pair<std::string, int>>{{"c", 2}, {"a", 2}}));
  EXPECT_EQ(Names(hosts_.Place(1, Placement::kFullestFirst, clock_.Now(), false, "", {"c", "a"})),
            (std::vector<std::pair<std::string, int>>{{"c", 1}}));
  EXPECT_EQ(Names(hosts_.Place(1, Placement::kFullestFirst, clock_.Now(), false, "c", {"c"})),
            (std::vector<std::pair<std::string, int>>{{"a", 1}}))
      << "a host left out is not named back in";
}

TEST_F(HostTableTest, WorkersStartOnlyOnUpHostsNotBackingOffAndWatchedWhenAsked) {
  HostInfo* a = Register("a", 4);
  HostInfo* b = Register("b", 4);
  HostInfo* c = Register("c", 4);
  a->heartbeats = true;
  b->heartbeats = true;
  EXPECT_FALSE(hosts_.CanStart(*c, clock_.Now(), /*watched_only=*/true))
      << "its agent never heartbeated";
  EXPECT_TRUE(hosts_.CanStart(*c, clock_.Now(), /*watched_only=*/false));
  b->state = proto::HostState::kDraining;
  EXPECT_FALSE(hosts_.CanStart(*b, clock_.Now(), false));
  a->no_starts_until = clock_.Now() + Duration(100);
  EXPECT_FALSE(hosts_.CanStart(*a, clock_.Now(), false));
  EXPECT_EQ(hosts_.FreeSlotsTotal(clock_.Now(), false), 4);
  clock_.Advance(Duration(100));
  EXPECT_TRUE(hosts_.CanStart(*a, clock_.Now(), true));
  EXPECT_EQ(hosts_.FreeSlotsTotal(clock_.Now(), true), 4);
  EXPECT_EQ(hosts_.FreeSlotsTotal(clock_.Now(), false), 8);
  EXPECT_EQ(hosts_.FreeSlotsTotal(clock_.Now(), false, "a"), 4);
}

TEST_F(HostTableTest, StandbyWorkersOnDrainingOrLostHostsAreNotUsable) {
  HostInfo* a = Register("a", 4);
  Register("b", 4);
  Join("sa", "a", WorkerState::kStandby);
  Join("sb", "b", WorkerState::kStandby);
  Join("sx", "hand-started", WorkerState::kStandby);
  EXPECT_EQ(hosts_.UsableStandby(), (std::vector<std::string>{"sa", "sb", "sx"}));
  EXPECT_EQ(hosts_.UsableStandby("b"), (std::vector<std::string>{"sa", "sx"}));
  a->state = proto::HostState::kDraining;
  EXPECT_EQ(hosts_.UsableStandby(), (std::vector<std::string>{"sb", "sx"}));
  a->state = proto::HostState::kLost;
  EXPECT_EQ(hosts_.UsableStandby(), (std::vector<std::string>{"sb", "sx"}));
}

TEST_F(HostTableTest, SpawnsAreTakenWhenTheyJoinOrExpireAtTheirDeadline) {
  HostInfo* a = Register("a", 4);
  HostInfo* b = Register("b", 4);
  hosts_.AddSpawn(a, "w1", clock_.Now() + Duration(100));
  hosts_.AddSpawn(b, "w2", clock_.Now() + Duration(200));
  EXPECT_EQ(hosts_.Outstanding(), 2);
  EXPECT_EQ(hosts_.SpawnHost("w2"), b);
  EXPECT_EQ(hosts_.TakeSpawn("w1"), a);
  EXPECT_EQ(hosts_.TakeSpawn("w1"), nullptr);
  EXPECT_EQ(hosts_.Outstanding(), 1);
  clock_.Advance(Duration(199));
  EXPECT_TRUE(hosts_.TakeExpiredSpawns(clock_.Now()).empty());
  clock_.Advance(Duration(1));
  auto expired = hosts_.TakeExpiredSpawns(clock_.Now());
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].first, "w2");
  EXPECT_EQ(expired[0].second, b);
  EXPECT_EQ(hosts_.Outstanding(), 0);
}


// The indexes behind Find, FindByAgent and the spawns: an agent moving to another host name, a
// spawn asked again of another host, and ClearSpawns keep them consistent.
TEST_F(HostTableTest, LookupsByNameAgentAndSpawnFollowChanges) {
  HostInfo* a = Register("a", 4, "agent-1");
  HostInfo* b = Register("b", 4, "agent-2");
  EXPECT_EQ(hosts_.Find("b"), b);
  EXPECT_EQ(hosts_.FindByAgent("agent-2"), b);
  // agent-1 falls silent and agent-2 registers host a too: the latest of its hosts answers.
  clock_.Advance(kTimeout + Duration(1));
  Register("a", 4, "agent-2");
  EXPECT_EQ(hosts_.FindByAgent("agent-2"), b);  // b was registered after a
  EXPECT_EQ(hosts_.FindByAgent("agent-1"), nullptr);
  EXPECT_EQ(a->agent, "agent-2");
  hosts_.AddSpawn(a, "w1", clock_.Now() + Duration(100));
  hosts_.AddSpawn(b, "w1", clock_.Now() + Duration(300));  // asked again, elsewhere
  EXPECT_EQ(hosts_.Outstanding(), 1);
  EXPECT_EQ(hosts_.SpawnHost("w1"), b);
  EXPECT_TRUE(a->spawns.empty());
  hosts_.AddSpawn(b, "w2", clock_.Now() + Duration(50));
  hosts_.ClearSpawns(b);
  EXPECT_EQ(hosts_.Outstanding(), 0);
  clock_.Advance(Duration(1000));
  EXPECT_TRUE(hosts_.TakeExpiredSpawns(clock_.Now()).empty());
  // Thousands of hosts and workers: WorkersOn and FreeSlots see only their own host's.
  for (int i = 0; i < 2000; ++i) {
    const std::string name = "n" + std::to_string(i);
    Register(name, 8);
    for (int k = 0; k < 3; ++k) Join(name + "-" + std::to_string(k), name, WorkerState::kStandby);
  }
  EXPECT_EQ(hosts_.WorkersOn("n1234"),
            (std::vector<std::string>{"n1234-0", "n1234-1", "n1234-2"}));
  EXPECT_EQ(hosts_.FreeSlots(*hosts_.Find("n1999")), 5);
  EXPECT_EQ(hosts_.UsableStandby().size(), 6000u);
}

}  // namespace
}  // namespace elastra::coordinator
