// A CoordinatorCore that takes a job back from its journal (mid-run and mid-reconfiguration),
// driven with a FakeClock; and a journal that cannot be written, which does not stop the job.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "protocol/codec.h"
#include "common/mesh_peers.h"
#include "coordinator/coordinator_core.h"
#include "journal/journal.h"
#include "tests/journal/test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;
using journal::JournalTest;

class RestartTest : public JournalTest {
 protected:
  std::unique_ptr<CoordinatorCore> NewCore(int initial_workers, Env* env = Env::Default(),
                                           int spares = 0) {
    CoordinatorOptions o;
    o.env = env;
    o.job = "job";
    o.initial_workers = initial_workers;
    o.max_workers = 8;
    o.spares = spares;
    o.heartbeat_interval = Duration(200);
    o.heartbeat_timeout = Duration(1500);
    o.clock = &clock_;
    o.state_dir = dir_;
    auto core = std::make_unique<CoordinatorCore>(o);
    EXPECT_TRUE(core->journal_status().ok()) << core->journal_status();
    return core;
  }

  template <class P>
  std::vector<proto::Envelope> Send(CoordinatorCore& core, const std::string& sender,
                                    proto::Role role, T type, const P& payload,
                                    uint64_t rid = 0, const std::string& identity_suffix = "") {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = sender;
    e.request_id = rid;
    e.payload = proto::EncodePayload(payload);
    return Decode(core.Handle("id-" + sender + identity_suffix, role, e));
  }
  static std::vector<proto::Envelope> Decode(const std::vector<Outgoing>& out) {
    std::vector<proto::Envelope> v;
    for (const auto& o : out) {
      auto e = proto::DecodeEnvelope(o.frame);
      if (e.ok()) v.push_back(*e);
    }
    return v;
  }
  static std::vector<proto::Envelope> OfType(const std::vector<proto::Envelope>& v, T type) {
    std::vector<proto::Envelope> out;
    for (const auto& e : v) {
      if (e.type == type) out.push_back(e);
    }
    return out;
  }

  // Two workers join and generation 1 commits.
  void StartTwo(CoordinatorCore& core) {
    for (const std::string id : {"w0", "w1"}) {
      Send(core, id, proto::Role::kWorker, T::kJoin, proto::JoinRequest{id, "host-" + id, 0, 100}, 1);
    }
    for (const std::string id : {"w0", "w1"}) {
      Send(core, id, proto::Role::kWorker, T::kGenerationReady, proto::GenerationReady{1, 1.0, 0.0, 0});
    }
    ASSERT_EQ(core.state(), proto::JobState::kRunning);
    ASSERT_EQ(core.generation(), 1u);
  }

  FakeClock clock_;
};

// A journal that cannot be written (a full disk) is logged; the job itself goes on.
TEST_F(RestartTest, AJournalThatCannotBeWrittenDoesNotStopTheJob) {
  FaultInjectionEnv env(Env::Default());
  auto core = NewCore(2, &env);
  env.SetDiskSpace(0);
  StartTwo(*core);
  EXPECT_EQ(env.writes(), 5) << "the job record, then join, join, begin, commit: each tried once";
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, 1u);  // the job record written before the disk filled
  // A resize still runs: the workers are asked to pause.
  auto paused = Send(*core, "admin", proto::Role::kAdmin, T::kResize,
                     proto::ResizeRequest{1, false, {}, false}, 2);
  EXPECT_EQ(OfType(paused, T::kPauseRequest).size(), 2u);
  EXPECT_EQ(core->state(), proto::JobState::kPausing);
}

