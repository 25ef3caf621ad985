// TrainingMetrics on a stepped FakeClock: samples counted once per replica and their rate, the
// lowest-ranked member's value of each name, bad names dropped, goodput as time running over time
// since start, and the series bounded.
#include "coordinator/training_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace elastra::coordinator {
namespace {

using proto::Heartbeat;
using proto::JobState;
using proto::TrainingMetric;
using proto::WorkerState;

class TrainingMetricsTest : public ::testing::Test {
 protected:
  // Four members as dp=2 x tp=2: ranks 0 and 2 are tensor rank 0 of their replica.
  void SetUp() override {
    for (const char* id : {"w0", "w1", "w2", "w3"}) {
      proto::JoinRequest j;
      j.worker_id = id;
      j.host = "h";
      ASSERT_TRUE(membership_.Join(j, id).ok());
    }
    membership_.AssignRanks({"w0", "w1", "w2", "w3"});
    for (const char* id : {"w0", "w1", "w2", "w3"}) membership_.SetState(id, WorkerState::kMember);
  }

  void Beat(const std::string& id, int64_t step, int64_t samples,
            std::vector<TrainingMetric> metrics = {}) {
    metrics_.OnHeartbeat(id, Heartbeat{step, samples, std::move(metrics)}, layout_);
  }

  FakeClock clock_;
  Membership membership_;
  Layout layout_{2, 1, 2};
  TrainingMetrics metrics_{&clock_, &membership_};
};

TEST_F(TrainingMetricsTest, SamplesCountOncePerReplicaAndTheirRateFollowsTheClock) {
  Beat("w0", 0, 0);
  Beat("w2", 0, 0);
  for (int second = 1; second <= 3; ++second) {
    clock_.Advance(Duration(1000));
    // Each replica consumed 16 samples per step, 10 steps a second; its TP peer reports the same.
    for (const char* id : {"w0", "w1", "w2", "w3"}) Beat(id, 10 * second, 160 * second);
  }
  const proto::TrainingStatus s = metrics_.Snapshot();
  EXPECT_EQ(s.samples, 2 * 480) << "the tensor-parallel peers' reports are not counted";
  ASSERT_EQ(s.series.size(), 3u);
  EXPECT_EQ(s.series.back().step, 30);
  EXPECT_DOUBLE_EQ(s.samples_per_second, 320.0);
  // A restarted process counts from zero again; a replica that stops reporting leaves the rate.
  clock_.Advance(Duration(1000));
  Beat("w0", 40, 16);
  EXPECT_EQ(metrics_.Snapshot().samples, 2 * 480 + 16);
  clock_.Advance(Duration(5000));
  EXPECT_EQ(metrics_.Snapshot().samples_per_second, 0) << "no samples came for 5 s";
}

TEST_F(TrainingMetricsTest, TheJobsValueIsTheLowestRankedMembersAndBadNamesAreDropped) {
  Beat("w1", 5, 0, {{"loss", 2.0, 5}, {"bad name", 1.0, 5}, {"lr", 0.1, 5}});
  Beat("w0", 5, 0, {{"loss", 1.5, 5}, {"nan", std::nan(""), 5}});
  Beat("w3", 5, 0, {{"grad_norm", 7.0, 5}});
  auto s = metrics_.Snapshot();
  ASSERT_EQ(s.metrics.size(), 3u);
  EXPECT_EQ(s.metrics[0].name, "grad_norm");
  EXPECT_EQ(s.metrics[0].value, 7.0);
  EXPECT_EQ(s.metrics[1].name, "loss");
  EXPECT_EQ(s.metrics[1].value, 1.5) << "rank 0's, not rank 1's";
  EXPECT_EQ(s.metrics[2].name, "lr");
  // A worker no longer a member no longer speaks for the job.
  membership_.SetState("w0", WorkerState::kLost);
  s = metrics_.Snapshot();
  ASSERT_EQ(s.metrics.size(), 3u);
  EXPECT_EQ(s.metrics[1].value, 2.0);
}

// Numbers are kept by the worker's slot in Membership: a worker that takes over the slot of one
// removed (here under the same id, a new process) starts with none of its predecessor's numbers,
// and a heartbeat without metrics clears the worker's own.
TEST_F(TrainingMetricsTest, AWorkerInARemovedWorkersSlotStartsAfresh) {
  Beat("w0", 5, 100, {{"loss", 1.5, 5}});
  const uint32_t slot = membership_.Find("w0")->slot;
  membership_.Remove("w0");
  proto::JoinRequest j;
  j.worker_id = "w0";
  j.host = "h";
  ASSERT_TRUE(membership_.Join(j, "w0").ok());
  ASSERT_EQ(membership_.Find("w0")->slot, slot) << "the freed slot is reused";
  membership_.AssignRanks({"w0", "w1", "w2", "w3"});
  EXPECT_TRUE(metrics_.Snapshot().metrics.empty()) << "the removed worker's loss is gone";
  Beat("w0", 6, 40);  // a fresh process: its 40 samples count in full
  EXPECT_EQ(metrics_.Snapshot().samples, 100 + 40);
  Beat("w0", 7, 60, {{"loss", 1.2, 7}});
  ASSERT_EQ(metrics_.Snapshot().metrics.size(), 1u);
  EXPECT_EQ(metrics_.Snapshot().samples, 100 + 60);
  Beat("w0", 8, 60);
  EXPECT_TRUE(metrics_.Snapshot().metrics.empty()) << "the latest heartbeat had none";
}

TEST_F(TrainingMetricsTest, AtMostSixteenNamesPerWorkerAreKept) {
  std::vector<TrainingMetric> many;
  for (int i = 0; i < 40; ++i) many.push_back({"m" + std::to_string(i), 1.0 * i, 1});
  Beat("w0", 1, 0, many);
  EXPECT_EQ(metrics_.Snapshot().metrics.size(), proto::kMaxTrainingMetrics);
}

TEST_F(TrainingMetricsTest, GoodputIsTimeRunningOverTimeSinceStart) {
  metrics_.ObserveState(JobState::kForming);
  clock_.Advance(Duration(1000));
  metrics_.ObserveState(JobState::kRunning);
  clock_.Advance(Duration(6000));
  metrics_.ObserveState(JobState::kPausing);
  clock_.Advance(Duration(1000));
  metrics_.ObserveState(JobState::kRunning);
  clock_.Advance(Duration(2000));
  metrics_.ObserveState(JobState::kRunning);
  const auto s = metrics_.Snapshot();
  EXPECT_DOUBLE_EQ(s.wall_seconds, 10.0);
  EXPECT_DOUBLE_EQ(s.running_seconds, 8.0);
  EXPECT_DOUBLE_EQ(s.goodput, 0.8);
}

TEST_F(TrainingMetricsTest, TheSeriesKeepsTheNewestPoints) {
  for (size_t i = 0; i <= TrainingMetrics::kMaxPoints + 10; ++i) {
    Beat("w0", static_cast<int64_t>(i), static_cast<int64_t>(i) * 8);
    clock_.Advance(TrainingMetrics::kPointInterval);
  }
  const auto s = metrics_.Snapshot();
  ASSERT_EQ(s.series.size(), TrainingMetrics::kMaxPoints);
  EXPECT_EQ(s.series.back().step, static_cast<int64_t>(TrainingMetrics::kMaxPoints + 10));
  EXPECT_EQ(s.series.front().step, 11);
}

}  // namespace
}  // namespace elastra::coordinator
