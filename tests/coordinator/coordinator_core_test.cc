// The coordinator's state machine, driven message by message with a FakeClock: no sockets, no
// sleeps. Hosts, agents, drains and the job's end: coordinator_core_hosts_test.cc; the key-value
// store, bad input and the status: coordinator_core_requests_test.cc.
#include "coordinator/coordinator_core.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "protocol/status_json.h"
#include "tests/coordinator/core_test_fixture.h"

namespace elastra::coordinator {
namespace {

using testing::CoreTest;
using testing::Sent;
using T = proto::MessageType;

TEST_F(CoreTest, FirstGenerationFormsWhenInitialWorkersJoined) {
  Make(3);
  auto r = Join("a");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].envelope.type, T::kJoinReply);
  EXPECT_EQ(r[0].identity, "id-a");
  auto jr = Payload<proto::JoinReply>(r[0]);
  EXPECT_EQ(jr.worker_id, "a");
  EXPECT_EQ(jr.generation, 0u);
  EXPECT_EQ(jr.heartbeat_interval_ms, 200);
  EXPECT_EQ(jr.heartbeat_timeout_ms, 1500);
  EXPECT_EQ(r[0].envelope.request_id, rid_);
  EXPECT_TRUE(OfType(Join("b"), T::kNewGeneration).empty());
  EXPECT_EQ(core_->state(), proto::JobState::kForming);

  auto gens = OfType(Join("c"), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 3u);
  const std::vector<std::string> order = {"a", "b", "c"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(gens[i].identity, "id-" + order[i]);
    EXPECT_EQ(gens[i].envelope.generation, 1u);
    EXPECT_EQ(gens[i].envelope.request_id, 0u);
    auto mine = Payload<proto::NewGeneration>(gens[i]);
    EXPECT_EQ(mine.generation, 1u);
    ASSERT_FALSE(mine.members.empty());
    EXPECT_EQ(mine.members[0].worker_id, order[i]) << "its own entry";
    auto g = MergedOf(gens);
    EXPECT_EQ(g.layout, (Layout{3, 1, 1}));
    ASSERT_EQ(g.members.size(), 3u);
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(g.members[rank].worker_id, order[rank]);
      EXPECT_EQ(g.members[rank].coords, CoordinatesOf(g.layout, rank));
      EXPECT_EQ(g.members[rank].has_state, rank == 0);
      EXPECT_EQ(g.members[rank].host, "host-" + order[rank]);
    }
    EXPECT_EQ(g.restore_step, 0);
    EXPECT_EQ(g.source_rank, 0);
    EXPECT_EQ(g.kv_prefix, "g1/");
    EXPECT_EQ(g.reason, proto::GenerationReason::kStart);
    EXPECT_FALSE(g.leave);
  }
  Ready("a", 1);
  Ready("b", 1);
  EXPECT_EQ(core_->generation(), 0u);
  Ready("c", 1);
  EXPECT_EQ(core_->generation(), 1u);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  auto s = JsonStatus();
  EXPECT_EQ(s["history"].size(), 1u);
  EXPECT_EQ(s["history"][0]["reason"], "start");
  EXPECT_EQ(s["layout"]["dp"], 3);
}

TEST_F(CoreTest, JoinOfALiveMemberIdIsRefused) {
  Start({"a"});
  auto r = Join("a");
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(ErrorOf(r[0]).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r[0].envelope.request_id, rid_);
}

