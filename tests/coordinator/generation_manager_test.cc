// The generation manager driven on its own, without a CoordinatorCore, as a simulator would: the
// workers are entries in a Membership, time is a FakeClock, and what the members are sent is read
// back from the Outbox.
#include "coordinator/generation_manager.h"

#include <gtest/gtest.h>

#include "common/codec.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class GenerationManagerTest : public ::testing::Test {
 protected:
  GenerationManagerTest() {
    options_.initial_workers = 2;
    options_.max_workers = 8;
    options_.recover_timeout = Duration(1500);
    options_.clock = &clock_;
    gm_.AddCommitListener([this](uint64_t g) { commits_.push_back(g); });
    gm_.AddJobEndListener([this](const std::string& m) { ended_ = m; });
    gm_.AddRecoveryListener([this] { ++recoveries_; });
  }

  void Join(const std::string& id) {
    ASSERT_TRUE(membership_.Join(proto::JoinRequest{id, "n1", 0, 1}, "id-" + id, clock_.Now()).ok());
    health_.Beat(id);
    gm_.MaybeFormFirstGeneration();
  }

  // What was sent since the last call, of one type, as (recipient identity, payload).
  template <class P>
  std::vector<std::pair<std::string, P>> Sent(T type) {
    std::vector<std::pair<std::string, P>> out;
    for (const auto& o : outbox_.Take()) {
      auto e = proto::DecodeEnvelope(o.frame);
      EXPECT_TRUE(e.ok()) << e.status();
      if (!e.ok() || e->type != type) continue;
      auto p = proto::DecodePayload<P>(e->payload);
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) out.emplace_back(o.identity, *p);
    }
    return out;
  }

  // a and b form generation 1 and commit it.
  void StartTwo() {
    Join("a");
    Join("b");
    ASSERT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 2u);
    ASSERT_TRUE(gm_.OnReady("a", proto::GenerationReady{1, 1, 0, 0}).ok());
    ASSERT_TRUE(gm_.OnReady("b", proto::GenerationReady{1, 1, 0, 0}).ok());
    ASSERT_EQ(gm_.generation(), 1u);
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Membership membership_;
  HealthMonitor health_{&clock_, Duration(1500)};
  Outbox outbox_{"job", &membership_, [this] { return gm_.generation(); }};
  JournalRecorder journal_{&membership_};
  LayoutPolicy layouts_;
  CheckpointManager checkpoints_{"job", 3, checkpoint::Env::Default(), &journal_};
  GenerationManager gm_{&options_, &clock_, &membership_, &health_, &outbox_, &journal_,
                        &layouts_, &checkpoints_};
  std::vector<uint64_t> commits_;
  std::string ended_;
  int recoveries_ = 0;
};

