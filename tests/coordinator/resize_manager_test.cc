// The resize manager driven without a core: admission, a grow that asks agents for workers in
// their free slots and waits for them (or fails at spawn_timeout), the caller's replies, the
// target size, the regrow after a failure, and drains.
#include "coordinator/resize_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class ResizeManagerTest : public ManagerTest {
 protected:
  // An admin asks for `workers` (and `layout` when given); `wait` for the outcome.
  void Resize(int workers, bool wait, std::optional<Layout> layout = std::nullopt) {
    proto::ResizeRequest req{workers, layout.has_value(), layout.value_or(Layout{}), wait};
    proto::Envelope e;
    e.type = T::kResize;
    e.sender = "admin";
    e.request_id = ++rid_;
    e.payload = proto::EncodePayload(req);
    resizes_.OnResize("id-admin", e);
  }
  // An admin asks for `workers` (0: unchanged) and `spares`, without waiting.
  void ResizeSpares(int workers, int spares) {
    proto::ResizeRequest req;
    req.workers = workers;
    req.spares = spares;
    proto::Envelope e;
    e.type = T::kResize;
    e.sender = "admin";
    e.request_id = ++rid_;
    e.payload = proto::EncodePayload(req);
    resizes_.OnResize("id-admin", e);
  }
  // `sender` holding `role` asks to drain `host`.
  void Drain(const std::string& host, bool wait, proto::Role role = proto::Role::kAdmin,
             const std::string& sender = "admin") {
    proto::Envelope e;
    e.type = T::kDrain;
    e.sender = sender;
    e.request_id = ++rid_;
    e.payload = proto::EncodePayload(proto::DrainRequest{host, wait});
    resizes_.OnDrain("id-" + sender, role, e);
  }
  StatusCode Refusal() {
    auto errors = Sent<proto::ErrorReply>(T::kError);
    return errors.size() == 1 ? static_cast<StatusCode>(errors[0].second.code) : StatusCode::kOk;
  }
  std::string RefusalMessage() {
    auto errors = Sent<proto::ErrorReply>(T::kError);
    return errors.size() == 1 ? errors[0].second.message : "";
  }
  // The first generation of `workers` (id, host) forms and commits.
  void Form(const std::vector<std::pair<std::string, std::string>>& workers) {
    options_.initial_workers = static_cast<int>(workers.size());
    for (const auto& [id, host] : workers) Join(id, host);
    for (const auto& [id, host] : workers) {
      ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{1, 0, 0, 0}).ok());
    }
    ASSERT_EQ(generations_.generation(), 1u);
    outbox_.Take();
  }
  // Every member pauses at `step` for the change in flight, then every member of the generation
  // built is ready: it commits.
  void PauseAndCommit(int64_t step) {
    const uint64_t target = generations_.generation() + 1;
    for (const auto& id : membership_.Members()) {
      ASSERT_TRUE(generations_.OnPaused(id, proto::PausedReport{target, step, {step}, false}).ok());
    }
    for (const auto& id : membership_.Members()) {
      ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{target, 0, 0, 0}).ok());
    }
    ASSERT_EQ(generations_.generation(), target);
  }
  // Everything sent since the last call, to read several types from.
  struct Frames {
    std::vector<std::pair<std::string, proto::Envelope>> all;
    template <class P>
    std::vector<std::pair<std::string, P>> Of(T type) const {
      std::vector<std::pair<std::string, P>> out;
      for (const auto& [to, e] : all) {
        if (e.type == type) out.emplace_back(to, *proto::DecodePayload<P>(e.payload));
      }
      return out;
    }
  };
  Frames TakeAll() {
    Frames f;
    for (const auto& o : outbox_.Take()) f.all.emplace_back(o.identity, *proto::DecodeEnvelope(o.frame));
    return f;
  }
  // The spawn requests sent since the last call: recipient -> ids.
  std::map<std::string, std::vector<std::string>> Spawned() {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& [to, req] : Sent<proto::SpawnRequest>(T::kSpawnRequest)) {
      out[to].insert(out[to].end(), req.worker_ids.begin(), req.worker_ids.end());
    }
    return out;
  }

  uint64_t rid_ = 0;
};