TEST_F(RestartTest, TakesBackARunningJobAndWorkersSimplyContinue) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{5});
  }
  auto core = NewCore(2);  // the restart: a new core on the same state directory
  EXPECT_TRUE(core->restored());
  EXPECT_EQ(core->generation(), 1u);
  EXPECT_EQ(core->state(), proto::JobState::kRunning);
  EXPECT_EQ(core->membership().Members(), (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(core->membership().Find("w1")->host, "host-w1");
  ASSERT_EQ(core->history().size(), 1u);
  EXPECT_EQ(core->layout().dp, 2);
  // Heartbeats refresh the deadlines and are acknowledged; no recovery, no other message.
  clock_.Advance(Duration(1000));
  for (const std::string id : {"w0", "w1"}) {
    auto out = Send(*core, id, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{7});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, T::kHeartbeatAck);
    EXPECT_EQ(proto::DecodePayload<proto::HeartbeatAck>(out[0].payload)->generation, 1u);
  }
  clock_.Advance(Duration(1000));
  EXPECT_TRUE(Decode(core->Tick()).empty());
  EXPECT_EQ(core->state(), proto::JobState::kRunning);
  // A member that never comes back is lost after the heartbeat timeout, as usual.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(Duration(200));
    Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{8});
    core->Tick();
  }
  EXPECT_EQ(core->membership().Find("w1")->state, WorkerState::kLost);
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
}

TEST_F(RestartTest, ChangeInFlightRunsARecoveryRoundAndThePendingResizeContinues) {
  uint64_t pause_target = 0;
  {
    auto core = NewCore(2);
    StartTwo(*core);
    ASSERT_TRUE(core->RecordCheckpoint(10, 1, dir_ + "/ckpt/step-10").ok());
    auto out =
        Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, true}, 9);
    auto pauses = OfType(out, T::kPauseRequest);
    ASSERT_EQ(pauses.size(), 2u);
    pause_target = proto::DecodePayload<proto::PauseRequest>(pauses[0].payload)->target_generation;
  }
  auto core = NewCore(2);
  EXPECT_TRUE(core->restored());
  EXPECT_EQ(core->generation(), 1u);
  // A resize while the restart is settling is refused.
  auto refused =
      Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{2, false, {}, false}, 3);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].type, T::kError);
  // Nothing is sent before the workers are heard from (their ROUTER identities are unknown).
  EXPECT_TRUE(Decode(core->Tick()).empty());
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  EXPECT_TRUE(Decode(core->Tick()).empty());
  Send(*core, "w1", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  auto out = Decode(core->Tick());
  auto recovers = OfType(out, T::kRecoverRequest);
  ASSERT_EQ(recovers.size(), 2u);
  const uint64_t target =
      proto::DecodePayload<proto::RecoverRequest>(recovers[0].payload)->target_generation;
  EXPECT_GT(target, pause_target);  // never a number the workers may have seen
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
  // The workers answer with their commits and the recovery builds and commits.
  std::vector<proto::Envelope> gens;
  for (const std::string id : {"w0", "w1"}) {
    auto o = Send(*core, id, proto::Role::kWorker, T::kPaused, proto::PausedReport{target, 12, {10, 12}, true});
    for (auto& e : OfType(o, T::kNewGeneration)) gens.push_back(e);
  }
  ASSERT_EQ(gens.size(), 2u);
  auto ng = proto::DecodePayload<proto::NewGeneration>(gens[0].payload);
  EXPECT_EQ(ng->restore_step, 12);
  EXPECT_EQ(ng->layout.world(), 2);
  ASSERT_EQ(ng->members.size(), 1u);  // its own entry: the state is replicated, nothing moves
  EXPECT_EQ(ng->members[0].worker_id, "w0");
  // The committed checkpoint survived the restart: the generation names it for a disk fallback.
  EXPECT_EQ(ng->checkpoint_dir, dir_ + "/ckpt/step-10");
  ASSERT_EQ(core->checkpoints().size(), 1u);
  EXPECT_EQ(core->checkpoints()[0].step, 10);
  std::vector<proto::Envelope> after;
  for (const std::string id : {"w0", "w1"}) {
    after = Send(*core, id, proto::Role::kWorker, T::kGenerationReady, proto::GenerationReady{target, 1, 0, 0});
  }
  EXPECT_EQ(core->generation(), target);
  // The journaled resize (to 1 worker) goes on: a pause for the next generation.
  auto pauses = OfType(after, T::kPauseRequest);
  EXPECT_EQ(pauses.size(), 2u);
  EXPECT_EQ(core->state(), proto::JobState::kPausing);
}

