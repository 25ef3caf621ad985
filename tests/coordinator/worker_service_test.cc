// The worker service driven without a core: joins and their limits, heartbeat deadlines stepped
// with a FakeClock, leaves, process exits, and reports that arrive when nothing awaits them.
#include "coordinator/worker_service.h"

#include <gtest/gtest.h>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class WorkerServiceTest : public ManagerTest {
 protected:
  template <class P>
  proto::Envelope Envelope(const std::string& sender, T type, const P& payload, uint64_t rid = 0) {
    proto::Envelope e;
    e.type = type;
    e.sender = sender;
    e.request_id = rid;
    e.payload = proto::EncodePayload(payload);
    // The core records where each message came from before dispatching it.
    if (WorkerInfo* w = membership_.Find(sender)) w->identity = "id-" + sender;
    return e;
  }
  void ServiceJoin(const std::string& id) {
    workers_.OnJoin("id-" + id, Envelope(id, T::kJoin, proto::JoinRequest{id, "n1", 0, 7}, 1));
  }
  // a and b join through the service and commit generation 1.
  void Start() {
    ServiceJoin("a");
    ServiceJoin("b");
    outbox_.Take();
    workers_.OnGenerationReady(Envelope("a", T::kGenerationReady, proto::GenerationReady{1}),
                               membership_.Find("a"));
    workers_.OnGenerationReady(Envelope("b", T::kGenerationReady, proto::GenerationReady{1}),
                               membership_.Find("b"));
    ASSERT_EQ(generations_.generation(), 1u);
  }
  StatusCode Refusal() {
    auto errors = Sent<proto::ErrorReply>(T::kError);
    return errors.size() == 1 ? static_cast<StatusCode>(errors[0].second.code) : StatusCode::kOk;
  }

  WorkerService workers_{context_, &layouts_, &generations_, &host_manager_, &resizes_};
};

TEST_F(WorkerServiceTest, AJoinIsAnsweredAndTheInitialWorkersFormTheFirstGeneration) {
  options_.heartbeat_interval = Duration(200);
  options_.heartbeat_timeout = Duration(1500);
  ServiceJoin("a");
  auto replies = Sent<proto::JoinReply>(T::kJoinReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(replies[0].first, "id-a");
  EXPECT_EQ(replies[0].second.heartbeat_interval_ms, 200);
  EXPECT_EQ(replies[0].second.heartbeat_timeout_ms, 1500);
  EXPECT_TRUE(health_.Watching(membership_.Find("a")->slot));
  ServiceJoin("b");
  EXPECT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 2u);
  // A live member's id is refused; so is a standby worker beyond max_workers.
  ServiceJoin("a");
  EXPECT_EQ(Refusal(), StatusCode::kInvalidArgument);
  options_.max_workers = 1;
  ServiceJoin("c");
  outbox_.Take();
  ServiceJoin("d");
  EXPECT_EQ(Refusal(), StatusCode::kResourceExhausted);
}

// A state whose sizes would overflow the region math (bytes kept when ranks are assigned) is
// refused at the join (found by the coordinator_core fuzz target:
// tests/fuzz/corpus/coordinator_core/regression-state-kept-bytes-overflow).
TEST_F(WorkerServiceTest, AJoinWithAStateTooLargeToReckonWithIsRefused) {
  for (const TensorSpec& t : {TensorSpec{"w", {int64_t{1} << 41, 2}, 4, ShardingRule{}},
                              TensorSpec{"w", {int64_t{1} << 30, int64_t{1} << 30}, 4, {}},
                              TensorSpec{"w", {4, 4}, size_t{1} << 40, ShardingRule{}},
                              TensorSpec{"w", {4, 4, 4}, 4, ShardingRule{}}}) {
    proto::JoinRequest join{"a", "n1", 0, 7};
    join.state.tensors.push_back(t);
    workers_.OnJoin("id-a", Envelope("a", T::kJoin, join, 1));
    auto errors = Sent<proto::ErrorReply>(T::kError);
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_EQ(errors[0].second.code, static_cast<int32_t>(StatusCode::kInvalidArgument));
    EXPECT_EQ(membership_.Find("a"), nullptr) << "a refused join leaves no worker behind";
  }
  proto::JoinRequest fine{"a", "n1", 0, 7};
  fine.state.tensors.push_back(TensorSpec{"w", {1 << 20, 1 << 14}, 2, ShardingRule{0, -1, true}});
  workers_.OnJoin("id-a", Envelope("a", T::kJoin, fine, 1));
  EXPECT_NE(membership_.Find("a"), nullptr);
}

