// Recovery of a job with model parallelism (docs/recovery.md), driven on the managers as
// generation_manager_test.cc does: a failure keeps the pipeline and tensor degrees and leaves the
// broken replica's survivors standby; a standby takes a lost rank and the layout stays; a memory
// budget rules out the layouts that do not fit; a regrow returns to the full layout.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

// A [2, 64] float64 weight per layer, split over TP by rows (so tp is 1 or 2), on 2 layers:
// 1 KiB a layer's weight, 2 KiB in all. A worker needs 2 KiB at dp, 1 KiB at tp=2 or pp=2 and
// 512 B at pp=2 x tp=2.
proto::JoinRequest WithState(const std::string& id) {
  proto::JoinRequest join{id, "n1", 0, 1};
  join.state.num_layers = 2;
  for (int l = 0; l < 2; ++l) {
    join.state.tensors.push_back(
        TensorSpec{"w" + std::to_string(l), {2, 64}, 8, ShardingRule{0, l, false}});
  }
  return join;
}

class RecoveryLayoutTest : public ManagerTest {
 protected:
  // a, b, c, d (each with `memory` bytes, on hosts `on`) form dp=2 x tp=2 and commit it as
  // generation 2.
  void FormDp2Tp2(int64_t memory = 0,
                  const std::vector<std::string>& on = {"n1", "n1", "n1", "n1"}) {
    options_.initial_workers = 4;
    layouts_.Learn(WithState("a"));
    const std::vector<std::string> ids = {"a", "b", "c", "d"};
    for (size_t i = 0; i < ids.size(); ++i) Join(ids[i], on[i], memory);
    ReadyAll(Sent<proto::NewGeneration>(T::kNewGeneration));
    generations_.BeginPause(SizeGoal{4, true, Layout{2, 1, 2}});
    for (const auto& id : generations_.members()) {
      ASSERT_TRUE(generations_.OnPaused(id, proto::PausedReport{2, 10, {10}, false}).ok());
    }
    ReadyAll(Sent<proto::NewGeneration>(T::kNewGeneration));
    ASSERT_EQ(generations_.layout(), (Layout{2, 1, 2}));
    before_ = generations_.members();
  }

  void ReadyAll(const std::vector<std::pair<std::string, proto::NewGeneration>>& sent) {
    for (const auto& [identity, g] : sent) {
      if (g.leave) continue;
      const std::string id = identity.substr(3);  // "id-<worker>"
      ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{g.generation, 0, 0, 0}).ok());
    }
  }

  // Every survivor answers the recover request holding its commit at step 10.
  std::vector<std::pair<std::string, proto::NewGeneration>> Recover(const std::string& lost) {
    generations_.LoseWorkers({lost}, "killed");
    auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
    EXPECT_FALSE(recover.empty());
    const uint64_t target = recover.empty() ? 0 : recover[0].second.target_generation;
    for (const auto& [identity, r] : recover) {
      EXPECT_TRUE(
          generations_.OnPaused(identity.substr(3), proto::PausedReport{target, 10, {10}, true})
              .ok());
    }
    return Sent<proto::NewGeneration>(T::kNewGeneration);
  }

  // a and b (4 KiB each) form dp=2; s1 (600 B) and s2 (4 KiB) join as standbys. dp=3 and dp=4
  // need 2 KiB a worker: only a, b and s2 have it.
  void FormDp2WithMixedStandbys() {
    layouts_.Learn(WithState("a"));
    Join("a", "n1", 4096);
    Join("b", "n1", 4096);
    ReadyAll(Sent<proto::NewGeneration>(T::kNewGeneration));
    ASSERT_EQ(generations_.layout(), (Layout{2, 1, 1}));
    Join("s1", "n1", 600);
    Join("s2", "n1", 4096);
  }

  // An admin asks for `workers` at `layout`, without waiting (ResizeManager::OnResize).
  void Resize(int workers, const Layout& layout) {
    proto::Envelope e;
    e.type = T::kResize;
    e.sender = "admin";
    e.request_id = 7;
    e.payload = proto::EncodePayload(proto::ResizeRequest{workers, true, layout, false});
    resizes_.OnResize("id-admin", e);
  }

  // Every member answers the pause request `pauses` holds at step 10; the generation built.
  std::vector<std::pair<std::string, proto::NewGeneration>> PauseAll(
      const std::vector<std::pair<std::string, proto::PauseRequest>>& pauses) {
    for (const auto& [identity, p] : pauses) {
      EXPECT_TRUE(generations_
                      .OnPaused(identity.substr(3),
                                proto::PausedReport{p.target_generation, 10, {10}, false})
                      .ok());
    }
    return Sent<proto::NewGeneration>(T::kNewGeneration);
  }

  std::vector<std::string> before_;  // the members of dp=2 x tp=2, by rank
};

