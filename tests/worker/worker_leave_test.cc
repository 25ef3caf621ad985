// How a Worker leaves the job outside the training loop, against a scripted coordinator
// (FakeCoordinator):
//   - a standby that never held a rank (a hot spare) and is let go with a Shutdown of code 0 (a
//     spare no longer needed, the job finished) is dismissed: Start() fails (kAborted, with the
//     coordinator's reason), dismissed() is true, and the coordinator gets its Leave; it does so
//     under park_when_removed too, with nothing to park for;
//   - one stopped with code 1 (declared lost, the job failed) is not dismissed;
//   - Leave() (Python's Worker.close()) tells the coordinator with a Leave, and refuses the loop
//     afterwards.
// The tests wait for the worker's messages, never for time.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>

#include "elastra/worker.h"
#include "tests/worker/fake_coordinator.h"

namespace elastra {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;
using testing::FakeCoordinator;

constexpr char kNotNeeded[] = "the job keeps 0 spare(s); this standby is not needed";

class WorkerLeave : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeCoordinator::Options fo;
    fo.form_on_join = false;  // the worker waits as a standby until the test says otherwise
    fake_ = std::make_unique<FakeCoordinator>(fo);
  }

  std::unique_ptr<Worker> Create(bool park_when_removed = false) {
    WorkerOptions o = fake_->WorkerOptionsFor("w0");
    o.decision_timeout = milliseconds(60000);
    o.park_when_removed = park_when_removed;
    auto worker = Worker::Create(o);
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return nullptr;
    EXPECT_TRUE((*worker)->state().AddTensor("w", {8}, DataType::kFloat64).ok());
    return std::move(worker).value();
  }

  // Start() of a standby that the coordinator stops, once it joined, with `code` and `reason`.
  Status StartAndStop(Worker* worker, int32_t code, const std::string& reason) {
    auto started = std::async(std::launch::async, [worker] { return worker->Start(); });
    EXPECT_TRUE(fake_->WaitFor(MessageType::kJoin).has_value()) << "the worker never joined";
    fake_->Push("w0", MessageType::kShutdown, proto::Shutdown{code, reason});
    return started.get();
  }

  // The detail of the `nth` Leave the coordinator received, with its reason kQuit.
  std::string QuitDetail(int nth = 1) {
    auto leave = fake_->WaitFor(MessageType::kLeave, nth);
    if (!leave.has_value()) return "(no Leave)";
    auto req = proto::DecodePayload<proto::LeaveRequest>(leave->payload);
    if (!req.ok()) return "(undecodable Leave)";
    EXPECT_EQ(req->reason, proto::LeaveReason::kQuit);
    return req->detail;
  }

  std::unique_ptr<FakeCoordinator> fake_;
};

TEST_F(WorkerLeave, AStandbyLetGoCleanlyIsDismissed) {
  auto worker = Create();
  ASSERT_NE(worker, nullptr);
  EXPECT_FALSE(worker->dismissed());
  Status s = StartAndStop(worker.get(), 0, kNotNeeded);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_EQ(s.message(), std::string("dismissed before holding a rank: ") + kNotNeeded);
  EXPECT_TRUE(worker->dismissed());
  // It said goodbye: the coordinator need not wait out its heartbeats.
  EXPECT_EQ(QuitDetail(), std::string("standby: ") + kNotNeeded);
  EXPECT_EQ(worker->StepEnd(OkStatus()).status().code(), StatusCode::kFailedPrecondition);
}

// Under mpirun a removed member parks; a standby that never held a rank has nothing to park for.
TEST_F(WorkerLeave, AStandbyLetGoCleanlyLeavesEvenWhenItWouldPark) {
  auto worker = Create(/*park_when_removed=*/true);
  ASSERT_NE(worker, nullptr);
  Status s = StartAndStop(worker.get(), 0, "every member finished");
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(worker->dismissed());
  EXPECT_EQ(QuitDetail(), "standby: every member finished");
  EXPECT_EQ(fake_->All(MessageType::kJoin).size(), 1u) << "it joined again to park";
}

TEST_F(WorkerLeave, AStandbyStoppedAsLostIsNotDismissed) {
  auto worker = Create();
  ASSERT_NE(worker, nullptr);
  Status s = StartAndStop(worker.get(), 1, "declared lost: missed heartbeat deadline");
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("declared lost"), std::string::npos) << s;
  EXPECT_FALSE(worker->dismissed());
}

TEST_F(WorkerLeave, LeaveTellsTheCoordinator) {
  fake_ = std::make_unique<FakeCoordinator>(FakeCoordinator::Options{});  // forms generation 1
  auto worker = Create();
  ASSERT_NE(worker, nullptr);
  ASSERT_TRUE(worker->Start().ok());
  EXPECT_FALSE(worker->dismissed());
  worker->Leave("closed by the test");
  EXPECT_EQ(QuitDetail(), "closed by the test");
  worker->Leave("again");  // nothing: it left already
  EXPECT_EQ(fake_->All(MessageType::kLeave).size(), 1u);
  EXPECT_EQ(worker->StepEnd(OkStatus()).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(worker->Start().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace elastra
