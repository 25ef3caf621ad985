// The coordinator commits a checkpoint's manifest only when every rank of its generation reported
// its shard file durable, never when one failed or the manifest could not be written; the newest
// commit is what later generations are told to load from.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "protocol/codec.h"
#include "coordinator/coordinator_core.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"

namespace elastra::coordinator {
namespace {

namespace fs = std::filesystem;
using T = proto::MessageType;

class CheckpointCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("elastra_commit_test_" + std::to_string(getpid())))
                .string();
    fs::remove_all(root_);
    MakeCore(Env::Default());
  }
  void TearDown() override { fs::remove_all(root_); }

  void MakeCore(Env* env) {
    CoordinatorOptions o;
    o.job = "job";
    o.initial_workers = 2;
    o.clock = &clock_;
    o.env = env;
    core_ = std::make_unique<CoordinatorCore>(o);
  }

  std::vector<proto::Envelope> Send(const std::string& id, T type, const std::string& payload) {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = id;
    e.payload = payload;
    std::vector<proto::Envelope> sent;
    for (const auto& o : core_->Handle("id-" + id, proto::Role::kWorker, e)) {
      auto d = proto::DecodeEnvelope(o.frame);
      EXPECT_TRUE(d.ok()) << d.status();
      if (d.ok()) sent.push_back(*d);
    }
    return sent;
  }
  template <class P>
  std::vector<proto::Envelope> Send(const std::string& id, T type, const P& payload) {
    return Send(id, type, proto::EncodePayload(payload));
  }
  static std::vector<proto::Envelope> OfType(const std::vector<proto::Envelope>& sent, T type) {
    std::vector<proto::Envelope> out;
    for (const auto& e : sent) {
      if (e.type == type) out.push_back(e);
    }
    return out;
  }

  // Writes rank `rank`'s half of a 2 x 4 float tensor for step `step` and returns the report.
  proto::CheckpointWritten WriteShard(int rank, int64_t step) {
    checkpoint::WriterOptions o;
    o.root = root_;
    o.rank = rank;
    o.direct_io = false;
    auto writer = checkpoint::CheckpointWriter::Create(o);
    EXPECT_TRUE(writer.ok()) << writer.status();
    std::vector<float> row(4, static_cast<float>(rank + step));
    checkpoint::TensorShard shard;
    shard.name = "w";
    shard.shape = {2, 4};
    shard.dtype = DataType::kFloat32;
    shard.region = checkpoint::Box{{rank, 0}, {rank + 1, 4}};
    shard.data = std::span<const std::byte>(reinterpret_cast<const std::byte*>(row.data()),
                                            row.size() * sizeof(float));
    checkpoint::StateView view;
    view.tensors.push_back(shard);
    view.scalars = {{"elastra.step", step}};
    checkpoint::CheckpointId id{"job", step, 1};
    EXPECT_TRUE((*writer)->Snapshot(id, view).ok());
    auto d = (*writer)->WaitForWrite();
    EXPECT_TRUE(d.ok()) << d.status();
    proto::CheckpointWritten report;
    report.generation = 1;
    report.step = step;
    report.rank = rank;
    report.ranks = 2;
    report.layout = Layout{2, 1, 1};
    report.root = root_;
    report.ok = d.ok();
    if (d.ok()) report.descriptor = checkpoint::EncodeShardDescriptor(*d);
    return report;
  }

  // Workers a and b join and form generation 1 (2 ranks): only members report checkpoints.
  void FormGeneration() {
    Send("a", T::kJoin, proto::JoinRequest{"a", "host-a", 0, 1});
    Send("b", T::kJoin, proto::JoinRequest{"b", "host-b", 0, 2});
    Send("a", T::kGenerationReady, proto::GenerationReady{1, 0, 0, 0});
    Send("b", T::kGenerationReady, proto::GenerationReady{1, 0, 0, 0});
    ASSERT_EQ(core_->generation(), 1u);
  }

  size_t Committed() {
    auto list = checkpoint::ListCheckpoints(Env::Default(), root_);
    return list.ok() ? list->size() : 0;
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  std::string root_;
};

TEST_F(CheckpointCommitTest, CommitsOnlyWhenEveryRankReported) {
  FormGeneration();
  auto first = WriteShard(0, 10);
  Send("a", T::kCheckpointWritten, proto::EncodePayload(first));
  EXPECT_EQ(Committed(), 0u) << "committed with one rank of two";
  auto second = WriteShard(1, 10);
  Send("b", T::kCheckpointWritten, proto::EncodePayload(second));
  ASSERT_EQ(Committed(), 1u);
  auto list = checkpoint::ListCheckpoints(Env::Default(), root_);
  EXPECT_EQ(list->front().step, 10);
  EXPECT_EQ(list->front().layout, (Layout{2, 1, 1}));
}