TEST_F(CoreTest, ResizeIsRefusedClearlyAndChangesNothing) {
  Make(2, 8);
  auto early = Admin(T::kResize, proto::ResizeRequest{2, false, {}, false});
  EXPECT_EQ(ErrorOf(early[0]).code(), StatusCode::kFailedPrecondition);
  // The workers' state: two layers, a [6, 4] tensor split over TP along dim 0.
  StateSpec state;
  state.num_layers = 2;
  state.tensors.push_back(TensorSpec{"w", {6, 4}, 4, ShardingRule{0, 1, false}});
  Join("a", state);
  Join("b", state);
  Ready("a", 1);
  Ready("b", 1);
  auto by_worker = Worker("a", T::kResize, proto::ResizeRequest{3, false, {}, false}, 5);
  EXPECT_EQ(ErrorOf(by_worker[0]).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(by_worker[0].envelope.request_id, 5u);
  EXPECT_EQ(ErrorOf(Admin(T::kResize, proto::ResizeRequest{0, false, {}, false})[0]).code(),
            StatusCode::kInvalidArgument);
  auto too_many = Admin(T::kResize, proto::ResizeRequest{9, false, {}, false});
  EXPECT_EQ(ErrorOf(too_many[0]).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ErrorOf(too_many[0]).message().find("max_workers"), std::string::npos);
  EXPECT_EQ(
      ErrorOf(Admin(T::kResize, proto::ResizeRequest{4, true, Layout{2, 1, 1}, false})[0]).code(),
      StatusCode::kInvalidArgument);
  // Three pipeline stages for two layers, eight TP ranks for six rows: the state does not fit.
  auto stages = Admin(T::kResize, proto::ResizeRequest{3, true, Layout{1, 3, 1}, false});
  EXPECT_EQ(ErrorOf(stages[0]).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ErrorOf(stages[0]).message().find("does not fit the job's state"), std::string::npos);
  auto wide = Admin(T::kResize, proto::ResizeRequest{8, true, Layout{1, 1, 8}, false});
  EXPECT_EQ(ErrorOf(wide[0]).code(), StatusCode::kInvalidArgument);
  // Same size: done at once.
  auto same = Admin(T::kResize, proto::ResizeRequest{2, false, {}, true}, 77);
  ASSERT_EQ(same.size(), 1u);
  auto done = Payload<proto::ResizeReply>(same[0]);
  EXPECT_EQ(done.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(done.generation, 1u);
  EXPECT_EQ(same[0].envelope.request_id, 77u);
  EXPECT_EQ(core_->generation(), 1u);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  // A layout the state fits is taken, also at the same worker count.
  auto two_stages = Admin(T::kResize, proto::ResizeRequest{2, true, Layout{1, 2, 1}, false});
  EXPECT_EQ(Payload<proto::ResizeReply>(two_stages[0]).phase, proto::ResizePhase::kAccepted);
  EXPECT_EQ(core_->state(), proto::JobState::kPausing);
}

TEST_F(CoreTest, GrowWithAgentPausesBuildsAndReportsDone) {
  Start({"a", "b"});
  ASSERT_EQ(Admin(T::kAgentRegister, proto::AgentRegister{"node", 8}, 3)[0].envelope.type, T::kAck);
  auto accepted = Admin(T::kResize, proto::ResizeRequest{4, false, {}, true}, 9);
  auto replies = OfType(accepted, T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(Payload<proto::ResizeReply>(replies[0]).phase, proto::ResizePhase::kAccepted);
  auto spawn = OfType(accepted, T::kSpawnRequest);
  ASSERT_EQ(spawn.size(), 1u);
  EXPECT_EQ(spawn[0].identity, "id-admin");
  auto ids = Payload<proto::SpawnRequest>(spawn[0]).worker_ids;
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_NE(ids[0], ids[1]);
  // A second resize while this one runs is refused: retry once it is done.
  EXPECT_EQ(ErrorOf(Admin(T::kResize, proto::ResizeRequest{3, false, {}, false}, 10)[0]).code(),
            StatusCode::kBusy);

  EXPECT_TRUE(OfType(Join(ids[0]), T::kPauseRequest).empty());
  clock_.Advance(Duration(100));
  auto pauses = OfType(Join(ids[1]), T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 2u);
  EXPECT_EQ(core_->state(), proto::JobState::kPausing);
  for (const auto& p : pauses) {
    EXPECT_EQ(p.envelope.generation, 1u);
    EXPECT_EQ(Payload<proto::PauseRequest>(p).target_generation, 2u);
    EXPECT_EQ(Payload<proto::PauseRequest>(p).reason, proto::GenerationReason::kResize);
  }
  clock_.Advance(Duration(10));
  PausedMsg("a", 2, 7, {6, 7}, false);
  clock_.Advance(Duration(20));
  auto gens = OfType(PausedMsg("b", 2, 7, {6, 7}, false), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 4u);
  EXPECT_EQ(core_->state(), proto::JobState::kBuilding);
  auto g = MergedOf(gens);
  EXPECT_EQ(g.generation, 2u);
  EXPECT_EQ(g.layout, (Layout{4, 1, 1}));
  ASSERT_EQ(g.members.size(), 4u);
  EXPECT_EQ(g.members[0].worker_id, "a");
  EXPECT_EQ(g.members[1].worker_id, "b");
  EXPECT_EQ(g.members[2].worker_id, ids[0]);
  EXPECT_EQ(g.members[3].worker_id, ids[1]);
  EXPECT_TRUE(g.members[1].has_state);
  EXPECT_FALSE(g.members[2].has_state);
  EXPECT_EQ(g.restore_step, 7);
  EXPECT_EQ(g.kv_prefix, "g2/");
  EXPECT_EQ(g.reason, proto::GenerationReason::kResize);

  clock_.Advance(Duration(40));
  Ready("a", 2, 3, 4);
  Ready("b", 2, 5, 1);
  Ready(ids[0], 2, 1, 9);
  // A duplicate or stale ready changes nothing.
  Ready("a", 1);
  EXPECT_EQ(core_->stale_messages(), 1u);
  auto last = Ready(ids[1], 2, 1, 1);
  auto done = OfType(last, T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].identity, "id-admin");
  EXPECT_EQ(done[0].envelope.request_id, 9u);
  auto reply = Payload<proto::ResizeReply>(done[0]);
  EXPECT_EQ(reply.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(reply.generation, 2u);
  EXPECT_EQ(reply.workers, 4);
  EXPECT_EQ(reply.layout, (Layout{4, 1, 1}));
  EXPECT_DOUBLE_EQ(reply.agreement_ms, 30);  // pause sent -> last paused
  EXPECT_DOUBLE_EQ(reply.downtime_ms, 60);   // first paused -> last ready
  EXPECT_DOUBLE_EQ(reply.rebuild_ms, 5);
  EXPECT_DOUBLE_EQ(reply.transfer_ms, 9);
  EXPECT_DOUBLE_EQ(reply.total_ms, 170);
  EXPECT_EQ(core_->generation(), 2u);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  auto s = JsonStatus();
  EXPECT_EQ(s["history"].size(), 2u);
  EXPECT_EQ(s["history"][1]["downtime_ms"], 60.0);
}

TEST_F(CoreTest, ShrinkTellsHighestRanksToLeave) {
  Start({"a", "b", "c"});
  auto acc = Admin(T::kResize, proto::ResizeRequest{2, false, {}, true}, 4);
  EXPECT_EQ(OfType(acc, T::kPauseRequest).size(), 3u);
  PausedMsg("a", 2, 3, {3}, false);
  PausedMsg("b", 2, 3, {3}, false);
  auto gens = OfType(PausedMsg("c", 2, 3, {3}, false), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 3u);
  for (const auto& s : gens) {
    auto g = Payload<proto::NewGeneration>(s);
    EXPECT_EQ(g.layout.dp, 2);
    EXPECT_EQ(g.leave, s.identity == "id-c") << s.identity;
  }
  Ready("a", 2);
  auto done = OfType(Ready("b", 2), T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(Payload<proto::ResizeReply>(done[0]).workers, 2);
  // The leaver's exit and silence are normal.
  Admin(T::kProcessExited, proto::ProcessExited{"c", 0, 0}, 0);
  clock_.Advance(Duration(1000));
  Beat({"a", "b"});
  clock_.Advance(Duration(1000));
  Beat({"a", "b"});
  EXPECT_TRUE(OfType(Tick(), T::kRecoverRequest).empty());
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
}

TEST_F(CoreTest, GrowWithoutWorkersFailsAfterSpawnTimeout) {
  Start({"a"});
  auto acc = Admin(T::kResize, proto::ResizeRequest{2, false, {}, true}, 6);
  EXPECT_TRUE(OfType(acc, T::kSpawnRequest).empty());  // no agent: wait for external joins
  clock_.Advance(Duration(999));
  Beat({"a"});
  EXPECT_TRUE(Tick().empty());
  clock_.Advance(Duration(1));
  auto failed = OfType(Tick(), T::kResizeReply);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].envelope.request_id, 6u);
  auto r = Payload<proto::ResizeReply>(failed[0]);
  EXPECT_EQ(r.phase, proto::ResizePhase::kFailed);
  EXPECT_NE(r.message.find("spawn_timeout"), std::string::npos);
  EXPECT_EQ(core_->generation(), 1u);
  // A new resize is accepted afterwards.
  auto again = Admin(T::kResize, proto::ResizeRequest{2, false, {}, false}, 7);
  EXPECT_EQ(Payload<proto::ResizeReply>(again[0]).phase, proto::ResizePhase::kAccepted);
}

TEST_F(CoreTest, MissedHeartbeatRecoversFromLargestCommonCommit) {
  Start({"a", "b", "c"});
  Join("s");  // a standby worker joins the recovered generation
  clock_.Advance(Duration(1000));
  Beat({"a", "b", "s"}, 8);
  EXPECT_TRUE(Tick().empty());
  clock_.Advance(Duration(501));
  auto tick = Tick();
  auto rec = OfType(tick, T::kRecoverRequest);
  ASSERT_EQ(rec.size(), 2u);
  EXPECT_EQ(core_->state(), proto::JobState::kRecovering);
  // The silent worker, should it be alive after all, is told to exit.
  auto told = OfType(tick, T::kShutdown);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].identity, "id-c");
  EXPECT_EQ(Payload<proto::Shutdown>(told[0]).exit_code, 1);
  auto rr = Payload<proto::RecoverRequest>(rec[0]);
  EXPECT_EQ(rr.target_generation, 2u);
  EXPECT_EQ(rr.lost, (std::vector<std::string>{"c"}));
  PausedMsg("b", 2, 9, {6, 8}, true);
  auto gens = OfType(PausedMsg("a", 2, 9, {4, 6, 8, 9}, true), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 3u);
  auto g = MergedOf(gens);
  EXPECT_EQ(g.reason, proto::GenerationReason::kFailure);
  EXPECT_EQ(g.restore_step, 8);
  EXPECT_EQ(g.layout.dp, 3);
  EXPECT_EQ(g.members[0].worker_id, "a");
  EXPECT_EQ(g.members[1].worker_id, "b");
  EXPECT_EQ(g.members[2].worker_id, "s");
  EXPECT_FALSE(g.members[2].has_state);
  EXPECT_EQ(g.source_rank, 0);
  Ready("a", 2);
  Ready("b", 2);
  Ready("s", 2);
  EXPECT_EQ(core_->generation(), 2u);
  auto s = JsonStatus();
  EXPECT_EQ(s["history"][1]["reason"], "failure");
  bool saw_lost = false;
  for (const auto& w : s["workers"]) {
    if (w["id"] == "c") saw_lost = w["state"] == "lost";
  }
  EXPECT_TRUE(saw_lost);
}