// Where each worker serves its rendezvous records survives a restart (its join record says so):
// the recovery's NewGeneration still gives each member its build peer's endpoint.
TEST_F(RestartTest, WorkersRendezvousEndpointsSurviveARestart) {
  const std::string e0 = PackEndpoint(htonl(0x7f000001), htons(4000));
  const std::string e1 = PackEndpoint(htonl(0x7f000002), htons(4001));
  uint64_t pause_target = 0;
  {
    auto core = NewCore(2);
    for (const auto& [id, e] : {std::pair<std::string, std::string>{"w0", e0}, {"w1", e1}}) {
      proto::JoinRequest join{id, "host-" + id, 0, 100};
      join.rendezvous = e;
      auto out = Send(*core, id, proto::Role::kWorker, T::kJoin, join, 1);
      if (id == "w1") {
        auto gens = OfType(out, T::kNewGeneration);
        ASSERT_EQ(gens.size(), 2u);
        for (const auto& g : gens) {
          auto ng = proto::DecodePayload<proto::NewGeneration>(g.payload);
          ASSERT_TRUE(ng.ok());
          EXPECT_TRUE(ng->build_peers == e0 || ng->build_peers == e1);
        }
      }
    }
    for (const std::string id : {"w0", "w1"}) {
      Send(*core, id, proto::Role::kWorker, T::kGenerationReady, proto::GenerationReady{1, 1.0, 0.0, 0});
    }
    ASSERT_EQ(core->generation(), 1u);
    auto out =
        Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, true}, 9);
    ASSERT_EQ(OfType(out, T::kPauseRequest).size(), 2u);
    pause_target = 2;
  }
  auto core = NewCore(2);
  ASSERT_TRUE(core->restored());
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  Send(*core, "w1", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  auto recovers = OfType(Decode(core->Tick()), T::kRecoverRequest);
  ASSERT_EQ(recovers.size(), 2u);
  const uint64_t target =
      proto::DecodePayload<proto::RecoverRequest>(recovers[0].payload)->target_generation;
  EXPECT_GT(target, pause_target);
  std::map<std::string, std::string> build_peers;
  for (const std::string id : {"w0", "w1"}) {
    auto o = Send(*core, id, proto::Role::kWorker, T::kPaused, proto::PausedReport{target, 12, {10, 12}, true});
    for (auto& e : OfType(o, T::kNewGeneration)) {
      auto ng = proto::DecodePayload<proto::NewGeneration>(e.payload);
      ASSERT_TRUE(ng.ok());
      ASSERT_EQ(ng->layout.world(), 2);
      build_peers[ng->members.front().worker_id] = ng->build_peers;
    }
  }
  ASSERT_EQ(build_peers.size(), 2u);
  // Each member's one build peer is the other.
  EXPECT_EQ(build_peers["w0"], e1);
  EXPECT_EQ(build_peers["w1"], e0);
}