TEST_F(RecoveryLayoutTest, AFailureKeepsTensorParallelismAndLeavesTheBrokenReplicaStandby) {
  FormDp2Tp2();
  auto built = Recover(before_[3]);  // replica 1 loses its tp rank 1
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{1, 1, 2})) << "not dp=3: tp=2 stays";
  ASSERT_EQ(g.members.size(), 2u);
  EXPECT_EQ(g.members[0].worker_id, before_[0]) << "replica 0 stays where it was";
  EXPECT_EQ(g.members[1].worker_id, before_[1]);
  std::map<std::string, proto::NewGeneration> by_worker;
  for (const auto& [identity, ng] : built) by_worker[identity.substr(3)] = ng;
  ASSERT_TRUE(by_worker.count(before_[2]));
  EXPECT_TRUE(by_worker[before_[2]].leave);
  EXPECT_TRUE(by_worker[before_[2]].standby) << "the broken replica's survivor stays, standby";
  EXPECT_FALSE(by_worker[before_[0]].leave);
  // Nothing moves: each member keeps its own shards.
  for (const auto& [id, ng] : by_worker) {
    EXPECT_TRUE(ng.move.transfers.empty()) << id << " receives or sends state";
  }
}

TEST_F(RecoveryLayoutTest, AStandbyTakesTheLostRankAndTheLayoutStays) {
  FormDp2Tp2();
  Join("s");  // a hot spare
  auto built = Recover(before_[3]);
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{2, 1, 2}));
  ASSERT_EQ(g.members.size(), 4u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(g.members[r].worker_id, before_[r]) << "rank " << r << " moved";
    EXPECT_TRUE(g.members[r].has_state);
  }
  EXPECT_EQ(g.members[3].worker_id, "s") << "the spare takes the lost rank";
  EXPECT_FALSE(g.members[3].has_state);
  for (const auto& [identity, ng] : built) EXPECT_FALSE(ng.leave) << identity;
}

// Hot spares (options.spares = 1): the standby takes the lost rank, and then the coordinator asks
// the host's agent for a replacement, which joins as a standby without a new generation. The
// agent does not heartbeat (elastra run's): spares are asked of it all the same.
TEST_F(RecoveryLayoutTest, ASpareTakesTheLostRankAndAnAgentStartsItsReplacement) {
  RegisterHost("n1", 8, /*heartbeats=*/false);
  FormDp2Tp2();
  Join("s");
  options_.spares = 1;
  resizes_.MaybeReplenishSpares();
  EXPECT_TRUE(Sent<proto::SpawnRequest>(T::kSpawnRequest).empty()) << "one spare stands";

  auto built = Recover(before_[3]);
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{2, 1, 2})) << "the layout stays";
  ASSERT_EQ(g.members.size(), 4u);
  EXPECT_EQ(g.members[3].worker_id, "s") << "the spare takes the lost rank";
  EXPECT_EQ(hosts_.Outstanding(), 0) << "no replacement before the recovery committed";
  ReadyAll(built);
  const uint64_t recovered = generations_.generation();
  ASSERT_EQ(generations_.history().back().reason, proto::GenerationReason::kFailure);

  auto spawns = Sent<proto::SpawnRequest>(T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u) << "the used spare is replaced";
  EXPECT_EQ(spawns[0].first, "id-agent-n1");
  ASSERT_EQ(spawns[0].second.worker_ids.size(), 1u);
  const std::string replacement = spawns[0].second.worker_ids[0];
  resizes_.MaybeReplenishSpares();
  EXPECT_TRUE(Sent<proto::SpawnRequest>(T::kSpawnRequest).empty()) << "one is on its way";
  EXPECT_EQ(hosts_.Outstanding(), 1);

  Join(replacement);
  EXPECT_EQ(hosts_.Outstanding(), 0);
  EXPECT_EQ(membership_.Find(replacement)->state, WorkerState::kStandby);
  EXPECT_TRUE(Sent<proto::PauseRequest>(T::kPauseRequest).empty()) << "no change for a spare";
  EXPECT_EQ(generations_.phase(), Phase::kIdle);
  EXPECT_EQ(generations_.generation(), recovered);
  EXPECT_EQ(generations_.layout(), (Layout{2, 1, 2}));
  resizes_.MaybeReplenishSpares();
  EXPECT_TRUE(Sent<proto::SpawnRequest>(T::kSpawnRequest).empty()) << "one spare stands again";
}