TEST_F(WorkerServiceTest, AMemberSilentPastTheTimeoutIsLostAndRecoveredFrom) {
  Start();
  ServiceJoin("c");  // standby
  outbox_.Take();
  clock_.Advance(Duration(1000));
  workers_.OnHeartbeat("id-a", Envelope("a", T::kHeartbeat, proto::Heartbeat{42}),
                       membership_.Find("a"));
  clock_.Advance(Duration(600));  // b and c are 1600 ms silent, a 600 ms
  workers_.ExpireHeartbeats();
  EXPECT_EQ(membership_.Find("a")->state, WorkerState::kMember);
  EXPECT_EQ(membership_.Find("a")->step, 42);
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLost);
  EXPECT_EQ(membership_.Find("c")->state, WorkerState::kLost) << "a silent standby worker";
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 1u);
  EXPECT_EQ(recover[0].first, "id-a");
  EXPECT_EQ(recover[0].second.lost, (std::vector<std::string>{"b"}));
}

TEST_F(WorkerServiceTest, LeavesAndExitsOfMembersAndStandbyWorkers) {
  Start();
  ServiceJoin("c");
  outbox_.Take();
  // A standby worker's exit just removes it.
  workers_.OnProcessExited(
      "id-agent", proto::Role::kAdmin,
      Envelope("agent", T::kProcessExited, proto::ProcessExited{"c", 0, 9}));
  EXPECT_EQ(membership_.Find("c"), nullptr);
  EXPECT_TRUE(outbox_.Take().empty());
  // A member that finished keeps its rank; when the last one finishes, the job does.
  workers_.OnLeave("id-a", Envelope("a", T::kLeave, proto::LeaveRequest{}, 5));
  EXPECT_EQ(Sent<proto::Ack>(T::kAck).size(), 1u);
  EXPECT_EQ(membership_.Find("a")->state, WorkerState::kFinished);
  EXPECT_EQ(generations_.state(), proto::JobState::kRunning);
  workers_.OnLeave("id-b", Envelope("b", T::kLeave, proto::LeaveRequest{}, 6));
  EXPECT_EQ(generations_.state(), proto::JobState::kFinished);
  EXPECT_EQ(ended_, "the job finished");
}

TEST_F(WorkerServiceTest, AMemberThatQuitsOrExitsIsRecoveredFrom) {
  Start();
  workers_.OnProcessExited(
      "id-agent", proto::Role::kAdmin,
      Envelope("agent", T::kProcessExited, proto::ProcessExited{"b", 0, 9}));
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLost);
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 1u);
  EXPECT_EQ(recover[0].second.lost, (std::vector<std::string>{"b"}));
  EXPECT_EQ(recoveries_, 1);
}

// An agent's report that a member exited 0 can arrive before the member's Leave (they travel over
// different sockets): the member finishes when its Leave comes; without one it is lost at its
// heartbeat deadline, as a silent member is.
TEST_F(WorkerServiceTest, AMemberThatExitedZeroFinishesByItsLeaveOrIsLostAtItsDeadline) {
  Start();
  workers_.OnProcessExited("id-agent", proto::Role::kAdmin,
                           Envelope("agent", T::kProcessExited, proto::ProcessExited{"a", 0, 0}));
  EXPECT_EQ(membership_.Find("a")->state, WorkerState::kMember);
  EXPECT_TRUE(Sent<proto::RecoverRequest>(T::kRecoverRequest).empty());
  workers_.OnLeave("id-a", Envelope("a", T::kLeave, proto::LeaveRequest{}, 5));
  EXPECT_EQ(membership_.Find("a")->state, WorkerState::kFinished);
  // b exits 0 and never says it leaves.
  workers_.OnProcessExited("id-agent", proto::Role::kAdmin,
                           Envelope("agent", T::kProcessExited, proto::ProcessExited{"b", 0, 0}));
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kMember);
  clock_.Advance(Duration(1600));
  workers_.ExpireHeartbeats();
  EXPECT_EQ(membership_.Find("b")->state, WorkerState::kLost);
}

TEST_F(WorkerServiceTest, ReportsNothingAwaitsAreCountedAsStale) {
  Start();
  workers_.OnPaused(Envelope("a", T::kPaused, proto::PausedReport{2, 5, {}, false}),
                    membership_.Find("a"));
  workers_.OnGenerationReady(Envelope("a", T::kGenerationReady, proto::GenerationReady{1}),
                             membership_.Find("a"));
  workers_.OnFailureReport(Envelope("a", T::kFailureReport, proto::FailureReport{0, 0, "old"}));
  workers_.OnFailureReport(Envelope("zz", T::kFailureReport, proto::FailureReport{1, 0, "?"}));
  EXPECT_EQ(outbox_.stale_messages(), 4u);
  EXPECT_EQ(generations_.state(), proto::JobState::kRunning);
  // A report that does not decode is answered to its sender and counted as malformed.
  proto::Envelope bad = Envelope("a", T::kPaused, proto::Ack{});
  bad.payload = "\x05";
  workers_.OnPaused(bad, membership_.Find("a"));
  EXPECT_EQ(Refusal(), StatusCode::kCorrupt);
  EXPECT_EQ(outbox_.malformed_frames(), 1u);
}

}  // namespace
}  // namespace elastra::coordinator