// A worker that built the generation in flight holds its commits in that generation's layout. A
// restarted coordinator no longer knows who reported it ready; it learns where each survivor's
// commits are from the survivor's report, and plans the recovery from the others.
TEST_F(RestartTest, AfterARestartCommitsOfTheGenerationInFlightHoldNothingCommitted) {
  const Layout committed{2, 1, 1}, next{1, 2, 1};
  // Two layers, one tensor each: at pp=2 each worker holds one of them, at dp=2 both.
  proto::JoinRequest join{"", "", 0, 100, StateSpec{2, {}}, ""};
  join.state.tensors = {TensorSpec{"l0", {8}, 4, ShardingRule{-1, 0, false}},
                        TensorSpec{"l1", {8}, 4, ShardingRule{-1, 1, false}}};
  int w0_new_rank = -1;
  {
    auto core = NewCore(2);
    for (const std::string id : {"w0", "w1"}) {
      join.worker_id = id;
      join.host = "host-" + id;
      Send(*core, id, proto::Role::kWorker, T::kJoin, join, 1);
    }
    for (const std::string id : {"w0", "w1"}) {
      Send(*core, id, proto::Role::kWorker, T::kGenerationReady,
           proto::GenerationReady{1, 1.0, 0.0, 0});
    }
    ASSERT_EQ(core->generation(), 1u);
    auto out = Send(*core, "admin", proto::Role::kAdmin, T::kResize,
                    proto::ResizeRequest{2, true, next, false}, 9);
    auto pauses = OfType(out, T::kPauseRequest);
    ASSERT_EQ(pauses.size(), 2u);
    const uint64_t target =
        proto::DecodePayload<proto::PauseRequest>(pauses[0].payload)->target_generation;
    std::vector<proto::Envelope> gens;
    for (int r = 0; r < 2; ++r) {
      const std::string id = "w" + std::to_string(r);
      auto o = Send(*core, id, proto::Role::kWorker, T::kPaused,
                    proto::PausedReport{target, 12, {12}, false, committed, r});
      for (auto& e : OfType(o, T::kNewGeneration)) gens.push_back(e);
    }
    ASSERT_EQ(gens.size(), 2u);
    for (const auto& e : gens) {
      auto ng = proto::DecodePayload<proto::NewGeneration>(e.payload);
      ASSERT_TRUE(ng.ok());
      EXPECT_EQ(ng->layout, next);
      for (const auto& m : ng->members) {
        if (m.worker_id == "w0") w0_new_rank = m.rank;
      }
    }
    ASSERT_GE(w0_new_rank, 0);
    // w0 built it (its commits are now in the new layout) and said so; then the coordinator dies.
    Send(*core, "w0", proto::Role::kWorker, T::kGenerationReady,
         proto::GenerationReady{target, 1, 0, 0});
  }
  auto core = NewCore(2);
  ASSERT_TRUE(core->restored());
  for (const std::string id : {"w0", "w1"}) {
    Send(*core, id, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  }
  auto recovers = OfType(Decode(core->Tick()), T::kRecoverRequest);
  ASSERT_EQ(recovers.size(), 2u);
  const uint64_t target =
      proto::DecodePayload<proto::RecoverRequest>(recovers[0].payload)->target_generation;
  std::vector<proto::Envelope> gens;
  const proto::PausedReport reports[2] = {{target, 12, {12}, true, next, w0_new_rank},
                                          {target, 12, {12}, true, committed, 1}};
  for (int r = 0; r < 2; ++r) {
    auto o = Send(*core, "w" + std::to_string(r), proto::Role::kWorker, T::kPaused, reports[r]);
    for (auto& e : OfType(o, T::kNewGeneration)) gens.push_back(e);
  }
  ASSERT_EQ(gens.size(), 2u);
  for (const auto& e : gens) {
    auto ng = proto::DecodePayload<proto::NewGeneration>(e.payload);
    ASSERT_TRUE(ng.ok());
    EXPECT_EQ(ng->reason, proto::GenerationReason::kFailure);
    EXPECT_EQ(ng->prev_layout, committed);
    for (const auto& m : ng->prev_members) {
      EXPECT_EQ(m.has_state, m.worker_id == "w1") << m.worker_id << " in the message to "
                                                   << e.sender;
    }
  }
}

// A member lost right after a restart, before the survivor was heard from: the recover request
// pushed to the survivor is dropped (no identity yet), and is pushed again with its first
// message, so the survivor answers within the recover timeout instead of being declared lost.
TEST_F(RestartTest, ARecoverRequestDroppedBeforeTheSurvivorWasHeardIsSentAgain) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
  }
  auto core = NewCore(2);
  ASSERT_TRUE(core->restored());
  // w0's exit, reported by the admin (as elastra run's local agent does): a recovery begins.
  Send(*core, "admin", proto::Role::kAdmin, T::kProcessExited, proto::ProcessExited{"w0", 0, 9});
  ASSERT_EQ(core->state(), proto::JobState::kRecovering);
  // w1's first message to the new coordinator: the recover request comes with the ack.
  auto out = Send(*core, "w1", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{47}, 0,
                  "-new");
  auto recover = OfType(out, T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 1u);
  EXPECT_EQ(proto::DecodePayload<proto::RecoverRequest>(recover[0].payload)->lost,
            (std::vector<std::string>{"w0"}));
  // Sent once: the next heartbeat comes from a known identity.
  EXPECT_TRUE(OfType(Send(*core, "w1", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{47},
                          0, "-new"),
                     T::kRecoverRequest)
                  .empty());
  // Its answer ends the recovery with w1 alone.
  const uint64_t target =
      proto::DecodePayload<proto::RecoverRequest>(recover[0].payload)->target_generation;
  Send(*core, "w1", proto::Role::kWorker, T::kPaused, proto::PausedReport{target, 47, {40}, true});
  EXPECT_NE(core->membership().Find("w1")->state, WorkerState::kLost);
}