// A replacement spare goes to the host the lost worker lived on when a slot is free there (its
// tensor-parallel group stays on one host), not to the fullest host: n1 holds a and b, n2 holds c,
// d and the spare s; b is lost and s takes its rank.
TEST_F(RecoveryLayoutTest, AReplacementGoesWhereTheLostWorkerWas) {
  RegisterHost("n1", 2, /*heartbeats=*/false);  // no first workers asked of them
  RegisterHost("n2", 8, /*heartbeats=*/false);
  FormDp2Tp2(0, {"n1", "n1", "n2", "n2"});
  ASSERT_EQ(membership_.Find(before_[0])->host, membership_.Find(before_[1])->host)
      << "a tp group on one host";
  Join("s", "n2");
  options_.spares = 1;
  const std::string lost = membership_.Find(before_[0])->host == "n1" ? before_[1] : before_[3];
  ReadyAll(Recover(lost));
  ASSERT_EQ(generations_.history().back().reason, proto::GenerationReason::kFailure);
  EXPECT_EQ(generations_.layout(), (Layout{2, 1, 2}));
  EXPECT_EQ(membership_.Find("s")->state, WorkerState::kMember);
  auto spawns = Sent<proto::SpawnRequest>(T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].first, "id-agent-n1") << "the lost worker's host, not the fullest (n2)";
  EXPECT_EQ(spawns[0].second.worker_ids.size(), 1u);
}

// With no slot free on the lost worker's host (nor on the host of the group the spare joined:
// the same), the replacement goes where it went before: the fullest host with a free slot.
TEST_F(RecoveryLayoutTest, AReplacementGoesToTheFullestHostWhenTheLostWorkersHostIsFull) {
  RegisterHost("n1", 2, /*heartbeats=*/false);  // no first workers asked of them
  RegisterHost("n2", 8, /*heartbeats=*/false);
  FormDp2Tp2(0, {"n1", "n1", "n2", "n2"});
  Join("s", "n2");
  options_.spares = 1;
  const std::string lost = membership_.Find(before_[0])->host == "n1" ? before_[1] : before_[3];
  auto built = Recover(lost);
  // Its agent now runs one worker: the lost one's slot is gone.
  RegisterHost("n1", 1, /*heartbeats=*/false);
  ReadyAll(built);
  ASSERT_EQ(generations_.history().back().reason, proto::GenerationReason::kFailure);
  auto spawns = Sent<proto::SpawnRequest>(T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].first, "id-agent-n2");
  EXPECT_EQ(spawns[0].second.worker_ids.size(), 1u);
}

// With spares kept, a recovery takes standby workers only up to the target size: in a job of
// pure data parallelism that loses one worker with two standing, one takes the rank and the
// other stays standby (not dp=5).
TEST_F(RecoveryLayoutTest, ARecoveryLeavesTheSparesBeyondTheTargetStanding) {
  options_.initial_workers = 4;
  for (const std::string id : {"a", "b", "c", "d"}) Join(id);
  ReadyAll(Sent<proto::NewGeneration>(T::kNewGeneration));
  ASSERT_EQ(generations_.layout(), (Layout{4, 1, 1}));
  Join("s1");
  Join("s2");
  options_.spares = 2;
  auto built = Recover("b");
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{4, 1, 1}));
  ReadyAll(built);
  EXPECT_EQ(membership_.StandbyCount(), 1u);
  EXPECT_EQ(membership_.Find("s2")->state, WorkerState::kStandby);
}

TEST_F(RecoveryLayoutTest, AMemoryBudgetKeepsTheJobOffLayoutsThatDoNotFit) {
  // 600 B a worker: only pp=2 x tp=2 fits, so 3 workers wait for a fourth, and of 5 one waits.
  options_.initial_workers = 3;
  layouts_.Learn(WithState("a"));
  for (const std::string id : {"a", "b", "c"}) Join(id, "n1", 600);
  EXPECT_TRUE(Sent<proto::NewGeneration>(T::kNewGeneration).empty()) << "no layout fits 3";
  EXPECT_EQ(generations_.state(), proto::JobState::kForming);
  Join("d", "n1", 600);
  Join("e", "n1", 600);
  auto first = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(first.size(), 4u) << "the fourth worker made a layout that fits";
  EXPECT_EQ(MergedOf(first).layout, (Layout{1, 2, 2}));
  EXPECT_EQ(membership_.Find("e")->state, WorkerState::kStandby);
  EXPECT_LE(layouts_.NeedBytes(Layout{1, 2, 2}), 600);
}

