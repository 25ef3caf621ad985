// The generation manager driven on its own, without a CoordinatorCore, as a simulator would: the
// workers are entries in a Membership, time is a FakeClock, and what the members are sent is read
// back from the Outbox.
#include "coordinator/generation_manager.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

using GenerationManagerTest = ManagerTest;

TEST_F(GenerationManagerTest, TheFirstGenerationFormsAndCommitsWhenEveryMemberIsReady) {
  Join("a");
  EXPECT_TRUE(outbox_.Take().empty()) << "formed with one of two initial workers";
  Join("b");
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 2u);
  EXPECT_EQ(built[0].second.generation, 1u);
  EXPECT_EQ(built[0].second.layout, (Layout{2, 1, 1}));
  const proto::NewGeneration table = MergedOf(built);
  EXPECT_TRUE(table.members[0].has_state);  // rank 0's initial state is broadcast
  EXPECT_FALSE(table.members[1].has_state);
  EXPECT_EQ(generations_.state(), proto::JobState::kForming);
  ASSERT_TRUE(generations_.OnReady("a", proto::GenerationReady{1, 2, 0, 0}).ok());
  EXPECT_TRUE(commits_.empty());
  ASSERT_TRUE(generations_.OnReady("b", proto::GenerationReady{1, 3, 0, 0}).ok());
  EXPECT_EQ(commits_, (std::vector<uint64_t>{1}));
  EXPECT_EQ(generations_.state(), proto::JobState::kRunning);
  EXPECT_EQ(generations_.members(), (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(generations_.history().size(), 1u);
  EXPECT_DOUBLE_EQ(generations_.history()[0].timings.rebuild_ms, 3);
  EXPECT_EQ(generations_.OnReady("a", proto::GenerationReady{1, 0, 0, 0}).code(),
            StatusCode::kStaleGeneration);
}

// A ~7B model pinned to tp=2: the planner's layouts have tensor-parallel groups of two.
constexpr char kTp2Model[] = R"({"pins": {"tp": 2}, "model": {"layers": 32, "hidden": 4096,
  "heads": 32, "vocab": 50304, "seq_len": 2048, "global_batch": 512, "micro_batch": 1,
  "device_memory_gib": 80}})";

// Each tensor-parallel group of `g` (the members with the same dp and pp coordinates) on one host.
void ExpectGroupsInsideHosts(const proto::NewGeneration& g) {
  ASSERT_GT(g.layout.tp, 1) << g.layout.ToString();
  std::map<std::pair<int, int>, std::set<std::string>> hosts;
  for (const auto& m : g.members) hosts[{m.coords.dp_rank, m.coords.pp_rank}].insert(m.host);
  for (const auto& [group, in] : hosts) EXPECT_EQ(in.size(), 1u) << g.layout.ToString();
}

TEST_F(GenerationManagerTest, TensorParallelGroupsOfTheFirstGenerationAndARecoveryStayInHosts) {
  options_.initial_workers = 4;
  proto::JoinRequest with_model{"a0", "a", 0, 1};
  with_model.model_json = kTp2Model;
  layouts_.Learn(with_model);
  ASSERT_TRUE(layouts_.has_model());
  // They join alternating between hosts a and b.
  for (const auto& [id, host] : std::vector<std::pair<std::string, std::string>>{
           {"a0", "a"}, {"b0", "b"}, {"a1", "a"}, {"b1", "b"}}) {
    Join(id, host);
  }
  auto first = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(first.size(), 4u);
  const proto::NewGeneration first_table = MergedOf(first);
  ExpectGroupsInsideHosts(first_table);
  EXPECT_TRUE(first_table.members[0].has_state) << "the new rank 0 broadcasts";
  EXPECT_EQ(first_table.prev_members[0].worker_id, first_table.members[0].worker_id);
  for (const auto& m : first_table.members) {
    ASSERT_TRUE(generations_.OnReady(m.worker_id, proto::GenerationReady{1, 0, 0, 0}).ok());
  }
  // Four standby workers whose join order mixes the hosts; a collective fails: the recovery takes
  // all eight (survivors by old rank, then standby workers by join order would pair b2 with a2).
  Join("b2", "b");
  Join("a2", "a");
  Join("a3", "a");
  Join("b3", "b");
  generations_.StartRecovery({}, "a collective failed");
  for (const auto& id : generations_.members()) {
    ASSERT_TRUE(generations_.OnPaused(id, proto::PausedReport{2, 7, {7}, true}).ok());
  }
  auto recovered = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(recovered.size(), 8u);
  const proto::NewGeneration g = MergedOf(recovered);
  ExpectGroupsInsideHosts(g);
  for (const auto& m : g.members) {
    EXPECT_EQ(m.has_state, m.worker_id.back() < '2') << m.worker_id;
  }
  EXPECT_TRUE(g.members[g.source_rank].has_state);
}

