// LoadNewestCheckpoint, one rank over a Gloo world of one: it loads the checkpoint the
// generation names into the shards of the worker's new coordinates, falls back to the previous
// committed one when the named one does not load (a corrupt shard, another job's), and says so
// when none loads. And the writer's reports: a write that completes while the worker is fenced
// (reporting off, or the lease out) stays on disk but is never reported to the coordinator.
#include "worker/disk_checkpoints.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/env.h"
#include "checkpoint/format.h"
#include "checkpoint/writer.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"
#include "worker/collection_adapter.h"

namespace elastra {
namespace {

namespace fs = std::filesystem;

class LoadNewestCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("disk_checkpoints_test." + std::to_string(getpid()));
    fs::remove_all(root_);
    GlooOptions o;
    o.store = &store_;
    o.prefix = "ckpt/";
    o.rank = 0;
    o.size = 1;
    auto comm = CreateGlooCommunicator(o);
    ASSERT_TRUE(comm.ok()) << comm.status();
    control_ = std::move(comm).value();
  }
  void TearDown() override { fs::remove_all(root_); }

  // A state of the registered shape, every element and scalar telling `step` apart.
  static void Register(TensorCollection* s) {
    ASSERT_TRUE(s->AddTensor("w", {4, 4}, DataType::kFloat64, SplitOverTp(0)).ok());
    ASSERT_TRUE(s->AddScalar(kStepScalarName, 0).ok());
    ASSERT_TRUE(s->AddScalar("cursor", 0).ok());
  }
  static void Fill(TensorCollection* s, int64_t step) {
    s->SetScalar(kStepScalarName, step);
    s->SetScalar("cursor", 100 * step);
    auto w = s->View<double>("w");
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<double>(step * 1000 + i);
  }

  // Writes and commits a one-rank checkpoint of job `job` at `step`; its directory.
  std::string Save(int64_t step, const std::string& job = "job") {
    TensorCollection s;
    Register(&s);
    Fill(&s, step);
    checkpoint::WriterOptions wo;
    wo.root = root_;
    auto writer = checkpoint::CheckpointWriter::Create(wo);
    EXPECT_TRUE(writer.ok()) << writer.status();
    checkpoint::CheckpointId id{job, step, 1};
    auto d = (*writer)->Write(id, checkpoint::ViewOf(s));
    EXPECT_TRUE(d.ok()) << d.status();
    auto dir = checkpoint::CommitCheckpoint({nullptr, root_, 5}, id, Layout{}, {*d});
    EXPECT_TRUE(dir.ok()) << dir.status();
    return JoinPath(root_, checkpoint::CheckpointDirName(step, 1));
  }

  static void Corrupt(const std::string& dir) {
    std::fstream f(JoinPath(dir, checkpoint::ShardFileName(0)),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(checkpoint::kShardHeaderBytes + 3));
    char c = 0x55;
    f.write(&c, 1);
  }

  proto::NewGeneration Generation(const std::string& dir, const Layout& layout = {}) {
    proto::NewGeneration gen;
    gen.generation = 7;
    gen.layout = layout;
    gen.checkpoint_dir = dir;
    return gen;
  }

  std::string root_;
  InMemoryKeyValueStore store_;
  std::unique_ptr<Communicator> control_;
};

TEST_F(LoadNewestCheckpointTest, LoadsTheNamedCheckpoint) {
  Save(10);
  const std::string newest = Save(20);
  TensorCollection state;
  Register(&state);
  auto bytes = LoadNewestCheckpoint(Generation(newest), Coordinates{}, "job", *control_, &state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 16 * 8);
  EXPECT_EQ(state.GetScalar(kStepScalarName), 20);
  EXPECT_EQ(state.GetScalar("cursor"), 2000);
  EXPECT_EQ(state.View<double>("w")[5], 20005.0);
}

TEST_F(LoadNewestCheckpointTest, LoadsOnlyTheShardOfTheNewCoordinates) {
  const std::string dir = Save(10);
  TensorCollection state;
  Register(&state);
  Coordinates second;
  second.rank = second.tp_rank = 1;
  auto bytes =
      LoadNewestCheckpoint(Generation(dir, Layout{1, 1, 2}), second, "job", *control_, &state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, 8 * 8);  // rows 2 and 3 of the 4x4 tensor
  auto w = state.View<double>("w");
  ASSERT_EQ(w.size(), 8u);
  EXPECT_EQ(w[0], 10008.0);
  EXPECT_EQ(w[7], 10015.0);
}

