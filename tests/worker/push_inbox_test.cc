// PushInbox: how the training thread files the coordinator's pushes. Pause requests only raise
// the pause target (the step's allreduce carries it), recovery requests are queued and mark a
// recovery pending, a Shutdown stops a working worker (cleanly when its code is 0) but is queued
// for a parked one (the end of the job), and requests for the generation the worker already runs
// change nothing.
#include <gtest/gtest.h>

#include "worker/control_channel.h"

namespace elastra {
namespace {

using proto::MessageType;

template <class T>
proto::Envelope Push(MessageType type, const T& payload) {
  proto::Envelope e;
  e.type = type;
  e.payload = proto::EncodePayload(payload);
  return e;
}

proto::Envelope Pause(uint64_t target) {
  proto::PauseRequest r;
  r.target_generation = target;
  return Push(MessageType::kPauseRequest, r);
}

proto::Envelope Recover(uint64_t target) {
  proto::RecoverRequest r;
  r.target_generation = target;
  r.lost = {"w1"};
  return Push(MessageType::kRecoverRequest, r);
}

proto::Envelope Stop(int32_t exit_code, const std::string& reason) {
  return Push(MessageType::kShutdown, proto::Shutdown{exit_code, reason});
}

TEST(PushInbox, PauseRequestsRaiseTheTargetWithoutQueueing) {
  PushInbox inbox;
  EXPECT_EQ(inbox.pause_target(), 0u);
  inbox.Stash(Pause(5), /*generation=*/3, /*parked=*/false);
  EXPECT_EQ(inbox.pause_target(), 5u);
  inbox.Stash(Pause(4), 3, false);  // an older target never lowers it
  EXPECT_EQ(inbox.pause_target(), 5u);
  inbox.Stash(Pause(3), 3, false);  // the generation it runs: stale
  EXPECT_EQ(inbox.pause_target(), 5u);
  EXPECT_TRUE(inbox.empty());
  inbox.RaisePauseTarget(7);
  EXPECT_EQ(inbox.pause_target(), 7u);
  inbox.RaisePauseTarget(6);
  EXPECT_EQ(inbox.pause_target(), 7u);
}

TEST(PushInbox, StalePauseRequestIsIgnored) {
  PushInbox inbox;
  inbox.Stash(Pause(2), /*generation=*/2, false);
  EXPECT_EQ(inbox.pause_target(), 0u);
  proto::Envelope garbled = Pause(9);
  garbled.payload = "x";
  inbox.Stash(garbled, 2, false);
  EXPECT_EQ(inbox.pause_target(), 0u);
}

TEST(PushInbox, RecoveryRequestsAreQueuedAndMarkARecoveryPending) {
  PushInbox inbox;
  inbox.Stash(Recover(2), /*generation=*/2, false);  // stale: queued, not pending
  EXPECT_FALSE(inbox.recover_pending());
  ASSERT_FALSE(inbox.empty());
  inbox.Stash(Recover(4), 2, false);
  EXPECT_TRUE(inbox.recover_pending());
  EXPECT_EQ(proto::DecodePayload<proto::RecoverRequest>(inbox.Pop().payload)->target_generation,
            2u);
  EXPECT_EQ(proto::DecodePayload<proto::RecoverRequest>(inbox.Pop().payload)->target_generation,
            4u);
  EXPECT_TRUE(inbox.empty());
}

TEST(PushInbox, ClearPendingForgetsPauseAndRecovery) {
  PushInbox inbox;
  inbox.Stash(Pause(3), 1, false);
  inbox.Stash(Recover(4), 1, false);
  inbox.ClearPending();
  EXPECT_EQ(inbox.pause_target(), 0u);
  EXPECT_FALSE(inbox.recover_pending());
  EXPECT_FALSE(inbox.empty());  // the queued request is still read by whoever waits
}

TEST(PushInbox, ShutdownStopsAWorkingWorker) {
  PushInbox inbox;
  inbox.Stash(Stop(1, "declared lost: silent"), 2, /*parked=*/false);
  ASSERT_TRUE(inbox.shutdown().has_value());
  EXPECT_EQ(inbox.shutdown()->code(), StatusCode::kAborted);
  EXPECT_NE(inbox.shutdown()->message().find("declared lost: silent"), std::string::npos);
  EXPECT_FALSE(inbox.shutdown_clean()) << "code 1 is a failure";
  EXPECT_EQ(inbox.shutdown_reason(), "declared lost: silent");
  EXPECT_TRUE(inbox.empty());
}

// Code 0 ends the worker's part cleanly (a spare no longer needed, the job finished): a standby
// that never held a rank is dismissed by it rather than failed.
TEST(PushInbox, ShutdownOfCodeZeroIsClean) {
  PushInbox inbox;
  inbox.Stash(Stop(0, "this standby is not needed"), 0, /*parked=*/false);
  ASSERT_TRUE(inbox.shutdown().has_value());
  EXPECT_EQ(inbox.shutdown()->code(), StatusCode::kAborted);
  EXPECT_TRUE(inbox.shutdown_clean());
  EXPECT_EQ(inbox.shutdown_reason(), "this standby is not needed");
  inbox.ClearShutdown();
  EXPECT_FALSE(inbox.shutdown_clean());
  EXPECT_EQ(inbox.shutdown_reason(), "");
  proto::Envelope garbled = Stop(0, "x");
  garbled.payload = "x";
  inbox.Stash(garbled, 0, false);  // unreadable: not known to be clean
  ASSERT_TRUE(inbox.shutdown().has_value());
  EXPECT_FALSE(inbox.shutdown_clean());
}

// Under mpirun the worker acts on it by parking; as standby it waits for the job again.
TEST(PushInbox, ShutdownClearedOnceParked) {
  PushInbox inbox;
  inbox.Stash(Stop(1, "declared lost: silent"), 2, /*parked=*/false);
  inbox.ClearShutdown();
  EXPECT_FALSE(inbox.shutdown().has_value());
  inbox.Stash(Stop(0, "every member finished"), 2, /*parked=*/true);
  EXPECT_FALSE(inbox.shutdown().has_value());
  EXPECT_FALSE(inbox.empty());
}

TEST(PushInbox, ShutdownIsQueuedForAParkedWorker) {
  PushInbox inbox;
  inbox.Stash(Stop(0, "job finished"), 2, /*parked=*/true);
  EXPECT_FALSE(inbox.shutdown().has_value());
  ASSERT_FALSE(inbox.empty());
  proto::Envelope e = inbox.Pop();
  EXPECT_EQ(e.type, MessageType::kShutdown);
  EXPECT_EQ(proto::DecodePayload<proto::Shutdown>(e.payload)->exit_code, 0);
}

TEST(PushInbox, OtherPushesAreQueuedInArrivalOrder) {
  PushInbox inbox;
  proto::NewGeneration g;
  g.generation = 3;
  inbox.Stash(Push(MessageType::kNewGeneration, g), 2, false);
  inbox.Stash(Pause(3), 2, false);
  inbox.Stash(Recover(4), 2, false);
  EXPECT_EQ(inbox.Pop().type, MessageType::kNewGeneration);
  EXPECT_EQ(inbox.Pop().type, MessageType::kRecoverRequest);
  EXPECT_TRUE(inbox.empty());
}

}  // namespace
}  // namespace elastra