TEST_F(ResizeManagerTest, WhatCannotBeDoneIsRefusedAndChangesNothing) {
  Resize(2, false);
  EXPECT_EQ(Refusal(), StatusCode::kFailedPrecondition) << "no generation yet";
  StartTwo();
  Resize(0, false);
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument);
  Resize(9, false);
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument) << "max_workers is 8";
  Resize(4, false, Layout{2, 1, 1});
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument) << "a layout of 2 ranks for 4 workers";
  // Degrees from the wire: below 1, or multiplying past int (found by the coordinator_core fuzz
  // target, tests/fuzz/corpus/coordinator_core/regression-resize-layout-overflow).
  Resize(1, false, Layout{-1, -1, 1});
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument) << "negative degrees";
  Resize(1, false, Layout{65536, 65536, 1});
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument) << "a world past int";
  resizes_.set_restoring(true);
  Resize(4, false);
  EXPECT_EQ(Refusal(), StatusCode::kBusy) << "a restart has not settled";
  resizes_.set_restoring(false);
  EXPECT_FALSE(resizes_.pending().has_value());
  // The size the job has: done at once.
  Resize(2, true);
  auto done = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].second.phase, proto::ResizePhase::kDone);
  EXPECT_FALSE(resizes_.pending().has_value());
}

TEST_F(ResizeManagerTest, AGrowAsksTheAgentAndCompletesWhenTheWorkersJoined) {
  StartTwo();
  RegisterHost("n1", 8);
  outbox_.Take();
  Resize(4, true);
  auto out = outbox_.Take();
  ASSERT_EQ(out.size(), 2u);  // accepted, then the spawn request
  auto spawn = proto::DecodeEnvelope(out[1].frame);
  ASSERT_TRUE(spawn.ok());
  EXPECT_EQ(out[1].identity, "id-agent-n1");
  auto ids = proto::DecodePayload<proto::SpawnRequest>(spawn->payload);
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->worker_ids.size(), 2u);
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_TRUE(resizes_.pending()->waiting_for_workers);

  Join(ids->worker_ids[0]);
  EXPECT_TRUE(outbox_.Take().empty()) << "paused with one of the two workers";
  Join(ids->worker_ids[1]);
  EXPECT_EQ(Sent<proto::PauseRequest>(T::kPauseRequest).size(), 2u);
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 5, {}, false}).ok());
  ASSERT_TRUE(generations_.OnPaused("b", proto::PausedReport{2, 5, {}, false}).ok());
  EXPECT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 4u);
  for (const std::string& id :
       std::vector<std::string>{"a", "b", ids->worker_ids[0], ids->worker_ids[1]}) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{2, 0, 0, 0}).ok());
  }
  auto done = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].first, "id-admin");
  EXPECT_EQ(done[0].second.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(done[0].second.generation, 2u);
  EXPECT_EQ(done[0].second.workers, 4);
  EXPECT_FALSE(resizes_.pending().has_value());
}

// A resize that names only spares changes them at once (no generation), and the agent is asked
// for the standbys that are missing; numbers that cannot be are refused with why.
TEST_F(ResizeManagerTest, SparesAloneChangeAtOnceAndBadNumbersAreRefused) {
  StartTwo();
  RegisterHost("n1", 8);
  outbox_.Take();
  ResizeSpares(0, -2);
  EXPECT_EQ(RefusalMessage(), "spares must be 0 or more; asked for -2");
  ResizeSpares(0, 9);
  EXPECT_EQ(RefusalMessage(),
            "asked for 9 spares; this job allows at most 8 workers (max_workers)");
  EXPECT_EQ(resizes_.spares(), 0);

  ResizeSpares(0, 2);
  const Frames f = TakeAll();
  auto replies = f.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].second.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(replies[0].second.message, "the job keeps 2 spare(s)");
  EXPECT_EQ(resizes_.spares(), 2);
  auto spawns = f.Of<proto::SpawnRequest>(T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].second.worker_ids.size(), 2u);
  EXPECT_TRUE(f.Of<proto::PauseRequest>(T::kPauseRequest).empty());
  EXPECT_EQ(resizes_.target(), 2) << "the size is not changed";
  EXPECT_FALSE(resizes_.pending().has_value());
}

