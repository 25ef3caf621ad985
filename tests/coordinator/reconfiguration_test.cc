#include "coordinator/reconfiguration.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace elastra::coordinator {
namespace {

proto::PausedReport Paused(uint64_t target, int64_t step, std::vector<int64_t> commits = {},
                           bool failed = false) {
  return proto::PausedReport{target, step, std::move(commits), failed};
}

TEST(ReconfigurationTest, PauseAgreementAndTimings) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginPause(2, {"a", "b"});
  EXPECT_EQ(r.phase(), Phase::kPausing);
  clock.Advance(Duration(10));
  EXPECT_EQ(r.RecordPaused("a", Paused(1, 5)).code(), StatusCode::kStaleGeneration);
  EXPECT_EQ(r.RecordPaused("z", Paused(2, 5)).code(), StatusCode::kNotFound);
  ASSERT_TRUE(r.RecordPaused("a", Paused(2, 5)).ok());
  EXPECT_FALSE(r.AllPaused());
  clock.Advance(Duration(20));
  ASSERT_TRUE(r.RecordPaused("b", Paused(2, 5)).ok());
  EXPECT_TRUE(r.AllPaused());
  EXPECT_EQ(*r.AgreedStep(), 5);

  GenerationPlan plan;
  plan.generation = 2;
  plan.members = {"a", "b"};
  plan.has_state = {true, true};
  r.BeginBuild(plan);
  EXPECT_EQ(r.RecordReady("a", proto::GenerationReady{1, 1, 1, 0}).code(),
            StatusCode::kStaleGeneration);
  clock.Advance(Duration(5));
  ASSERT_TRUE(r.RecordReady("a", proto::GenerationReady{2, 3.0, 1.0, 0}).ok());
  EXPECT_FALSE(r.AllReady());
  clock.Advance(Duration(5));
  ASSERT_TRUE(r.RecordReady("b", proto::GenerationReady{2, 2.0, 4.0, 0}).ok());
  EXPECT_TRUE(r.AllReady());
  auto t = r.Timings();
  EXPECT_DOUBLE_EQ(t.agreement_ms, 30);  // request -> last paused
  EXPECT_DOUBLE_EQ(t.downtime_ms, 30);   // first paused (t=10) -> last ready (t=40)
  EXPECT_DOUBLE_EQ(t.rebuild_ms, 3.0);
  EXPECT_DOUBLE_EQ(t.transfer_ms, 4.0);
}

TEST(ReconfigurationTest, DifferentStepsOrAFailureAbortThePause) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginPause(2, {"a", "b"});
  ASSERT_TRUE(r.RecordPaused("a", Paused(2, 5)).ok());
  ASSERT_TRUE(r.RecordPaused("b", Paused(2, 6)).ok());
  EXPECT_EQ(r.AgreedStep().status().code(), StatusCode::kAborted);
  r.BeginPause(3, {"a"});
  ASSERT_TRUE(r.RecordPaused("a", Paused(3, 5, {}, true)).ok());
  EXPECT_EQ(r.AgreedStep().status().code(), StatusCode::kAborted);
}

TEST(ReconfigurationTest, RecoveryPicksLargestCommonCommit) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginRecover(4, {"a", "b", "c", "d"}, clock.Now() + Duration(100));
  ASSERT_TRUE(r.RecordPaused("b", Paused(4, 9, {4, 6, 8}, true)).ok());
  ASSERT_TRUE(r.RecordPaused("a", Paused(4, 9, {6, 8, 9}, true)).ok());
  ASSERT_TRUE(r.RecordPaused("c", Paused(4, -1, {}, true)).ok());  // joined, holds no state
  EXPECT_FALSE(r.AllPaused());
  EXPECT_FALSE(r.DeadlinePassed());
  clock.Advance(Duration(100));
  EXPECT_TRUE(r.DeadlinePassed());
  EXPECT_EQ(r.Unanswered(), (std::vector<std::string>{"d"}));
  r.DropParticipant("d");
  EXPECT_TRUE(r.AllPaused());
  auto plan = r.PlanRecovery();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->restore_step, 8);
  EXPECT_EQ(plan->with_state, (std::vector<std::string>{"a", "b"}));  // by old rank
  EXPECT_EQ(plan->without_state, (std::vector<std::string>{"c"}));
}

TEST(ReconfigurationTest, RecoveryWithoutCommonCommitFails) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginRecover(4, {"a", "b"}, clock.Now());
  ASSERT_TRUE(r.RecordPaused("a", Paused(4, 9, {4}, true)).ok());
  ASSERT_TRUE(r.RecordPaused("b", Paused(4, 9, {6}, true)).ok());
  EXPECT_EQ(r.PlanRecovery().status().code(), StatusCode::kAborted);
  r.BeginRecover(5, {"a"}, clock.Now());
  ASSERT_TRUE(r.RecordPaused("a", Paused(5, 9, {}, true)).ok());
  EXPECT_EQ(r.PlanRecovery().status().code(), StatusCode::kAborted);
}

