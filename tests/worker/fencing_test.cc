// Fencing (docs/hosts.md, "Partitions and fencing"). DecideAfterFence as a pure function over the
// job's status, and a real Worker against a scripted coordinator (FakeCoordinator) that answers
// heartbeats until the test cuts it off: the worker's lease runs out, StepEnd stops counting steps
// and asks the coordinator where it stands, and then, by what the coordinator says,
//   - goes on in the same generation (a short partition: nothing changed),
//   - recovers through the normal path (the job was recovering), rolling back to a commit made
//     before the fence,
//   - stops with a clear error (declared lost), or parks as standby (park_when_removed).
// In every case no step after the fence is committed, counted or reported as a checkpoint.
// The lease is short (560 ms); the tests wait for the worker's messages, never for time.
#include "worker/fencing.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "elastra/worker.h"
#include "tests/worker/fake_coordinator.h"

namespace elastra {
namespace {

using proto::JobState;
using proto::MessageType;
using proto::WorkerState;
using std::chrono::milliseconds;
using testing::FakeCoordinator;

proto::JobStatus StatusOf(JobState state, uint64_t generation, WorkerState mine) {
  proto::JobStatus s;
  s.state = state;
  s.generation = generation;
  proto::WorkerStatus other;
  other.id = "w1";
  other.state = WorkerState::kMember;
  proto::WorkerStatus me;
  me.id = "w0";
  me.state = mine;
  s.workers = {other, me};
  return s;
}

TEST(WorkerFenceDecision, ResumesOnlyWhenTheCoordinatorRunsItsGenerationWithIt) {
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 3, WorkerState::kMember), "w0", 3),
            FenceOutcome::kResume);
  // A pause in flight is taken up by the step agreement, as for any member.
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kPausing, 3, WorkerState::kMember), "w0", 3),
            FenceOutcome::kResume);
}

TEST(WorkerFenceDecision, AJobThatIsChangingGoesThroughTheNormalPath) {
  for (JobState state : {JobState::kRecovering, JobState::kBuilding, JobState::kForming}) {
    EXPECT_EQ(DecideAfterFence(StatusOf(state, 3, WorkerState::kMember), "w0", 3),
              FenceOutcome::kRecover)
        << proto::ToString(state);
  }
  // Another generation committed (the worker cannot be in it: it never reported ready).
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 4, WorkerState::kMember), "w0", 3),
            FenceOutcome::kRecover);
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 2, WorkerState::kMember), "w0", 3),
            FenceOutcome::kRecover);
  // Told to leave by a shrink: the NewGeneration that says so decides.
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kBuilding, 3, WorkerState::kLeaving), "w0", 3),
            FenceOutcome::kRecover);
}

TEST(WorkerFenceDecision, LostStandbyOrUnknownMeansTheJobWentOnWithoutIt) {
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 4, WorkerState::kLost), "w0", 3),
            FenceOutcome::kRemoved);
  // Declared lost while the others still recover: same generation number, but not its member.
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRecovering, 3, WorkerState::kLost), "w0", 3),
            FenceOutcome::kRemoved);
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 3, WorkerState::kStandby), "w0", 3),
            FenceOutcome::kRemoved);
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kRunning, 3, WorkerState::kMember), "w9", 3),
            FenceOutcome::kRemoved);
}

TEST(WorkerFenceDecision, TheJobsEndComesFirst) {
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kFinished, 3, WorkerState::kMember), "w0", 3),
            FenceOutcome::kJobFinished);
  EXPECT_EQ(DecideAfterFence(StatusOf(JobState::kFailed, 3, WorkerState::kLost), "w0", 3),
            FenceOutcome::kJobFailed);
}

// One StepEnd as the training thread saw it.
struct Outcome {
  StatusOr<StepAction> action;
  int64_t step;         // worker->step() after it
  uint64_t generation;  // worker->generation() after it
};

// A training loop on its own thread (the Worker is the training thread's): each step adds one to
// the state, then StepEnd. It stops at an error, kLeave, or when asked.
class Trainer {
 public:
  explicit Trainer(Worker* worker) : worker_(worker), thread_([this] { Run(); }) {}
  ~Trainer() { Stop(); }