// Lowering the spares stops the standby workers beyond the new number, newest first, but no more
// than the number lowered: standby workers the layout left out stay for the next grow. With a
// change in flight they stop when it ends.
TEST_F(ResizeManagerTest, LoweredSparesStopTheStandbysBeyondThem) {
  StartTwo();
  RegisterHost("n1", 8);
  Join("left-out");  // a survivor the layout left out, not a spare
  outbox_.Take();
  ResizeSpares(0, 3);
  std::vector<std::string> spares = Spawned()["id-agent-n1"];
  ASSERT_EQ(spares.size(), 2u) << "one standby stands already";
  for (const auto& id : spares) Join(id);
  ASSERT_EQ(membership_.StandbyCount(), 3u);
  outbox_.Take();

  ResizeSpares(0, 1);
  Frames f = TakeAll();
  auto replies = f.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].second.message,
            "the job keeps 1 spare(s); 2 standby worker(s) beyond them stop");
  auto told = f.Of<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(told.size(), 2u);
  std::vector<std::string> stopped;
  for (const auto& [to, shutdown] : told) {
    EXPECT_EQ(shutdown.exit_code, 0) << "a clean leave, not a failure";
    EXPECT_EQ(shutdown.reason, "the job keeps 1 spare(s); this standby is not needed");
    stopped.push_back(to);
  }
  std::sort(stopped.begin(), stopped.end());
  std::vector<std::string> newest = {"id-" + spares[0], "id-" + spares[1]};
  std::sort(newest.begin(), newest.end());
  EXPECT_EQ(stopped, newest) << "the newest standbys go";
  EXPECT_EQ(membership_.Find(spares[0])->state, WorkerState::kLeaving);
  EXPECT_EQ(membership_.StandbyCount(), 1u);
  resizes_.MaybeReplenishSpares();
  EXPECT_TRUE(Spawned().empty()) << "one spare stands: nothing to start";

  // To 0 while a grow is in flight: the stop waits for the change, which takes the oldest
  // standby (n1 has no free slot), and then stops the other.
  Join("late");
  hosts_.Find("n1")->slots = 6;
  outbox_.Take();
  Resize(3, false);
  ASSERT_TRUE(resizes_.pending().has_value());
  ResizeSpares(0, 0);
  f = TakeAll();
  replies = f.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_FALSE(replies.empty());
  EXPECT_EQ(replies.back().second.message,
            "the job keeps 0 spare(s); the standby workers beyond them stop once the change in "
            "flight ends");
  EXPECT_TRUE(f.Of<proto::Shutdown>(T::kShutdown).empty());
  ASSERT_NO_FATAL_FAILURE(PauseAndCommit(5));  // the commit's tick stops it
  EXPECT_EQ(membership_.MemberCount(), 3u);
  EXPECT_EQ(membership_.Find("left-out")->state, WorkerState::kMember);
  resizes_.MaybeReplenishSpares();
  told = Sent<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].first, "id-late");
  EXPECT_EQ(membership_.StandbyCount(), 0u);
}