TEST_F(RecoveryLayoutTest, ARecoveryThatFitsNoLayoutWaitsForWorkersAndGoesOn) {
  FormDp2Tp2(/*memory=*/1024);  // tp=2 needs 1 KiB a worker; one worker alone needs 2 KiB
  generations_.LoseWorkers({before_[0], before_[1], before_[2]}, "killed");
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 1u);
  const uint64_t target = recover[0].second.target_generation;
  ASSERT_TRUE(generations_.OnPaused(before_[3], proto::PausedReport{target, 10, {10}, true}).ok());
  EXPECT_TRUE(Sent<proto::NewGeneration>(T::kNewGeneration).empty()) << "no layout that cannot run";
  EXPECT_FALSE(generations_.job_over());
  EXPECT_EQ(generations_.state(), proto::JobState::kWaitingForWorkers);
  EXPECT_EQ(generations_.waiting_reason(),
            "no layout of the 1 live workers fits their memory (layout dp=1,pp=1,tp=1 needs "
            "2.0 KiB a worker, " + before_[3] + " has 1.0 KiB)");
  // A worker with too little memory changes nothing; one with enough makes dp=1 x tp=2 fit.
  Join("small", "n1", 512);
  generations_.MaybeResumeWaitingRecovery();
  EXPECT_TRUE(Sent<proto::NewGeneration>(T::kNewGeneration).empty());
  EXPECT_EQ(generations_.state(), proto::JobState::kWaitingForWorkers);
  Join("e", "n1", 1024);
  generations_.MaybeResumeWaitingRecovery();
  const proto::NewGeneration g = MergedOf(Sent<proto::NewGeneration>(T::kNewGeneration));
  EXPECT_EQ(g.layout, (Layout{1, 1, 2}));
  ASSERT_EQ(g.members.size(), 2u);
  EXPECT_EQ(g.members[1].worker_id, before_[3]) << "the survivor keeps its position";
  EXPECT_EQ(g.members[0].worker_id, "e");
  EXPECT_EQ(generations_.state(), proto::JobState::kBuilding);
  EXPECT_TRUE(generations_.waiting_reason().empty());
}

// A planned grow chooses as a recovery does: dp=3 of a, b and s1 fits no layout (s1 has 600 B),
// so s1 stays standby and s2 takes the rank, rather than the job staying at dp=2.
TEST_F(RecoveryLayoutTest, AGrowWithMixedBudgetsTakesTheWorkersThatFit) {
  FormDp2WithMixedStandbys();
  generations_.BeginPause(SizeGoal{3});
  auto built = PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest));
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{3, 1, 1}));
  std::vector<std::string> ids;
  for (const auto& m : g.members) ids.push_back(m.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "s2"}));
  ReadyAll(built);
  EXPECT_EQ(generations_.layout(), (Layout{3, 1, 1}));
  EXPECT_EQ(membership_.Find("s1")->state, WorkerState::kStandby);
  EXPECT_EQ(membership_.Find("s2")->state, WorkerState::kMember);
}

// A member short of the memory of the layout with the most ranks stays, standby: a (4 KiB) and b
// (1.1 KiB) run tp=2 or pp=2; a grow to 3 with s1 and s2 (4 KiB) runs dp=3 of a, s1 and s2.
TEST_F(RecoveryLayoutTest, AGrowLeavesAMemberShortOfMemoryStandby) {
  layouts_.Learn(WithState("a"));
  Join("a", "n1", 4096);
  Join("b", "n1", 1100);
  ReadyAll(Sent<proto::NewGeneration>(T::kNewGeneration));
  ASSERT_EQ(generations_.layout().world(), 2);
  ASSERT_EQ(generations_.layout().dp, 1) << "dp=2 needs 2 KiB";
  Join("s1", "n1", 4096);
  Join("s2", "n1", 4096);
  generations_.BeginPause(SizeGoal{3});
  auto built = PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest));
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{3, 1, 1}));
  std::vector<std::string> ids;
  for (const auto& m : g.members) ids.push_back(m.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "s1", "s2"}));
  bool told_b = false;
  for (const auto& [identity, ng] : built) {
    if (identity != "id-b") continue;
    told_b = true;
    EXPECT_TRUE(ng.leave);
    EXPECT_TRUE(ng.standby) << "b stays in the job, standby";
  }
  EXPECT_TRUE(told_b);
  ReadyAll(built);
  EXPECT_EQ(generations_.layout(), (Layout{3, 1, 1}));
  // It leaves its rank, then joins again as a standby (the worker does that; not simulated).
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLeaving);
}