TEST_F(CheckpointCommitTest, AFailedRankMeansNoCommit) {
  FormGeneration();
  Send("a", T::kCheckpointWritten, proto::EncodePayload(WriteShard(0, 20)));
  auto failed = WriteShard(1, 20);
  failed.ok = false;
  failed.descriptor.clear();
  failed.error = "kResourceExhausted: disk full";
  Send("b", T::kCheckpointWritten, proto::EncodePayload(failed));
  EXPECT_EQ(Committed(), 0u);
  // The status says why, and which step.
  proto::JobStatus st = core_->Snapshot();
  EXPECT_EQ(st.checkpoint_error_step, 20);
  EXPECT_EQ(st.checkpoint_error, "rank 1: kResourceExhausted: disk full");
  EXPECT_EQ(st.checkpoint_step, -1);
  // A later checkpoint that every rank wrote is committed.
  Send("a", T::kCheckpointWritten, proto::EncodePayload(WriteShard(0, 30)));
  Send("b", T::kCheckpointWritten, proto::EncodePayload(WriteShard(1, 30)));
  EXPECT_EQ(Committed(), 1u);
  st = core_->Snapshot();
  EXPECT_EQ(st.checkpoint_step, 30);
  EXPECT_EQ(st.checkpoint_dir, checkpoint::CheckpointDir(root_, {"job", 30, 1}));
  EXPECT_EQ(st.checkpoint_error_step, 20) << "the failure stays, older than the commit";
}

// A report of a generation that is no longer the committed one (a worker stopped mid-write and
// woken after its eviction, or a replayed message), or from a worker that is not a member, is
// stale: counted, and never part of a commit, even when it would complete one.
TEST_F(CheckpointCommitTest, ReportsOfAnOlderGenerationOrFromNonMembersNeverCommit) {
  FormGeneration();
  Send("a", T::kCheckpointWritten, WriteShard(0, 10));
  auto stranger = WriteShard(1, 10);
  Send("c", T::kCheckpointWritten, stranger);  // not a member: would complete step 10
  EXPECT_EQ(Committed(), 0u);
  EXPECT_EQ(core_->stale_messages(), 1u);
  auto old = WriteShard(1, 10);
  old.generation = 0;
  Send("b", T::kCheckpointWritten, old);
  EXPECT_EQ(Committed(), 0u);
  EXPECT_EQ(core_->stale_messages(), 2u);
  Send("b", T::kCheckpointWritten, WriteShard(1, 10));
  EXPECT_EQ(Committed(), 1u);
  EXPECT_EQ(core_->stale_messages(), 2u);
}

TEST_F(CheckpointCommitTest, GarbageReportsAreCountedNotCommitted) {
  FormGeneration();
  auto report = WriteShard(0, 40);
  report.rank = 5;  // outside [0, ranks)
  Send("a", T::kCheckpointWritten, proto::EncodePayload(report));
  auto bad = WriteShard(1, 40);
  bad.descriptor = "not a descriptor";
  Send("b", T::kCheckpointWritten, proto::EncodePayload(bad));
  Send("c", T::kCheckpointWritten, "\\x01garbage");
  EXPECT_EQ(Committed(), 0u);
  EXPECT_GE(core_->malformed_frames(), 2u);
}

// The commit's own write fails (the disk is full): no checkpoint appears, the job goes on, and
// the previous checkpoint stays the one a new generation is told to load from.
TEST_F(CheckpointCommitTest, AFullDiskAtCommitKeepsThePreviousCheckpoint) {
  FaultInjectionEnv env(Env::Default());
  MakeCore(&env);
  FormGeneration();

  Send("a", T::kCheckpointWritten, WriteShard(0, 10));
  Send("b", T::kCheckpointWritten, WriteShard(1, 10));
  ASSERT_EQ(Committed(), 1u);
  ASSERT_EQ(core_->checkpoints().size(), 1u);
  const std::string step10 = core_->checkpoints().back().dir;

  env.SetDiskSpace(0);  // the shard files are on disk; the manifest does not fit
  Send("a", T::kCheckpointWritten, WriteShard(0, 20));
  Send("b", T::kCheckpointWritten, WriteShard(1, 20));
  EXPECT_EQ(Committed(), 1u) << "a checkpoint whose manifest was not written counts as committed";
  const fs::path step20 = checkpoint::CheckpointDir(root_, {"job", 20, 1});
  EXPECT_FALSE(fs::exists(step20 / checkpoint::kManifestName));
  ASSERT_EQ(core_->checkpoints().size(), 1u);
  EXPECT_EQ(core_->checkpoints().back().step, 10);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  env.Reset();

  // The job goes on: a failure is recovered from, and the new generation loads step 10.
  auto recover = Send("a", T::kFailureReport, proto::FailureReport{1, 0, "allreduce failed"});
  EXPECT_EQ(OfType(recover, T::kRecoverRequest).size(), 2u);
  const uint64_t target = core_->generation() + 1;
  proto::PausedReport paused{target, 12, {10}, true};
  Send("a", T::kPaused, paused);
  auto built = OfType(Send("b", T::kPaused, paused), T::kNewGeneration);
  ASSERT_EQ(built.size(), 2u);
  auto ng = proto::DecodePayload<proto::NewGeneration>(built[0].payload);
  ASSERT_TRUE(ng.ok()) << ng.status();
  EXPECT_EQ(ng->checkpoint_dir, step10);

  // And a later checkpoint commits once the disk has room again.
  Send("a", T::kCheckpointWritten, WriteShard(0, 30));
  Send("b", T::kCheckpointWritten, WriteShard(1, 30));
  EXPECT_EQ(Committed(), 2u);
  EXPECT_EQ(core_->checkpoints().back().step, 30);
}

}  // namespace
}  // namespace elastra::coordinator