// A grow does not eat the spare when the agent's free slots can start its workers: it asks for
// a new worker and goes on with it, and the spare stays standing. Without a free slot, the target
// comes first and the grow uses the spare.
TEST_F(ResizeManagerTest, AGrowLeavesTheSpareStandingWhereSlotsAllow) {
  StartTwo();
  RegisterHost("n1", 8);
  Join("s");
  options_.spares = 1;
  outbox_.Take();
  Resize(3, false);
  auto spawned = Spawned();
  ASSERT_EQ(spawned["id-agent-n1"].size(), 1u) << "a new worker, not the spare";
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_TRUE(resizes_.pending()->waiting_for_workers);
  Join(spawned["id-agent-n1"][0]);
  ASSERT_NO_FATAL_FAILURE(PauseAndCommit(5));
  EXPECT_EQ(membership_.MemberCount(), 3u);
  EXPECT_EQ(membership_.StandbyCount(), 1u) << "the spare stands";
  EXPECT_TRUE(Spawned().empty());

  // n1 has 4 slots, all taken: the fourth worker can only be the spare.
  hosts_.Find("n1")->slots = 4;
  Resize(4, false);
  EXPECT_TRUE(Spawned().empty()) << "no free slot: the grow uses the spare at once";
  ASSERT_NO_FATAL_FAILURE(PauseAndCommit(9));
  EXPECT_EQ(membership_.MemberCount(), 4u);
  EXPECT_EQ(membership_.StandbyCount(), 0u);
  EXPECT_TRUE(Spawned().empty()) << "and no slot for a replacement";
}

TEST_F(ResizeManagerTest, AGrowFailsWhenItsWorkersDoNotComeWithinSpawnTimeout) {
  StartTwo();
  Resize(3, true);  // no agent: waits for workers started elsewhere
  EXPECT_EQ(Sent<proto::ResizeReply>(T::kResizeReply).size(), 1u);  // accepted
  clock_.Advance(Duration(999));
  resizes_.Tick();
  EXPECT_TRUE(outbox_.Take().empty());
  clock_.Advance(Duration(1));
  resizes_.Tick();
  auto failed = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].second.phase, proto::ResizePhase::kFailed);
  EXPECT_EQ(failed[0].second.message,
            "only 2 of 3 workers were available within spawn_timeout (1000 ms)");
  EXPECT_FALSE(resizes_.pending().has_value());
}

TEST_F(ResizeManagerTest, TheJobEndingFailsTheWaitingResize) {
  StartTwo();
  Resize(1, true);
  outbox_.Take();
  generations_.LoseWorkers({"a", "b"}, "gone");
  auto failed = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].second.phase, proto::ResizePhase::kFailed);
  EXPECT_EQ(failed[0].second.message, "the job failed: every member is lost (gone)");
  EXPECT_FALSE(resizes_.pending().has_value());
}

TEST_F(ResizeManagerTest, ARestoredResizeContinuesWithoutAReply) {
  StartTwo();
  resizes_.Restore(JournalResize{1, false, Layout{}}, 1, /*spares=*/0);
  resizes_.Continue();
  auto out = outbox_.Take();
  ASSERT_EQ(out.size(), 2u);  // the pause requests only: nobody waits for a reply
  for (const auto& o : out) {
    EXPECT_EQ(proto::DecodeEnvelope(o.frame)->type, T::kPauseRequest);
  }
}

TEST_F(ResizeManagerTest, AResizeBeyondTheLiveHostsSlotsIsRefusedAtOnce) {
  Form({{"a", "n1"}, {"b", "n1"}});
  RegisterHost("n1", 3);
  RegisterHost("n2", 2);
  RegisterHost("gone", 4)->state = proto::HostState::kLost;
  outbox_.Take();
  Resize(6, true);
  auto errors = Sent<proto::ErrorReply>(T::kError);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].second.code, static_cast<int32_t>(StatusCode::kResourceExhausted));
  EXPECT_EQ(errors[0].second.message,
            "asked for 6 workers; the live hosts have 5 slots (n1: 3, n2: 2), room for at most 5 "
            "workers");
  EXPECT_FALSE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.target(), 2) << "a refused resize changes nothing";
  // Five fit: the fullest host fills first, so that groups stay together.
  Resize(5, true);
  auto spawned = Spawned();
  EXPECT_EQ(spawned["id-agent-n1"].size(), 1u);
  EXPECT_EQ(spawned["id-agent-n2"].size(), 2u);
  EXPECT_EQ(spawned.size(), 2u);
  EXPECT_EQ(resizes_.target(), 5);
}

