#include "coordinator/membership.h"

#include <gtest/gtest.h>

namespace elastra::coordinator {
namespace {

proto::JoinRequest Req(const std::string& id) { return proto::JoinRequest{id, "host", 0, 1}; }

TEST(MembershipTest, JoinRegistersStandbyInJoinOrder) {
  Membership m;
  ASSERT_TRUE(m.Join(Req("b"), "id-b", TimePoint{}).ok());
  ASSERT_TRUE(m.Join(Req("a"), "id-a", TimePoint{}).ok());
  EXPECT_EQ(m.Standby(), (std::vector<std::string>{"b", "a"}));
  EXPECT_TRUE(m.Members().empty());
  EXPECT_EQ(m.Find("a")->identity, "id-a");
  EXPECT_EQ(m.Find("a")->rank, -1);
}

TEST(MembershipTest, RanksAndStates) {
  Membership m;
  for (auto id : {"a", "b", "c"}) ASSERT_TRUE(m.Join(Req(id), id, TimePoint{}).ok());
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
  ASSERT_TRUE(m.Join(Req("a"), "x", TimePoint{}).ok());
  // A retried join of a standby worker is fine and keeps its place.
  ASSERT_TRUE(m.Join(Req("a"), "y", TimePoint{}).ok());
  EXPECT_EQ(m.Find("a")->identity, "y");
  m.AssignRanks({"a"});
  EXPECT_EQ(m.Join(Req("a"), "z", TimePoint{}).code(), StatusCode::kInvalidArgument);
  m.SetState("a", WorkerState::kLost);
  EXPECT_TRUE(m.Join(Req("a"), "z", TimePoint{}).ok());
  EXPECT_EQ(m.Find("a")->state, WorkerState::kStandby);
  EXPECT_EQ(m.Join(Req(""), "q", TimePoint{}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Join(Req(std::string(300, 'x')), "q", TimePoint{}).code(),
            StatusCode::kInvalidArgument);
}

TEST(MembershipTest, FreshWorkerIdsCountUpAndSkipIdsInUse) {
  Membership m;
  ASSERT_TRUE(m.Join(Req("w1"), "x", TimePoint{}).ok());
  EXPECT_EQ(m.NextWorkerId(), "w0");
  EXPECT_EQ(m.NextWorkerId(), "w2");
  EXPECT_EQ(m.NextWorkerId(), "w3");
  // Removed ids are never handed out again.
  ASSERT_TRUE(m.Join(Req("w4"), "x", TimePoint{}).ok());
  m.Remove("w4");
  EXPECT_EQ(m.NextWorkerId(), "w5");
}

}  // namespace
}  // namespace elastra::coordinator