TEST_F(CoreTest, SurvivorsThatDoNotAnswerAreLostAtTheRecoverDeadline) {
  Start({"a", "b", "c"});
  Admin(T::kProcessExited, proto::ProcessExited{"c", 0, 9}, 0);
  EXPECT_EQ(core_->state(), proto::JobState::kRecovering);
  PausedMsg("a", 2, 5, {5}, true);
  clock_.Advance(Duration(1499));
  Beat({"a"});
  EXPECT_TRUE(OfType(Tick(), T::kNewGeneration).empty());
  clock_.Advance(Duration(1));
  auto gens = OfType(Tick(), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 1u);
  auto g = MergedOf(gens);
  EXPECT_EQ(g.layout.dp, 1);
  EXPECT_EQ(g.members[0].worker_id, "a");
}

TEST_F(CoreTest, NoCommonCommitFailsTheJob) {
  Start({"a", "b", "c"});
  Admin(T::kAgentRegister, proto::AgentRegister{"node", 4}, 2);
  Admin(T::kProcessExited, proto::ProcessExited{"c", 1, 0}, 0);
  PausedMsg("a", 2, 5, {4}, true);
  auto out = PausedMsg("b", 2, 5, {5}, true);
  EXPECT_EQ(core_->state(), proto::JobState::kFailed);
  auto shutdowns = OfType(out, T::kShutdown);
  ASSERT_FALSE(shutdowns.empty());
  bool agent_told = false;
  for (const auto& s : shutdowns) {
    EXPECT_EQ(Payload<proto::Shutdown>(s).exit_code, 1);
    agent_told |= s.identity == "id-admin";
  }
  EXPECT_TRUE(agent_told);
}