TEST_F(ResizeManagerTest, TheTargetIsTheStartSizeThenEachResizesSize) {
  StartTwo();
  EXPECT_EQ(resizes_.target(), 2);
  Resize(1, false);
  EXPECT_EQ(resizes_.target(), 1);
  PauseAndCommit(3);
  EXPECT_FALSE(resizes_.pending().has_value());
  Join("c");
  Resize(2, false);
  PauseAndCommit(4);
  EXPECT_EQ(resizes_.target(), 2);
  EXPECT_EQ(membership_.Members().size(), 2u);
}

TEST_F(ResizeManagerTest, AfterAFailureTheJobGrowsBackOnAHostWithFreeSlots) {
  options_.initial_workers = 2;
  RegisterHost("n1", 2);
  auto first = Spawned()["id-agent-n1"];
  ASSERT_EQ(first.size(), 2u);
  Join(first[0], "n1");
  Join(first[1], "n1");
  for (const auto& id : first) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{1, 0, 0, 0}).ok());
  }
  RegisterHost("n2", 1);
  outbox_.Take();
  // first[1] dies: the job goes on with first[0] at once.
  generations_.LoseWorkers({first[1]}, "process exited");
  ASSERT_TRUE(generations_.OnPaused(first[0], proto::PausedReport{2, 6, {6}, true}).ok());
  ASSERT_TRUE(generations_.OnReady(first[0], proto::GenerationReady{2, 0, 0, 0}).ok());
  ASSERT_EQ(generations_.generation(), 2u);
  EXPECT_EQ(generations_.history().back().reason, proto::GenerationReason::kFailure);
  // Below the target of 2: a replacement starts on the fullest host with a free slot.
  auto replacement = Spawned();
  ASSERT_EQ(replacement.size(), 1u);
  ASSERT_EQ(replacement["id-agent-n1"].size(), 1u);
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.pending()->reason, proto::GenerationReason::kRegrow);
  Join(replacement["id-agent-n1"][0], "n1");
  auto pauses = Sent<proto::PauseRequest>(T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 1u);
  EXPECT_EQ(pauses[0].second.reason, proto::GenerationReason::kRegrow);
  ASSERT_TRUE(generations_.OnPaused(first[0], proto::PausedReport{3, 9, {9}, false}).ok());
  auto gens = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(gens.size(), 2u);
  EXPECT_EQ(gens[0].second.reason, proto::GenerationReason::kRegrow);
  EXPECT_EQ(MergedOf(gens).members.size(), 2u);
  for (const auto& m : MergedOf(gens).members) {
    ASSERT_TRUE(generations_.OnReady(m.worker_id, proto::GenerationReady{3, 0, 0, 0}).ok());
  }
  EXPECT_EQ(generations_.history().back().reason, proto::GenerationReason::kRegrow);
  EXPECT_FALSE(resizes_.pending().has_value());
  EXPECT_TRUE(Spawned().empty()) << "at the target: nothing more";
}

TEST_F(ResizeManagerTest, AgentsThatNeverHeartbeatAreNotAskedToRegrowStandbyWorkersAre) {
  Form({{"a", "n1"}, {"b", "n1"}});
  RegisterHost("n1", 8, /*heartbeats=*/false);  // an elastra run that starts its own workers
  generations_.LoseWorkers({"b"}, "process exited");
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 6, {6}, true}).ok());
  ASSERT_TRUE(generations_.OnReady("a", proto::GenerationReady{2, 0, 0, 0}).ok());
  EXPECT_TRUE(Spawned().empty());
  EXPECT_FALSE(resizes_.pending().has_value());
  // A worker joining on its own (a parked rank, one started by hand) brings the job back.
  Join("s", "n1");
  auto pauses = Sent<proto::PauseRequest>(T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 1u);
  EXPECT_EQ(pauses[0].second.reason, proto::GenerationReason::kRegrow);
}