TEST_F(GenerationManagerTest, TheFirstGenerationFormsAndCommitsWhenEveryMemberIsReady) {
  Join("a");
  EXPECT_TRUE(outbox_.Take().empty()) << "formed with one of two initial workers";
  Join("b");
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 2u);
  EXPECT_EQ(built[0].second.generation, 1u);
  EXPECT_EQ(built[0].second.layout, (Layout{2, 1, 1}));
  EXPECT_TRUE(built[0].second.members[0].has_state);   // rank 0's initial state is broadcast
  EXPECT_FALSE(built[0].second.members[1].has_state);
  EXPECT_EQ(gm_.state(), proto::JobState::kForming);
  ASSERT_TRUE(gm_.OnReady("a", proto::GenerationReady{1, 2, 0, 0}).ok());
  EXPECT_TRUE(commits_.empty());
  ASSERT_TRUE(gm_.OnReady("b", proto::GenerationReady{1, 3, 0, 0}).ok());
  EXPECT_EQ(commits_, (std::vector<uint64_t>{1}));
  EXPECT_EQ(gm_.state(), proto::JobState::kRunning);
  EXPECT_EQ(gm_.members(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(gm_.history().size(), 1u);
  EXPECT_DOUBLE_EQ(gm_.history()[0].timings.rebuild_ms, 3);
  EXPECT_EQ(gm_.OnReady("a", proto::GenerationReady{1, 0, 0, 0}).code(),
            StatusCode::kStaleGeneration);
}

TEST_F(GenerationManagerTest, APauseBuildsTheGoalWithStandbyWorkers) {
  StartTwo();
  Join("c");
  Join("d");
  gm_.BeginPause(SizeGoal{4, false, {}});
  auto pauses = Sent<proto::PauseRequest>(T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 2u);
  EXPECT_EQ(pauses[0].second.target_generation, 2u);
  EXPECT_EQ(gm_.state(), proto::JobState::kPausing);
  ASSERT_TRUE(gm_.OnPaused("a", proto::PausedReport{2, 10, {}, false}).ok());
  ASSERT_TRUE(gm_.OnPaused("b", proto::PausedReport{2, 10, {}, false}).ok());
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 4u);
  const proto::NewGeneration& ng = built[0].second;
  EXPECT_EQ(ng.generation, 2u);
  EXPECT_EQ(ng.layout, (Layout{4, 1, 1}));
  EXPECT_EQ(ng.restore_step, 10);
  ASSERT_EQ(ng.members.size(), 4u);
  EXPECT_TRUE(ng.members[0].has_state && ng.members[1].has_state);
  EXPECT_FALSE(ng.members[2].has_state || ng.members[3].has_state);
  for (const std::string id : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(gm_.OnReady(id, proto::GenerationReady{2, 0, 0, 0}).ok());
  }
  EXPECT_EQ(commits_, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(gm_.layout(), (Layout{4, 1, 1}));
}

TEST_F(GenerationManagerTest, DifferentPauseStepsTurnThePauseIntoARecovery) {
  StartTwo();
  gm_.BeginPause(SizeGoal{2, true, Layout{1, 2, 1}});
  outbox_.Take();
  ASSERT_TRUE(gm_.OnPaused("a", proto::PausedReport{2, 10, {10}, false}).ok());
  ASSERT_TRUE(gm_.OnPaused("b", proto::PausedReport{2, 11, {10}, false}).ok());
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u);
  EXPECT_EQ(recover[0].second.target_generation, 3u) << "a fresh number, above the pause's";
  EXPECT_EQ(recoveries_, 1);
  EXPECT_EQ(gm_.state(), proto::JobState::kRecovering);
  EXPECT_FALSE(gm_.FailureIsCurrent(1)) << "already recovering";
}

TEST_F(GenerationManagerTest, SilentSurvivorsAreLostAtTheRecoverDeadline) {
  StartTwo();
  EXPECT_FALSE(gm_.FailureIsCurrent(0));
  EXPECT_TRUE(gm_.FailureIsCurrent(1));
  gm_.StartRecovery({}, "a collective failed");
  outbox_.Take();
  ASSERT_TRUE(gm_.OnPaused("a", proto::PausedReport{2, 7, {7}, true}).ok());
  clock_.Advance(Duration(1499));
  gm_.Tick();
  EXPECT_EQ(gm_.state(), proto::JobState::kRecovering);
  clock_.Advance(Duration(1));
  gm_.Tick();  // b is lost; a alone builds generation 2 from its commit at step 7
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLost);
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0].first, "id-a");
  EXPECT_EQ(built[0].second.restore_step, 7);
  EXPECT_EQ(built[0].second.reason, proto::GenerationReason::kFailure);
}

TEST_F(GenerationManagerTest, LosingEveryMemberFailsTheJob) {
  StartTwo();
  gm_.LoseWorkers({"a", "b"}, "missed heartbeat deadline");
  auto shutdowns = Sent<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(shutdowns.size(), 2u);
  EXPECT_EQ(shutdowns[0].second.exit_code, 1);
  EXPECT_EQ(shutdowns[0].second.reason, "declared lost: missed heartbeat deadline");
  EXPECT_EQ(gm_.state(), proto::JobState::kFailed);
  EXPECT_TRUE(gm_.job_over());
  EXPECT_EQ(ended_, "the job failed: every member is lost (missed heartbeat deadline)");
}

TEST_F(GenerationManagerTest, TheJobFinishesWhenEveryMemberHasFinished) {
  StartTwo();
  membership_.SetState("a", WorkerState::kFinished);
  gm_.MaybeFinishJob();
  EXPECT_EQ(gm_.state(), proto::JobState::kRunning);
  membership_.SetState("b", WorkerState::kFinished);
  gm_.MaybeFinishJob();
  EXPECT_EQ(gm_.state(), proto::JobState::kFinished);
  EXPECT_EQ(ended_, "the job finished");
}

}  // namespace
}  // namespace elastra::coordinator