TEST_F(CoreTest, FailureDuringPauseAbortsAndTheResizeStillCompletes) {
  Start({"a", "b"});
  Join("s1");
  Join("s2");
  Admin(T::kResize, proto::ResizeRequest{3, false, {}, true}, 11);
  EXPECT_EQ(core_->state(), proto::JobState::kPausing);
  PausedMsg("a", 2, 4, {4}, false);
  auto rec =
      OfType(Admin(T::kProcessExited, proto::ProcessExited{"b", 0, 9}, 0), T::kRecoverRequest);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].identity, "id-a");
  EXPECT_EQ(Payload<proto::RecoverRequest>(rec[0]).target_generation, 3u);  // fresh number
  // A report for the aborted target is stale.
  PausedMsg("a", 2, 4, {4}, false);
  EXPECT_EQ(core_->stale_messages(), 1u);
  auto gens = OfType(PausedMsg("a", 3, 4, {4}, true), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 3u);  // a + both standby
  EXPECT_EQ(Payload<proto::NewGeneration>(gens[0]).generation, 3u);
  Ready("a", 3);
  Ready("s1", 3);
  auto done = OfType(Ready("s2", 3), T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].envelope.request_id, 11u);
  EXPECT_EQ(Payload<proto::ResizeReply>(done[0]).phase, proto::ResizePhase::kDone);
  EXPECT_EQ(Payload<proto::ResizeReply>(done[0]).workers, 3);
}

