#include "coordinator/membership.h"

#include <gtest/gtest.h>

namespace elastra::coordinator {
namespace {

proto::JoinRequest Req(const std::string& id) { return proto::JoinRequest{id, "host", 0, 1}; }

TEST(MembershipTest, JoinRegistersStandbyInJoinOrder) {
  Membership m;
  ASSERT_TRUE(m.Join(Req("b"), "id-b").ok());
  ASSERT_TRUE(m.Join(Req("a"), "id-a").ok());
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(m.Members().empty());
  EXPECT_EQ(m.Find("a")->identity, "id-a");
  EXPECT_EQ(m.Find("a")->rank, -1);
}

TEST(MembershipTest, RanksAndStates) {
  Membership m;
  for (auto id : {"a", "b", "c"}) ASSERT_TRUE(m.Join(Req(id), id).ok());
  m.AssignRanks({"c", "a"});
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"c", "a"}));
  EXPECT_EQ(m.Find("a")->rank, 1);
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"b"}));
  m.SetState("c", WorkerState::kLost);
  EXPECT_EQ(m.Find("c")->rank, -1);
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"a"}));
  m.Remove("b");
  EXPECT_EQ(m.Find("b"), nullptr);
}

TEST(MembershipTest, LiveMemberCannotJoinTwiceButLostOneMay) {
  Membership m;
  ASSERT_TRUE(m.Join(Req("a"), "x").ok());
  // A retried join of a standby worker is fine and keeps its place.
  ASSERT_TRUE(m.Join(Req("a"), "y").ok());
  EXPECT_EQ(m.Find("a")->identity, "y");
  m.AssignRanks({"a"});
  EXPECT_EQ(m.Join(Req("a"), "z").code(), StatusCode::kInvalidArgument);
  m.SetState("a", WorkerState::kLost);
  EXPECT_TRUE(m.Join(Req("a"), "z").ok());
  EXPECT_EQ(m.Find("a")->state, WorkerState::kStandby);
  EXPECT_EQ(m.Join(Req(""), "q").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Join(Req(std::string(300, 'x')), "q").code(),
            StatusCode::kInvalidArgument);
}

TEST(MembershipTest, FreshWorkerIdsCountUpAndSkipIdsInUse) {
  Membership m;
  ASSERT_TRUE(m.Join(Req("w1"), "x").ok());
  EXPECT_EQ(m.NextWorkerId(), "w0");
  EXPECT_EQ(m.NextWorkerId(), "w2");
  EXPECT_EQ(m.NextWorkerId(), "w3");
  // Removed ids are never handed out again.
  ASSERT_TRUE(m.Join(Req("w4"), "x").ok());
  m.Remove("w4");
  EXPECT_EQ(m.NextWorkerId(), "w5");
}


// The indexes (standby by join order, members by rank, workers by host) follow every change of
// state, rank and host, and agree with a plain scan of All().
TEST(MembershipTest, IndexesFollowStatesRanksAndHosts) {
  Membership m;
  for (int i = 0; i < 6; ++i) {
    proto::JoinRequest r{"w" + std::to_string(i), i < 3 ? "h0" : "h1", 0, 1};
    ASSERT_TRUE(m.Join(r, "id").ok());
  }
  EXPECT_EQ(m.StandbyCount(), 6u);
  m.AssignRanks({"w4", "w1", "w2"});
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w4", "w1", "w2"}));
  EXPECT_EQ(m.MemberCount(), 3u);
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"w0", "w3", "w5"}));
  // A new order of the same members replaces the ranks.
  m.AssignRanks({"w2", "w4", "w1"});
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w2", "w4", "w1"}));
  m.SetFinished("w4");
  EXPECT_EQ(m.Find("w4")->rank, 1);  // kept for status
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w2", "w1"}));
  m.SetHost("w0", "h1");
  std::vector<std::string> on_h1;
  for (const WorkerInfo* w : m.On("h1")) on_h1.push_back(w->id);
  EXPECT_EQ(on_h1, (std::vector<std::string>{"w0", "w3", "w4", "w5"}));  // by join order
  EXPECT_EQ(m.Find("w0")->host, "h1");
  m.Remove("w3");
  m.SetState("w5", WorkerState::kLost);
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"w0"}));
  EXPECT_EQ(m.StandbyCount(), 1u);
  // A lost worker joining again is standby at the back of the queue.
  ASSERT_TRUE(m.Join(proto::JoinRequest{"w5", "h2", 0, 1}, "id2").ok());
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"w0", "w5"}));
  EXPECT_TRUE(m.On("h1").size() == 2u);  // w0, w4: w5 moved to h2 with its new join
  std::vector<std::string> all;
  for (const WorkerInfo* w : m.All()) all.push_back(w->id);
  EXPECT_EQ(all, (std::vector<std::string>{"w0", "w1", "w2", "w4", "w5"}));
}