TEST_F(LoadNewestCheckpointTest, FallsBackToThePreviousWhenTheNamedOneIsCorrupt) {
  Save(10);
  const std::string newest = Save(20);
  Corrupt(newest);
  TensorCollection state;
  Register(&state);
  auto bytes = LoadNewestCheckpoint(Generation(newest), Coordinates{}, "job", *control_, &state);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(state.GetScalar(kStepScalarName), 10);
  EXPECT_EQ(state.View<double>("w")[5], 10005.0);
}

TEST_F(LoadNewestCheckpointTest, NeverLoadsAnotherJobsCheckpoint) {
  const std::string dir = Save(10, "other");
  TensorCollection state;
  Register(&state);
  auto bytes = LoadNewestCheckpoint(Generation(dir), Coordinates{}, "job", *control_, &state);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kFailedPrecondition) << bytes.status();
  EXPECT_EQ(state.GetScalar(kStepScalarName), 0);
}

TEST_F(LoadNewestCheckpointTest, NoCheckpointThatLoadsIsAFailedPrecondition) {
  const std::string only = Save(10);
  Corrupt(only);
  TensorCollection state;
  Register(&state);
  auto bytes = LoadNewestCheckpoint(Generation(only), Coordinates{}, "job", *control_, &state);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kFailedPrecondition) << bytes.status();
  EXPECT_NE(bytes.status().message().find(root_), std::string::npos) << bytes.status();
}

// The checkpoint writer of one rank with its reports caught, and the switches a fence turns.
class WorkerCheckpointReports : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.job = "job";
    options_.checkpoint_dir =
        fs::temp_directory_path() / ("disk_checkpoints_reports." + std::to_string(getpid()));
    options_.checkpoint_every = 1;
    fs::remove_all(options_.checkpoint_dir);
    ASSERT_TRUE(state_.AddTensor("w", {4, 4}, DataType::kFloat64).ok());
    ASSERT_TRUE(state_.AddScalar(kStepScalarName, 0).ok());
  }
  void TearDown() override { fs::remove_all(options_.checkpoint_dir); }

  // Restarts the writer, asks for the checkpoint of `step` and waits for it (Stop()); the steps
  // reported.
  std::vector<int64_t> WriteStep(DiskCheckpoints& checkpoints, int64_t step, bool reporting,
                                 bool lease_held) {
    std::vector<int64_t> reported;
    checkpoints.Restart(
        state_, Layout{}, 0, [&] { return lease_held; },
        [&](const proto::CheckpointWritten& r) {
          EXPECT_TRUE(r.ok) << r.error;
          reported.push_back(r.step);
        });
    checkpoints.SetReporting(reporting);
    state_.SetScalar(kStepScalarName, step);
    checkpoints.MaybeSnapshot(state_, step, 1, Layout{}, Coordinates{});
    checkpoints.Stop();  // waits for the write and its report
    // A fenced worker starts no checkpoint: no shard of its old generation appears (docs/hosts.md).
    const bool fenced = !reporting || !lease_held;
    EXPECT_EQ(fs::exists(JoinPath(
                  JoinPath(options_.checkpoint_dir,
                                       checkpoint::CheckpointDirName(step, 1)),
                  checkpoint::ShardFileName(0))),
              !fenced)
        << "the shard of step " << step << (fenced ? " was written while fenced" : " is missing");
    return reported;
  }

  WorkerOptions options_;
  TensorCollection state_;
};

TEST_F(WorkerCheckpointReports, ReportedOnlyWhileNotFenced) {
  DiskCheckpoints checkpoints(options_);
  EXPECT_EQ(WriteStep(checkpoints, 1, /*reporting=*/true, /*lease_held=*/true),
            std::vector<int64_t>{1});
  // StepEnd saw the fence: neither written nor reported.
  EXPECT_TRUE(WriteStep(checkpoints, 2, /*reporting=*/false, /*lease_held=*/true).empty());
  // The lease ran out before StepEnd looked: the snapshot's own check holds it back.
  EXPECT_TRUE(WriteStep(checkpoints, 3, /*reporting=*/true, /*lease_held=*/false).empty());
  // A new generation's writer reports again.
  EXPECT_EQ(WriteStep(checkpoints, 4, true, true), std::vector<int64_t>{4});
}

}  // namespace
}  // namespace elastra