TEST_F(ResizeManagerTest, AResizeReplacesARegrowThatWaitsForWorkers) {
  Form({{"a", "n1"}, {"b", "n1"}});
  RegisterHost("n1", 3);
  generations_.LoseWorkers({"b"}, "process exited");
  ASSERT_TRUE(generations_.OnPaused("a", proto::PausedReport{2, 6, {6}, true}).ok());
  ASSERT_TRUE(generations_.OnReady("a", proto::GenerationReady{2, 0, 0, 0}).ok());
  ASSERT_EQ(Spawned()["id-agent-n1"].size(), 1u);
  ASSERT_EQ(resizes_.pending()->reason, proto::GenerationReason::kRegrow);
  Resize(3, true);
  auto out = TakeAll();
  auto replies = out.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].second.phase, proto::ResizePhase::kAccepted);
  // The regrow's worker is on its way: one more makes three.
  auto spawns = out.Of<proto::SpawnRequest>(T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  EXPECT_EQ(spawns[0].second.worker_ids.size(), 1u);
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.pending()->reason, proto::GenerationReason::kResize);
  EXPECT_EQ(resizes_.target(), 3);
}

TEST_F(ResizeManagerTest, ADrainStartsReplacementsElsewhereThenTheHostsWorkersLeave) {
  Form({{"a0", "n1"}, {"a1", "n1"}, {"b0", "n2"}});
  RegisterHost("n1", 2);
  RegisterHost("n2", 2);
  RegisterHost("n3", 2);
  outbox_.Take();
  Drain("n1", /*wait=*/true);
  auto out = TakeAll();
  auto accepted = out.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_EQ(accepted[0].second.phase, proto::ResizePhase::kAccepted);
  EXPECT_EQ(accepted[0].second.workers, 3);
  EXPECT_EQ(hosts_.Find("n1")->state, proto::HostState::kDraining);
  // Replacements start first, on the other hosts (the fullest first), up to the target.
  std::map<std::string, std::vector<std::string>> spawned;
  for (const auto& [to, req] : out.Of<proto::SpawnRequest>(T::kSpawnRequest)) {
    spawned[to] = req.worker_ids;
  }
  ASSERT_EQ(spawned["id-agent-n2"].size(), 1u);
  ASSERT_EQ(spawned["id-agent-n3"].size(), 1u);
  EXPECT_EQ(spawned.count("id-agent-n1"), 0u) << "nothing new starts on a draining host";
  Drain("n1", true);
  EXPECT_EQ(Refusal(), StatusCode::kFailedPrecondition) << "already draining";
  Join(spawned["id-agent-n2"][0], "n2");
  EXPECT_TRUE(Sent<proto::PauseRequest>(T::kPauseRequest).empty()) << "waits for both";
  Join(spawned["id-agent-n3"][0], "n3");
  auto pauses = Sent<proto::PauseRequest>(T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 3u);
  EXPECT_EQ(pauses[0].second.reason, proto::GenerationReason::kDrain);
  for (const auto& id : {"a0", "a1", "b0"}) {
    ASSERT_TRUE(generations_.OnPaused(id, proto::PausedReport{2, 7, {7}, false}).ok());
  }
  auto gens = Sent<proto::NewGeneration>(T::kNewGeneration);
  ASSERT_EQ(gens.size(), 5u);
  std::vector<std::string> members;
  for (const auto& [to, g] : gens) {
    EXPECT_EQ(g.reason, proto::GenerationReason::kDrain);
    EXPECT_EQ(g.leave, to == "id-a0" || to == "id-a1") << to;
  }
  for (const auto& m : MergedOf(gens).members) members.push_back(m.worker_id);
  EXPECT_EQ(members, (std::vector<std::string>{"b0", spawned["id-agent-n2"][0],
                                               spawned["id-agent-n3"][0]}));
  for (const auto& id : members) {
    ASSERT_TRUE(generations_.OnReady(id, proto::GenerationReady{2, 1, 1, 0}).ok());
  }
  // Committed: the host is drained, its agent told to exit 0, the caller told it is done.
  EXPECT_EQ(hosts_.Find("n1")->state, proto::HostState::kDrained);
  auto end = TakeAll();
  auto shutdown = end.Of<proto::Shutdown>(T::kShutdown);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(shutdown[0].first, "id-agent-n1");
  EXPECT_EQ(shutdown[0].second.exit_code, 0);
  auto done = end.Of<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].first, "id-admin");
  EXPECT_EQ(done[0].second.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(done[0].second.workers, 3);
  EXPECT_EQ(done[0].second.message, "host n1 drained");
  EXPECT_FALSE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.target(), 3);
}

