// The resize manager driven without a core: admission, a grow that asks an agent for workers and
// waits for them (or fails at spawn_timeout), and the caller's replies.
#include "coordinator/resize_manager.h"

#include <gtest/gtest.h>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class ResizeManagerTest : public ManagerTest {
 protected:
  // An admin asks for `workers` (and `layout` when given); `wait` for the outcome.
  void Resize(int workers, bool wait, std::optional<Layout> layout = std::nullopt,
              bool restarting = false) {
    proto::ResizeRequest req{workers, layout.has_value(), layout.value_or(Layout{}), wait};
    proto::Envelope e;
    e.type = T::kResize;
    e.sender = "admin";
    e.request_id = ++rid_;
    e.payload = proto::EncodePayload(req);
    resizes_.OnResize("id-admin", e, restarting);
  }
  StatusCode Refusal() {
    auto errors = Sent<proto::ErrorReply>(T::kError);
    return errors.size() == 1 ? static_cast<StatusCode>(errors[0].second.code) : StatusCode::kOk;
  }
  void RegisterAgent() { membership_.RegisterAgent(AgentInfo{"id-agent", "agent-n1", "n1", 8}); }

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
  Resize(4, false, std::nullopt, /*restarting=*/true);
  EXPECT_EQ(Refusal(), StatusCode::kFailedPrecondition);
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
  RegisterAgent();
  Resize(4, true);
  auto out = outbox_.Take();
  ASSERT_EQ(out.size(), 2u);  // accepted, then the spawn request
  auto spawn = proto::DecodeEnvelope(out[1].frame);
  ASSERT_TRUE(spawn.ok());
  EXPECT_EQ(out[1].identity, "id-agent");
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
  resizes_.Restore(JournalResize{1, false, Layout{}});
  resizes_.Continue();
  auto out = outbox_.Take();
  ASSERT_EQ(out.size(), 2u);  // the pause requests only: nobody waits for a reply
  for (const auto& o : out) {
    EXPECT_EQ(proto::DecodeEnvelope(o.frame)->type, T::kPauseRequest);
  }
}

}  // namespace
}  // namespace elastra::coordinator