TEST_F(CoreTest, FailureDuringBuildRecoversWithFreshGeneration) {
  Start({"a", "b"});
  Join("s");
  Admin(T::kResize, proto::ResizeRequest{3, false, {}, true}, 12);
  PausedMsg("a", 2, 4, {4}, false);
  PausedMsg("b", 2, 4, {4}, false);
  EXPECT_EQ(core_->state(), proto::JobState::kBuilding);
  // A stale failure report (old generation) is dropped; a current one triggers recovery.
  Worker("a", T::kFailureReport, proto::FailureReport{1, 2, "old"});
  EXPECT_EQ(core_->stale_messages(), 1u);
  EXPECT_EQ(core_->state(), proto::JobState::kBuilding);
  auto rec = OfType(Worker("a", T::kFailureReport, proto::FailureReport{2, 2, "peer lost"}),
                    T::kRecoverRequest);
  ASSERT_EQ(rec.size(), 3u);  // every member; nobody known dead yet
  EXPECT_TRUE(Payload<proto::RecoverRequest>(rec[0]).lost.empty());
  EXPECT_EQ(Payload<proto::RecoverRequest>(rec[0]).target_generation, 3u);
  PausedMsg("a", 3, 4, {4}, true);
  PausedMsg("b", 3, 4, {4}, true);
  auto gens = OfType(PausedMsg("s", 3, -1, {}, true), T::kNewGeneration);
  ASSERT_EQ(gens.size(), 3u);
  auto g = MergedOf(gens);
  EXPECT_EQ(g.restore_step, 4);
  EXPECT_FALSE(g.members[2].has_state);
  Ready("a", 3);
  Ready("b", 3);
  auto done = OfType(Ready("s", 3), T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(Payload<proto::ResizeReply>(done[0]).phase, proto::ResizePhase::kDone);
}

TEST_F(CoreTest, DifferentPauseStepsGoToRecovery) {
  Start({"a", "b"});
  Join("s");
  Admin(T::kResize, proto::ResizeRequest{3, false, {}, false}, 12);
  PausedMsg("a", 2, 4, {4}, false);
  auto rec = OfType(PausedMsg("b", 2, 5, {4, 5}, false), T::kRecoverRequest);
  EXPECT_EQ(rec.size(), 2u);  // members only; the standby worker joins the next generation
  EXPECT_EQ(core_->state(), proto::JobState::kRecovering);
}

TEST_F(CoreTest, EveryMemberFinishingEndsTheJob) {
  Start({"a", "b"});
  Admin(T::kAgentRegister, proto::AgentRegister{"node", 4}, 2);
  auto ack =
      Worker("a", T::kLeave, proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 3);
  ASSERT_EQ(ack[0].envelope.type, T::kAck);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  EXPECT_EQ(ErrorOf(Admin(T::kResize, proto::ResizeRequest{1, false, {}, false}, 9)[0]).code(),
            StatusCode::kFailedPrecondition);
  // A finished worker's silence is not a failure.
  clock_.Advance(Duration(1000));
  Beat({"b"});
  clock_.Advance(Duration(1000));
  Beat({"b"});
  EXPECT_TRUE(OfType(Tick(), T::kRecoverRequest).empty());
  auto out =
      Worker("b", T::kLeave, proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 4);
  EXPECT_EQ(core_->state(), proto::JobState::kFinished);
  auto sd = OfType(out, T::kShutdown);
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd[0].identity, "id-admin");
  EXPECT_EQ(Payload<proto::Shutdown>(sd[0]).exit_code, 0);
}

TEST_F(CoreTest, StandbyLeaveAndStandbyLossDoNotDisturbTheJob) {
  Start({"a"});
  Join("s");
  Worker("s", T::kLeave, proto::LeaveRequest{proto::LeaveReason::kQuit, "bye"}, 3);
  EXPECT_EQ(core_->membership().Find("s"), nullptr);
  Join("t");
  clock_.Advance(Duration(1000));
  Beat({"a"});
  clock_.Advance(Duration(600));
  EXPECT_TRUE(OfType(Tick(), T::kRecoverRequest).empty());
  EXPECT_EQ(core_->membership().Find("t")->state, WorkerState::kLost);
}

// ---------------------------------------------------------------------------------------------
// Many hosts (docs/hosts.md).

}  // namespace
}  // namespace elastra::coordinator