// The counts a resize reads without a scan (slots held per host, the leaving workers) agree with
// a scan of the workers after every change of state, host and membership.
TEST(MembershipTest, SlotCountsAndTheLeavingFollowEveryChange) {
  Membership m;
  auto check = [&](const std::string& when) {
    std::vector<std::string> leaving;
    for (const WorkerInfo* w : m.All()) {
      if (w->state == WorkerState::kLeaving) leaving.push_back(w->id);
    }
    std::vector<std::string> listed;
    for (const WorkerInfo* w : m.Leaving()) listed.push_back(w->id);
    EXPECT_EQ(listed, leaving) << when;
    for (const char* h : {"h0", "h1", "h2"}) {
      EXPECT_EQ(m.SlotsHeldOn(h),
                m.CountOn(h, {WorkerState::kMember, WorkerState::kStandby, WorkerState::kLeaving}))
          << when << ", host " << h;
    }
  };
  for (int i = 0; i < 6; ++i) {
    proto::JoinRequest r{"w" + std::to_string(i), i < 3 ? "h0" : "h1", 0, 1};
    ASSERT_TRUE(m.Join(r, "id").ok());
  }
  check("joined");
  EXPECT_EQ(m.SlotsHeldOn("h0"), 3u);
  m.AssignRanks({"w0", "w1", "w3", "w4"});
  check("members");
  m.SetState("w1", WorkerState::kLeaving);
  m.SetState("w4", WorkerState::kLeaving);
  check("two leaving");
  EXPECT_EQ(m.Leaving().size(), 2u);
  EXPECT_EQ(m.SlotsHeldOn("h1"), 3u);  // a leaving worker still holds its slot
  m.SetState("w4", WorkerState::kLost);
  m.SetFinished("w3");
  check("lost and finished");
  EXPECT_EQ(m.SlotsHeldOn("h1"), 1u);
  m.SetHost("w1", "h2");
  check("moved while leaving");
  EXPECT_EQ(m.SlotsHeldOn("h2"), 1u);
  m.Remove("w1");
  check("removed");
  EXPECT_TRUE(m.Leaving().empty());
  ASSERT_TRUE(m.Join(proto::JoinRequest{"w4", "h2", 0, 1}, "id2").ok());
  check("lost one joined again elsewhere");
  EXPECT_EQ(m.SlotsHeldOn("h2"), 1u);
  m.SetState("w4", WorkerState::kStandby);
  m.SetState("w0", WorkerState::kLost);
  m.SetState("w0", WorkerState::kStandby);  // back on its slot
  check("lost and back");
  EXPECT_EQ(m.SlotsHeldOn("h0"), 2u);  // w0 and w2: w1 moved away
}

// A launcher's ids "w0".."w<n>" are skipped at once, as a gap among them is still filled, and
// ids that only look alike ("w007", "wx") take nothing.
TEST(MembershipTest, FreshWorkerIdsSkipALaunchersIds) {
  Membership m;
  for (int i = 0; i < 300; ++i) {
    if (i == 130) continue;
    ASSERT_TRUE(m.Join(Req("w" + std::to_string(i)), "x").ok());
  }
  ASSERT_TRUE(m.Join(Req("w007"), "x").ok());
  ASSERT_TRUE(m.Join(Req("wx"), "x").ok());
  m.MarkSeen("w301");
  m.MarkSeen("w99999999999");  // beyond the numbers tracked: found through the id
  EXPECT_EQ(m.NextWorkerId(), "w130");
  EXPECT_EQ(m.NextWorkerId(), "w300");
  EXPECT_EQ(m.NextWorkerId(), "w302");
  ASSERT_TRUE(m.Join(Req("w303"), "x").ok());
  EXPECT_EQ(m.NextWorkerId(), "w304");
}