  // The newest step that StepEnd counted (kContinue).
  int64_t last_counted() const { return last_counted_.load(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  std::vector<Outcome> outcomes() {
    std::lock_guard<std::mutex> lock(mu_);
    return outcomes_;
  }

 private:
  void Run() {
    while (!stop_) {
      std::this_thread::sleep_for(milliseconds(2));  // pace: a few hundred steps per lease
      auto w = worker_->state().View<double>("w");
      w[0] += 1;
      auto action = worker_->StepEnd(OkStatus());
      {
        std::lock_guard<std::mutex> lock(mu_);
        outcomes_.push_back({action, worker_->step(), worker_->generation()});
      }
      if (!action.ok() || *action == StepAction::kLeave) return;
      if (*action == StepAction::kContinue) last_counted_ = worker_->step();
    }
  }

  Worker* worker_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> last_counted_{-1};
  std::mutex mu_;
  std::vector<Outcome> outcomes_;
  std::thread thread_;  // last: starts once the rest exists
};

class WorkerFence : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("fencing_test." + std::to_string(getpid()) + "." +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    FakeCoordinator::Options fo;
    fo.heartbeat_interval = milliseconds(20);
    fo.heartbeat_timeout = milliseconds(600);  // lease: 600 - 2 * 20 = 560 ms
    fake_ = std::make_unique<FakeCoordinator>(fo);
  }
  void TearDown() override {
    trainer_.reset();
    worker_.reset();
    fake_.reset();
    std::filesystem::remove_all(dir_);
  }

  void StartWorker(bool park_when_removed = false) {
    WorkerOptions o = fake_->WorkerOptionsFor("w0");
    o.commit_every = 1;
    o.checkpoint_dir = dir_;
    o.checkpoint_every = 1;
    o.decision_timeout = milliseconds(60000);
    o.park_when_removed = park_when_removed;
    auto worker = Worker::Create(o);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(worker).value();
    ASSERT_TRUE(worker_->state().AddTensor("w", {8}, DataType::kFloat64).ok());
    ASSERT_TRUE(worker_->Start().ok());
    ASSERT_EQ(worker_->generation(), 1u);
    trainer_ = std::make_unique<Trainer>(worker_.get());
    // Training runs and its checkpoints are reported.
    ASSERT_TRUE(fake_->WaitFor(MessageType::kCheckpointWritten, 3).has_value());
  }

  // Cuts the coordinator off and waits until the worker, fenced, asks where it stands (the only
  // reason a training member sends a StatusRequest). The newest step counted before the fence.
  int64_t PartitionUntilFenced() {
    fake_->SetSilent(true);
    EXPECT_TRUE(fake_->WaitFor(MessageType::kStatusRequest, 1, /*heard=*/false).has_value())
        << "the worker never fenced itself";
    return trainer_->last_counted();
  }

  // No checkpoint was reported, then or later, for a step after `fenced_at`.
  void ExpectNoCheckpointAfter(int64_t fenced_at, uint64_t generation) {
    for (const auto& r : fake_->All(MessageType::kCheckpointWritten)) {
      auto report = proto::DecodePayload<proto::CheckpointWritten>(r.envelope.payload);
      ASSERT_TRUE(report.ok());
      if (report->generation == generation) {
        EXPECT_LE(report->step, fenced_at) << "a checkpoint of a step after the fence was reported";
      }
    }
  }

  std::string dir_;
  std::unique_ptr<FakeCoordinator> fake_;
  std::unique_ptr<Worker> worker_;
  std::unique_ptr<Trainer> trainer_;
};

// The coordinator was down or cut off for longer than the lease, but nothing changed (a slow
// coordinator restart looks the same): the fenced step counts once the coordinator confirmed,
// and training goes on in the same generation, without a recovery round.
TEST_F(WorkerFence, ShortPartitionGoesOnInTheSameGeneration) {
  StartWorker();
  const int64_t fenced_at = PartitionUntilFenced();
  ASSERT_GE(fenced_at, 1);
  // The fenced StepEnd has not returned: nothing counted while the coordinator is silent.
  EXPECT_EQ(trainer_->last_counted(), fenced_at);
  fake_->SetSilent(false);  // the default status: running generation 1, w0 a member
  ASSERT_TRUE(
      fake_->WaitUntil([&](const auto&) { return trainer_->last_counted() >= fenced_at + 5; }));
  // Checkpoints are reported again, for steps after the fence too.
  ASSERT_TRUE(fake_->WaitUntil([&](const auto& all) {
    for (const auto& r : all) {
      if (r.envelope.type != MessageType::kCheckpointWritten || !r.heard) continue;
      auto report = proto::DecodePayload<proto::CheckpointWritten>(r.envelope.payload);
      if (report.ok() && report->step > fenced_at) return true;
    }
    return false;
  }));
  trainer_->Stop();
  const auto outcomes = trainer_->outcomes();
  int64_t previous = 0;
  for (const auto& o : outcomes) {
    ASSERT_TRUE(o.action.ok()) << o.action.status();
    EXPECT_EQ(*o.action, StepAction::kContinue);
    EXPECT_EQ(o.generation, 1u);
    EXPECT_EQ(o.step, previous + 1) << "each step counts exactly once";
    previous = o.step;
  }
  EXPECT_TRUE(fake_->All(MessageType::kFailureReport).empty());
  EXPECT_TRUE(fake_->All(MessageType::kPaused).empty());
  worker_->Finish();
}

// The partition healed while the coordinator recovered the job: the worker reports the failure
// and follows the coordinator's RecoverRequest and NewGeneration. Its newest commit is the last
// step counted before the fence, and the next generation rolls back there.
TEST_F(WorkerFence, PartitionDuringARecoveryRecoversThroughTheCoordinator) {
  StartWorker();
  const int64_t fenced_at = PartitionUntilFenced();
  fake_->SetStatus(fake_->DefaultStatus(JobState::kRecovering));
  fake_->SetSilent(false);
  ASSERT_TRUE(fake_->WaitFor(MessageType::kFailureReport, 1, /*heard=*/true).has_value());
  fake_->Push("w0", MessageType::kRecoverRequest, proto::RecoverRequest{2, {}}, 1);
  auto paused = fake_->WaitFor(MessageType::kPaused);
  ASSERT_TRUE(paused.has_value());
  auto report = proto::DecodePayload<proto::PausedReport>(paused->payload);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->failed);
  ASSERT_FALSE(report->commit_steps.empty());
  // commit_every 1: the newest commit is of the last step counted, none of a step after it.
  EXPECT_EQ(*std::max_element(report->commit_steps.begin(), report->commit_steps.end()), fenced_at);