TEST(ReconfigurationTest, DroppedParticipantsAreNeitherAwaitedNorListed) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginRecover(3, {"a", "b", "c", "d"}, clock.Now());
  ASSERT_TRUE(r.RecordPaused("b", Paused(3, 9, {8}, true)).ok());
  ASSERT_TRUE(r.RecordPaused("b", Paused(3, 9, {8}, true)).ok());  // again: counted once
  r.DropParticipant("b");  // answered, then died
  r.DropParticipant("c");  // died before answering
  r.DropParticipant("c");
  r.DropParticipant("zz");  // never asked
  EXPECT_FALSE(r.IsParticipant("b"));
  EXPECT_FALSE(r.HasAnswered("b"));
  EXPECT_EQ(r.RecordPaused("c", Paused(3, 9, {8}, true)).code(), StatusCode::kNotFound);
  EXPECT_EQ(r.Unanswered(), (std::vector<std::string>{"a", "d"}));
  EXPECT_TRUE(r.Answered().empty());
  EXPECT_FALSE(r.AllPaused());
  ASSERT_TRUE(r.RecordPaused("d", Paused(3, 9, {8}, true)).ok());
  ASSERT_TRUE(r.RecordPaused("a", Paused(3, 7, {6, 8}, true)).ok());
  EXPECT_TRUE(r.AllPaused());
  EXPECT_TRUE(r.HasAnswered("a"));
  EXPECT_EQ(r.Answered(), (std::vector<std::string>{"a", "d"}));  // by old rank
  auto plan = r.PlanRecovery();
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->restore_step, 8);
  EXPECT_EQ(plan->reached_step, 9);  // b's report was dropped with it
  EXPECT_EQ(plan->with_state, (std::vector<std::string>{"a", "d"}));

  r.BeginPause(4, {"a"});
  r.DropParticipant("a");
  EXPECT_TRUE(r.AllPaused());
  EXPECT_EQ(r.AgreedStep().status().code(), StatusCode::kAborted);  // nobody paused
}

TEST(ReconfigurationTest, ALaterReadyReportReplacesTheFirstAndCountsOnce) {
  FakeClock clock;
  Reconfiguration r(&clock);
  GenerationPlan plan;
  plan.generation = 7;
  plan.members = {"a", "b"};
  r.BeginBuild(plan);
  EXPECT_EQ(r.RecordReady("c", proto::GenerationReady{7, 1, 1, 0}).code(), StatusCode::kNotFound);
  ASSERT_TRUE(r.RecordReady("a", proto::GenerationReady{7, 9.0, 9.0, 0}).ok());
  ASSERT_TRUE(r.RecordReady("a", proto::GenerationReady{7, 1.0, 2.0, 0}).ok());
  EXPECT_TRUE(r.IsReady("a"));
  EXPECT_FALSE(r.IsReady("b"));
  EXPECT_FALSE(r.IsReady("c"));
  EXPECT_FALSE(r.AllReady());
  ASSERT_TRUE(r.RecordReady("b", proto::GenerationReady{7, 0.5, 0.5, 0}).ok());
  EXPECT_TRUE(r.AllReady());
  EXPECT_DOUBLE_EQ(r.Timings().rebuild_ms, 1.0);
  EXPECT_DOUBLE_EQ(r.Timings().transfer_ms, 2.0);
  r.Reset();
  EXPECT_FALSE(r.IsReady("a"));
  EXPECT_EQ(r.RecordReady("a", proto::GenerationReady{7, 1, 1, 0}).code(),
            StatusCode::kStaleGeneration);
}

// A report's hint (the sender's rank) is only where to look first: a wrong or stale one (a
// recovery's survivors are not at their old ranks) finds the sender as well, out-of-range ones
// too, and a hint never makes a stranger a participant or a member.
TEST(ReconfigurationTest, AWrongHintFindsTheSenderAnyway) {
  FakeClock clock;
  Reconfiguration r(&clock);
  r.BeginRecover(3, {"a", "c", "d"}, clock.Now() + Duration(1000));
  EXPECT_EQ(r.RecordPaused("z", Paused(3, 5, {5}), 0).code(), StatusCode::kNotFound);
  ASSERT_TRUE(r.RecordPaused("c", Paused(3, 5, {5}), 2).ok());   // "c" is at 1, not 2
  ASSERT_TRUE(r.RecordPaused("d", Paused(3, 5, {5}), 2).ok());   // right
  ASSERT_TRUE(r.RecordPaused("a", Paused(3, 5, {5}), 99).ok());  // out of range
  EXPECT_TRUE(r.AllPaused());
  EXPECT_EQ(r.Answered(), (std::vector<std::string>{"a", "c", "d"}));

  GenerationPlan plan;
  plan.generation = 3;
  plan.members = {"d", "a", "c"};
  r.BeginBuild(plan);
  EXPECT_EQ(r.RecordReady("z", proto::GenerationReady{3, 1, 1, 0}, 0).code(),
            StatusCode::kNotFound);
  ASSERT_TRUE(r.RecordReady("d", proto::GenerationReady{3, 1, 1, 0}, 0).ok());
  ASSERT_TRUE(r.RecordReady("a", proto::GenerationReady{3, 1, 1, 0}, 0).ok());  // "a" is at 1
  EXPECT_FALSE(r.AllReady());
  ASSERT_TRUE(r.RecordReady("c", proto::GenerationReady{3, 1, 1, 0}, 7).ok());
  EXPECT_TRUE(r.AllReady());
  EXPECT_TRUE(r.IsReady("a"));
}

}  // namespace
}  // namespace elastra::coordinator