TEST_F(RestartTest, UnheardWorkersAreRecoveredAfterTheHeartbeatTimeout) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, false}, 9);
  }
  auto core = NewCore(2);
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{3}, 0, "-new");
  EXPECT_TRUE(Decode(core->Tick()).empty());
  clock_.Advance(Duration(1600));
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{3}, 0, "-new");
  auto out = Decode(core->Tick());
  // w1 missed its deadline: it is lost and w0 is asked to recover.
  EXPECT_EQ(core->membership().Find("w1")->state, WorkerState::kLost);
  EXPECT_EQ(OfType(out, T::kRecoverRequest).size(), 1u);
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
}

TEST_F(RestartTest, FinishedWorkersAndTheJobEndSurviveARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "w0", proto::Role::kWorker, T::kLeave,
         proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 4);
  }
  {
    auto core = NewCore(2);
    EXPECT_EQ(core->membership().Find("w0")->state, WorkerState::kFinished);
    EXPECT_EQ(core->state(), proto::JobState::kRunning);
    Send(*core, "w1", proto::Role::kWorker, T::kLeave,
         proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 4);
    EXPECT_EQ(core->state(), proto::JobState::kFinished);
  }
  auto core = NewCore(2);
  EXPECT_EQ(core->state(), proto::JobState::kFinished);
  // An agent registering after the restart learns that the job is over.
  auto out = Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 4}, 2);
  auto shutdown = OfType(out, T::kShutdown);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(proto::DecodePayload<proto::Shutdown>(shutdown[0].payload)->exit_code, 0);
}

TEST_F(RestartTest, WorkerIdsAreNeverReusedAfterARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    auto reg = Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 8}, 2);
    auto out =
        Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{3, false, {}, false}, 9);
    (void)reg;
    (void)out;
  }
  auto core = NewCore(2);
  // After the restart, the resize to 3 continues and asks the agent for a fresh id (not w2).
  Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 8}, 2);
  for (const std::string id : {"w0", "w1"}) {
    Send(*core, id, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{1}, 0, "-new");
  }
  auto out = Decode(core->Tick());
  auto spawns = OfType(out, T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  auto req = proto::DecodePayload<proto::SpawnRequest>(spawns[0].payload);
  ASSERT_EQ(req->worker_ids.size(), 1u);
  EXPECT_EQ(req->worker_ids[0], "w3");
}

TEST_F(RestartTest, TheTargetSurvivesARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, false},
         9);
    EXPECT_EQ(core->target_workers(), 1);
  }
  auto core = NewCore(2);
  EXPECT_EQ(core->target_workers(), 1);
}

// The spares the job started with, then those a resize named, are the restarted coordinator's
// (elastra run restarts its coordinator with --restart alone).
TEST_F(RestartTest, TheSparesSurviveARestart) {
  {
    auto core = NewCore(2, Env::Default(), /*spares=*/1);
    StartTwo(*core);
  }
  {
    auto core = NewCore(2);
    EXPECT_EQ(core->spares_target(), 1) << "the job record's";
    proto::ResizeRequest only_spares;
    only_spares.spares = 3;
    Send(*core, "admin", proto::Role::kAdmin, T::kResize, only_spares, 9);
    EXPECT_EQ(core->spares_target(), 3);
  }
  auto core = NewCore(2);
  EXPECT_EQ(core->spares_target(), 3) << "the resize's";
  EXPECT_EQ(core->target_workers(), 2);
}

TEST_F(RestartTest, AJournalOfAnotherJobIsRefused) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
  }
  CoordinatorOptions o;
  o.job = "other";
  o.clock = &clock_;
  o.state_dir = dir_;
  CoordinatorCore core(o);
  EXPECT_EQ(core.journal_status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace elastra::coordinator