// A grow whose standby workers' memory fits no larger layout ends at the layout that fits,
// once: neither it nor a regrow pauses the job again for the same workers (it did, forever).
TEST_F(RecoveryLayoutTest, AGrowTheStandbysMemoryCannotMakeEndsAtTheLayoutThatFits) {
  FormDp2WithMixedStandbys();
  membership_.Remove("s2");  // only s1 (600 B) stands: dp=3 needs 2 KiB a worker
  proto::Envelope e;
  e.type = T::kResize;
  e.sender = "admin";
  e.request_id = 9;
  e.payload = proto::EncodePayload(proto::ResizeRequest{3, false, Layout{}, true});
  resizes_.OnResize("id-admin", e);
  ReadyAll(PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest)));
  EXPECT_EQ(generations_.layout(), (Layout{2, 1, 1}));
  const uint64_t reached = generations_.generation();
  auto replies = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_FALSE(replies.empty());
  EXPECT_EQ(replies.back().second.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(replies.back().second.message,
            "the job runs 2 workers at dp=2,pp=1,tp=1: the memory of the 1 standby worker(s) "
            "fits no larger layout");
  EXPECT_FALSE(resizes_.pending().has_value());
  resizes_.MaybeRegrow();
  EXPECT_FALSE(resizes_.pending().has_value()) << "no regrow for the same workers";
  EXPECT_EQ(generations_.phase(), Phase::kIdle);
  EXPECT_EQ(generations_.generation(), reached);
  // A worker with the memory joins: the job grows back to its target, 3.
  Join("s3", "n1", 4096);
  ReadyAll(PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest)));
  EXPECT_EQ(generations_.layout(), (Layout{3, 1, 1}));
}

// A resize that names a layout only the larger workers fit is accepted when enough of them exist
// (it was refused for s1's 600 B before); s1 stands by.
TEST_F(RecoveryLayoutTest, AResizeToALayoutOnlyTheLargerWorkersFitLeavesTheOthersStandby) {
  FormDp2WithMixedStandbys();
  Resize(3, Layout{3, 1, 1});
  ASSERT_TRUE(resizes_.pending().has_value()) << "accepted";
  auto built = PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest));
  const proto::NewGeneration g = MergedOf(built);
  EXPECT_EQ(g.layout, (Layout{3, 1, 1}));
  std::vector<std::string> ids;
  for (const auto& m : g.members) ids.push_back(m.worker_id);
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b", "s2"}));
  ReadyAll(built);
  EXPECT_EQ(generations_.layout(), (Layout{3, 1, 1}));
  EXPECT_EQ(membership_.Find("s1")->state, WorkerState::kStandby);
  EXPECT_FALSE(resizes_.pending().has_value()) << "done";
}

// A resize that names a layout of more workers than are live counts the ones still to join as
// fitting (they are checked as they join): every live worker fits, so it is accepted and formed
// once a fourth joins (it was refused with "3 of the 3 live workers have that much, 4 needed").
TEST_F(RecoveryLayoutTest, AResizeBeyondTheLiveWorkersWaitsForTheOnesToCome) {
  FormDp2WithMixedStandbys();
  membership_.Remove("s1");  // a, b and s2: 4 KiB each
  Resize(4, Layout{4, 1, 1});
  EXPECT_TRUE(Sent<proto::ErrorReply>(T::kError).empty());
  ASSERT_TRUE(resizes_.pending().has_value()) << "accepted";
  Join("s3", "n1", 4096);
  ReadyAll(PauseAll(Sent<proto::PauseRequest>(T::kPauseRequest)));
  EXPECT_EQ(generations_.layout(), (Layout{4, 1, 1}));
}

// One that more workers need than have the memory is refused, with the numbers.
TEST_F(RecoveryLayoutTest, AResizeToALayoutTooFewWorkersFitIsRefusedWithTheNumbers) {
  FormDp2WithMixedStandbys();
  Resize(4, Layout{4, 1, 1});
  auto errors = Sent<proto::ErrorReply>(T::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].second.code, static_cast<int32_t>(StatusCode::kResourceExhausted));
  EXPECT_EQ(errors[0].second.message,
            "layout dp=4,pp=1,tp=1 needs 2.0 KiB a worker, s1 has 600 B; 3 of the 4 live workers "
            "have that much, 4 needed");
  EXPECT_FALSE(resizes_.pending().has_value());
  EXPECT_EQ(generations_.layout(), (Layout{2, 1, 1}));
}

}  // namespace
}  // namespace elastra::coordinator