TEST(MembershipTest, AGrowKeepsTheRanksOfMembersAndIndexesTheNewOnes) {
  Membership m;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(m.Join(proto::JoinRequest{"w" + std::to_string(i), "h", 0, 1}, "id").ok());
  }
  m.AssignRanks({"w1", "w2"});
  m.AssignRanks({"w1", "w2", "w4", "w0"});  // the first two keep their ranks
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w1", "w2", "w4", "w0"}));
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"w3"}));
  EXPECT_EQ(m.Find("w4")->rank, 2);
  m.AssignRanks({"w4", "w2"});  // w2 keeps rank 1; w1 and w0 stay members until moved
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w1", "w4", "w2", "w0"}));  // by rank, id
  m.SetState("w1", WorkerState::kLeaving);
  m.SetState("w0", WorkerState::kStandby);
  EXPECT_EQ(m.Members(), (std::vector<std::string>{"w4", "w2"}));
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"w0", "w3"}));
  EXPECT_EQ(m.On("h").size(), 5u);
}

// Thousands of workers: the lists stay exact (the indexes are what the coordinator's O(1) join
// relies on).
TEST(MembershipTest, ManyWorkers) {
  Membership m;
  constexpr int kN = 20000;
  std::vector<std::string> ranks;
  for (int i = 0; i < kN; ++i) {
    const std::string id = "w" + std::to_string(i);
    ASSERT_TRUE(m.Join(proto::JoinRequest{id, "h" + std::to_string(i / 8), 0, 1}, id).ok());
    if (i % 2 == 0) ranks.insert(ranks.begin() + (ranks.size() / 2), id);
  }
  m.AssignRanks(ranks);
  EXPECT_EQ(m.Members(), ranks);
  EXPECT_EQ(m.StandbyCount(), static_cast<size_t>(kN / 2));
  EXPECT_EQ(m.Standby().front(), "w1");
  EXPECT_EQ(m.On("h7").size(), 8u);
}

// The lists and counts a change reads without a lookup by id: the members by rank as Find returns
// them, the workers of a host in some states, the finished ones; each follows joins, rank and
// state changes, a host move and removal.
TEST(MembershipTest, MemberInfosCountOnAndFinishedFollowEveryChange) {
  Membership m;
  auto on = [](const std::string& id, const std::string& host) {
    return proto::JoinRequest{id, host, 0, 1};
  };
  for (auto id : {"a", "b", "c"}) ASSERT_TRUE(m.Join(on(id, "h1"), id).ok());
  ASSERT_TRUE(m.Join(on("d", "h2"), "d").ok());
  m.AssignRanks({"c", "d", "a"});
  const std::vector<const WorkerInfo*> infos = m.MemberInfos();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[0], m.Find("c"));
  EXPECT_EQ(infos[1], m.Find("d"));
  EXPECT_EQ(infos[2], m.Find("a"));
  EXPECT_EQ(m.CountOn("h1", {WorkerState::kMember}), 2u);
  EXPECT_EQ(m.CountOn("h1", {WorkerState::kMember, WorkerState::kStandby}), 3u);
  EXPECT_EQ(m.CountOn("h2", {WorkerState::kStandby}), 0u);
  EXPECT_EQ(m.CountOn("nowhere", {WorkerState::kMember}), 0u);
  EXPECT_EQ(m.FinishedCount(), 0u);
  m.SetFinished("a");
  EXPECT_EQ(m.FinishedCount(), 1u);
  EXPECT_EQ(m.CountOn("h1", {WorkerState::kMember}), 1u);
  EXPECT_EQ(m.MemberInfos(), (std::vector<const WorkerInfo*>{m.Find("c"), m.Find("d")}));
  m.SetHost("a", "h2");
  EXPECT_EQ(m.FinishedCount(), 1u);
  EXPECT_EQ(m.CountOn("h2", {WorkerState::kFinished}), 1u);
  EXPECT_EQ(m.CountOn("h1", {WorkerState::kFinished}), 0u);
  m.Remove("a");
  EXPECT_EQ(m.FinishedCount(), 0u);
  m.SetState("c", WorkerState::kLost);
  EXPECT_EQ(m.MemberInfos(), (std::vector<const WorkerInfo*>{m.Find("d")}));
  EXPECT_EQ(m.CountOn("h1", {WorkerState::kLost, WorkerState::kStandby}), 2u);
}

}  // namespace
}  // namespace elastra::coordinator