TEST_F(GenerationManagerTest, APauseBuildsTheGoalWithStandbyWorkers) {
  StartTwo();
  Join("c");
  Join("d");
  generations_.BeginPause(SizeGoal{4, false, {}});
  auto pauses = Sent<proto::PauseRequest>(T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 2u);
  EXPECT_EQ(pauses[0].second.target_generation, 2u);
  EXPECT_EQ(generations_.state(), proto::JobState::kPausing);
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 10, {}, false}).ok());
  ASSERT_TRUE(generations_.OnPaused("b", proto::PausedReport{2, 10, {}, false}).ok());
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 4u);
  const proto::NewGeneration ng = MergedOf(built);
  EXPECT_EQ(ng.generation, 2u);
  EXPECT_EQ(ng.layout, (Layout{4, 1, 1}));
  EXPECT_EQ(ng.restore_step, 10);
  ASSERT_EQ(ng.members.size(), 4u);
  EXPECT_TRUE(ng.members[0].has_state && ng.members[1].has_state);
  EXPECT_FALSE(ng.members[2].has_state || ng.members[3].has_state);
  for (const std::string id : {"a", "b", "c", "d"}) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{2, 0, 0, 0}).ok());
  }
  EXPECT_EQ(commits_, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(generations_.layout(), (Layout{4, 1, 1}));
}

TEST_F(GenerationManagerTest, DifferentPauseStepsTurnThePauseIntoARecovery) {
  StartTwo();
  generations_.BeginPause(SizeGoal{2, true, Layout{1, 2, 1}});
  outbox_.Take();
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 10, {10}, false}).ok());
  ASSERT_TRUE(generations_.OnPaused("b", proto::PausedReport{2, 11, {10}, false}).ok());
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u);
  EXPECT_EQ(recover[0].second.target_generation, 3u) << "a fresh number, above the pause's";
  EXPECT_EQ(recoveries_, 1);
  EXPECT_EQ(generations_.state(), proto::JobState::kRecovering);
  EXPECT_FALSE(generations_.FailureIsCurrent(1)) << "already recovering";
}

// A worker that built the new generation (its shards and its only commit are in the new layout)
// before another failed: the recovery counts it as holding nothing of the committed layout, so
// the other survivor's replica is the source and it does not roll back to a commit it lacks.
TEST_F(GenerationManagerTest, AWorkerThatBuiltAFailedGenerationHoldsNoStateInTheRecovery) {
  StartTwo();
  generations_.BeginPause(SizeGoal{2, true, Layout{1, 2, 1}});
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 10, {10}, false}).ok());
  ASSERT_TRUE(generations_.OnPaused("b", proto::PausedReport{2, 10, {10}, false}).ok());
  ASSERT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 2u);
  ASSERT_TRUE(generations_.OnReady("a", proto::GenerationReady{2, 0, 0, 0}).ok());
  generations_.StartRecovery({}, "a collective failed on b");
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u);
  const uint64_t target = recover[0].second.target_generation;
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{target, 10, {10}, true}).ok());
  ASSERT_TRUE(generations_.OnPaused("b", proto::PausedReport{target, 10, {10}, true}).ok());
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 2u);
  const proto::NewGeneration ng = MergedOf(built);
  EXPECT_EQ(ng.reason, proto::GenerationReason::kFailure);
  EXPECT_EQ(ng.restore_step, 10);
  EXPECT_EQ(ng.prev_layout, (Layout{2, 1, 1})) << "the committed layout";
  ASSERT_EQ(ng.prev_members.size(), 2u);
  for (const auto& m : ng.prev_members) {
    EXPECT_EQ(m.has_state, m.worker_id == "b") << m.worker_id;
  }
  for (const std::string id : {"a", "b"}) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{target, 0, 0, 0}).ok());
  }
  EXPECT_EQ(commits_, (std::vector<uint64_t>{1, target}));
}

TEST_F(GenerationManagerTest, SilentSurvivorsAreLostAtTheRecoverDeadline) {
  StartTwo();
  EXPECT_FALSE(generations_.FailureIsCurrent(0));
  EXPECT_TRUE(generations_.FailureIsCurrent(1));
  generations_.StartRecovery({}, "a collective failed");
  outbox_.Take();
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 7, {7}, true}).ok());
  clock_.Advance(Duration(1499));
  generations_.Tick();
  EXPECT_EQ(generations_.state(), proto::JobState::kRecovering);
  clock_.Advance(Duration(1));
  generations_.Tick();  // b is lost; a alone builds generation 2 from its commit at step 7
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLost);
  auto built = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(built.size(), 1u);
  EXPECT_EQ(built[0].first, "id-a");
  EXPECT_EQ(built[0].second.restore_step, 7);
  EXPECT_EQ(built[0].second.reason, proto::GenerationReason::kFailure);
}

TEST_F(GenerationManagerTest, LosingEveryMemberFailsTheJob) {
  StartTwo();
  generations_.LoseWorkers({"a", "b"}, "missed heartbeat deadline");
  auto shutdowns = Sent<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(shutdowns.size(), 2u);
  EXPECT_EQ(shutdowns[0].second.exit_code, 1);
  EXPECT_EQ(shutdowns[0].second.reason, "declared lost: missed heartbeat deadline");
  EXPECT_EQ(generations_.state(), proto::JobState::kFailed);
  EXPECT_TRUE(generations_.job_over());
  EXPECT_EQ(ended_, "the job failed: every member is lost (missed heartbeat deadline)");
}

TEST_F(GenerationManagerTest, TheJobFinishesWhenEveryMemberHasFinished) {
  StartTwo();
  membership_.SetState("a", WorkerState::kFinished);
  generations_.MaybeFinishJob();
  EXPECT_EQ(generations_.state(), proto::JobState::kRunning);
  membership_.SetState("b", WorkerState::kFinished);
  generations_.MaybeFinishJob();
  EXPECT_EQ(generations_.state(), proto::JobState::kFinished);
  EXPECT_EQ(ended_, "the job finished");
}

}  // namespace
}  // namespace elastra::coordinator