  fake_->SetGeneration(2);
  fake_->SetStatus(std::nullopt);
  fake_->Push("w0", MessageType::kNewGeneration,
              FakeCoordinator::SoloGeneration("w0", 2, fenced_at, fake_->JoinedState()));
  ASSERT_TRUE(
      fake_->WaitUntil([&](const auto&) { return trainer_->last_counted() >= fenced_at + 3; }));
  trainer_->Stop();
  const auto outcomes = trainer_->outcomes();
  auto reconfigured = std::find_if(outcomes.begin(), outcomes.end(), [](const Outcome& o) {
    return o.action.ok() && *o.action == StepAction::kReconfigured;
  });
  ASSERT_NE(reconfigured, outcomes.end());
  EXPECT_EQ(reconfigured->step, fenced_at) << "rolled back to the commit made before the fence";
  EXPECT_EQ(reconfigured->generation, 2u);
  for (auto it = outcomes.begin(); it != reconfigured; ++it) {
    EXPECT_LE(it->step, fenced_at);
  }
  ExpectNoCheckpointAfter(fenced_at, 1);
  worker_->Finish();
}

// Declared lost during the partition: the coordinator's Shutdown ends the worker with a clear
// error (its program exits 1 and its agent may start a fresh one), and the step it was fenced in
// never counts.
TEST_F(WorkerFence, DeclaredLostWhileFencedStopsWithoutCountingTheStep) {
  StartWorker();
  const int64_t fenced_at = PartitionUntilFenced();
  fake_->SetStatus(StatusOf(JobState::kRunning, 2, WorkerState::kLost));
  fake_->Push("w0", MessageType::kShutdown,
              proto::Shutdown{1, "declared lost: missed heartbeat deadline"});
  fake_->SetSilent(false);
  trainer_->Stop();  // returns once StepEnd gave up
  const auto outcomes = trainer_->outcomes();
  ASSERT_FALSE(outcomes.empty());
  const Outcome& last = outcomes.back();
  ASSERT_FALSE(last.action.ok());
  EXPECT_EQ(last.action.status().code(), StatusCode::kAborted);
  EXPECT_NE(last.action.status().message().find("lost"), std::string::npos) << last.action.status();
  EXPECT_EQ(trainer_->last_counted(), fenced_at);
  for (size_t i = 0; i + 1 < outcomes.size(); ++i) EXPECT_LE(outcomes[i].step, fenced_at);
  ExpectNoCheckpointAfter(fenced_at, 1);
  EXPECT_TRUE(fake_->All(MessageType::kFailureReport).empty());
}

// Under mpirun a rank cannot be started again: declared lost, the worker parks as standby (joins
// again under its own id) instead of exiting, and leaves when the job finishes.
TEST_F(WorkerFence, DeclaredLostWhileFencedParksWithParkWhenRemoved) {
  StartWorker(/*park_when_removed=*/true);
  const int64_t fenced_at = PartitionUntilFenced();
  fake_->SetStatus(StatusOf(JobState::kRunning, 2, WorkerState::kLost));
  fake_->Push("w0", MessageType::kShutdown,
              proto::Shutdown{1, "declared lost: missed heartbeat deadline"});
  fake_->SetSilent(false);
  ASSERT_TRUE(fake_->WaitFor(MessageType::kJoin, 2).has_value()) << "never joined as standby";
  fake_->Push("w0", MessageType::kShutdown, proto::Shutdown{0, "every member finished"});
  trainer_->Stop();
  const auto outcomes = trainer_->outcomes();
  ASSERT_FALSE(outcomes.empty());
  ASSERT_TRUE(outcomes.back().action.ok()) << outcomes.back().action.status();
  EXPECT_EQ(*outcomes.back().action, StepAction::kLeave);
  EXPECT_EQ(trainer_->last_counted(), fenced_at);
  ExpectNoCheckpointAfter(fenced_at, 1);
}

}  // namespace
}  // namespace elastra