TEST_F(ResizeManagerTest, ADrainNoOtherHostCanTakeLowersTheTarget) {
  Form({{"a0", "n1"}, {"a1", "n1"}, {"b0", "n2"}});
  RegisterHost("n1", 2);
  RegisterHost("n2", 1);
  outbox_.Take();
  Drain("n1", false);
  EXPECT_EQ(resizes_.target(), 1);
  EXPECT_TRUE(Spawned().empty());
  PauseAndCommit(5);
  EXPECT_EQ(membership_.Members(), (std::vector<std::string>{"b0"}));
  EXPECT_EQ(hosts_.Find("n1")->state, proto::HostState::kDrained);
  EXPECT_EQ(membership_.Find("a0")->state, WorkerState::kLeaving);
}

TEST_F(ResizeManagerTest, DrainsThatCannotBeDoneAreRefused) {
  Form({{"a0", "n1"}, {"b0", "n2"}});
  RegisterHost("n1", 1);
  RegisterHost("n2", 1);
  outbox_.Take();
  Drain("nowhere", false);
  EXPECT_EQ(Refusal(), StatusCode::kNotFound);
  // A worker key drains only its own agent's host.
  Drain("n2", false, proto::Role::kWorker, "agent-n1");
  const std::string why = RefusalMessage();
  EXPECT_NE(why.find("needs an admin key"), std::string::npos) << why;
  Drain("n2", false, proto::Role::kWorker, "w7");
  EXPECT_NE(RefusalMessage().find("registered none"), std::string::npos);
  // Leaving only n2 would leave nobody once n1 is gone.
  Drain("n1", false, proto::Role::kWorker, "agent-n1");
  EXPECT_EQ(Sent<proto::ResizeReply>(T::kResizeReply).size(), 1u) << "its own host: accepted";
  PauseAndCommit(4);
  Drain("n1", false);
  EXPECT_EQ(Refusal(), StatusCode::kFailedPrecondition) << "drained, not up";
  Drain("n2", false);
  EXPECT_EQ(Refusal(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(hosts_.Find("n2")->state, proto::HostState::kUp);
}

TEST_F(ResizeManagerTest, DrainingAHostWithoutMembersIsDoneAtOnce) {
  Form({{"a0", "n1"}});
  RegisterHost("n1", 2);
  RegisterHost("n2", 2);
  Join("s", "n2");
  outbox_.Take();
  Drain("n2", true);
  auto replies = Sent<proto::ResizeReply>(T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].second.phase, proto::ResizePhase::kDone);
  EXPECT_EQ(hosts_.Find("n2")->state, proto::HostState::kDrained);
  EXPECT_EQ(membership_.Find("s"), nullptr) << "its standby worker was told to exit";
  EXPECT_FALSE(resizes_.pending().has_value());
}

}  // namespace
}  // namespace elastra::coordinator
