// The checkpoint manager on its own, over a FaultInjectionEnv: it commits a step once every rank
// reported it, keeps the newest K, and when the commit's own write fails or the power is cut
// before the manifest's rename, nothing is committed and the previous checkpoint stays the latest.
// With messages queued behind a report, a commit waits for the tick and the newest ready one wins.
#include "coordinator/checkpoint_manager.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "checkpoint/writer.h"
#include "journal/events.h"
#include "journal/journal.h"
#include <nlohmann/json.hpp>

namespace elastra::coordinator {
namespace {

namespace fs = std::filesystem;
using journal::JournalEventReader;

class CheckpointManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ =
        (fs::temp_directory_path() / ("elastra_ckpt_manager_" + std::to_string(getpid()))).string();
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // Rank `rank`'s half of a 2 x 4 float tensor at `step`, written to disk, as its report.
  proto::CheckpointWritten Shard(int rank, int64_t step) {
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
    auto d = (*writer)->Write(checkpoint::CheckpointId{"job", step, 1}, view);
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

  // Both ranks report `step`.
  void BothWrote(CheckpointManager& m, int64_t step) {
    auto a = Shard(0, step), b = Shard(1, step);
    ASSERT_TRUE(m.OnWritten(a).ok());
    ASSERT_TRUE(m.OnWritten(b).ok());
  }

  std::vector<int64_t> OnDisk() {
    std::vector<int64_t> steps;
    auto list = checkpoint::ListCheckpoints(Env::Default(), root_);
    if (list.ok()) {
      for (const auto& c : *list) steps.push_back(c.step);
    }
    return steps;  // newest first
  }

  FaultInjectionEnv env_{Env::Default()};
  Membership membership_;
  JournalRecorder journal_{&membership_};  // no journal: records are no-ops
  std::string root_;
};

TEST_F(CheckpointManagerTest, CommitsWhenEveryRankReportedAndKeepsTheNewestK) {
  CheckpointManager m("job", 2, &env_, &journal_);
  EXPECT_EQ(m.latest_step(), -1);
  EXPECT_EQ(m.latest_dir(), "");
  ASSERT_TRUE(m.OnWritten(Shard(0, 10)).ok());
  EXPECT_TRUE(OnDisk().empty()) << "committed with one rank of two";
  ASSERT_TRUE(m.OnWritten(Shard(1, 10)).ok());
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
  EXPECT_EQ(m.latest_step(), 10);
  EXPECT_EQ(m.latest_dir(), checkpoint::CheckpointDir(root_, {"job", 10, 1}));
  BothWrote(m, 20);
  BothWrote(m, 30);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{30, 20})) << "keep = 2";
  ASSERT_EQ(m.committed().size(), 3u);  // every commit is journaled
  EXPECT_EQ(m.committed().back().step, 30);
  // A report of a step not newer than the latest is ignored.
  ASSERT_TRUE(m.OnWritten(Shard(0, 30)).ok());
  EXPECT_EQ(m.committed().size(), 3u);
}

// The save time journaled with a commit (GET /v1/events, elastra_checkpoint_save_seconds): the
// slowest rank's write, as the ranks reported it, plus the commit's own time.
TEST_F(CheckpointManagerTest, TheSaveTimeIsTheSlowestRankPlusTheCommit) {
  const std::string path = root_ + "/journal.bin";
  fs::create_directories(root_);
  auto journal = Journal::Create(path);
  ASSERT_TRUE(journal.ok()) << journal.status();
  ASSERT_TRUE((*journal)->RecordJob("job", 2, 2).ok());  // a journal starts with its job
  JournalRecorder recorder(&membership_);
  recorder.Attach(std::move(journal).value());
  CheckpointManager m("job", 2, &env_, &recorder);
  auto fast = Shard(0, 10), slow = Shard(1, 10);
  fast.write_seconds = 0.5;
  slow.write_seconds = 2.25;
  ASSERT_TRUE(m.OnWritten(slow).ok());
  ASSERT_TRUE(m.OnWritten(fast).ok());
  ASSERT_EQ(m.latest_step(), 10);
  auto events = JournalEventReader(path, 0).ReadNew();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].type, "checkpoint");
  const auto data = nlohmann::json::parse(events[0].data);
  ASSERT_TRUE(data.contains("seconds")) << events[0].data;
  const double seconds = data["seconds"].get<double>();
  EXPECT_GE(seconds, 2.25);  // not the faster rank's, nor a sum of both
  EXPECT_LT(seconds, 2.75);  // 2.25 plus one small commit on a local disk
}

TEST_F(CheckpointManagerTest, ABadReportIsRefusedAndAFailedRankCommitsNothing) {
  CheckpointManager m("job", 3, &env_, &journal_);
  auto outside = Shard(0, 10);
  outside.rank = 2;
  EXPECT_EQ(m.OnWritten(outside).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.OnWritten(Shard(0, 10)).ok());
  auto failed = Shard(1, 10);
  failed.ok = false;
  failed.descriptor.clear();
  failed.error = "kResourceExhausted: disk full";
  ASSERT_TRUE(m.OnWritten(failed).ok());
  EXPECT_TRUE(OnDisk().empty());
  EXPECT_EQ(m.latest_step(), -1);
  auto garbled = Shard(1, 20);
  garbled.descriptor = "not a descriptor";
  ASSERT_TRUE(m.OnWritten(Shard(0, 20)).ok());
  ASSERT_TRUE(m.OnWritten(garbled).ok());
  EXPECT_TRUE(OnDisk().empty());
  EXPECT_TRUE(m.committed().empty());
}

// A checkpoint that can never be committed does not stay on disk once every rank reported: the
// other ranks' shards go with its directory (docs/checkpoints.md, "How a job ends").
TEST_F(CheckpointManagerTest, AFailedWriteOrCommitRemovesItsDirectory) {
  CheckpointManager m("job", 3, &env_, &journal_);
  BothWrote(m, 10);
  auto failed = Shard(1, 20);
  failed.ok = false;
  failed.descriptor.clear();
  failed.error = "kResourceExhausted: disk full";
  ASSERT_TRUE(m.OnWritten(Shard(0, 20)).ok());
  const fs::path step20 = checkpoint::CheckpointDir(root_, {"job", 20, 1});
  ASSERT_TRUE(fs::exists(step20 / "shard-00000.bin"));
  ASSERT_TRUE(m.OnWritten(failed).ok());
  EXPECT_FALSE(fs::exists(step20)) << "a failed checkpoint's directory was left behind";
  EXPECT_EQ(m.last_error_step(), 20);
  env_.SetDiskSpace(0);  // the manifest of step 30 does not fit
  BothWrote(m, 30);
  env_.Reset();
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root_, {"job", 30, 1})));
  EXPECT_EQ(m.latest_step(), 10);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
}

// At the job's end nothing can complete a pending checkpoint: its directory goes, and so does
// one no rank reported (a rank killed between its write and its report), under every root the
// job wrote to; the committed ones stay.
TEST_F(CheckpointManagerTest, TheJobsEndRemovesEveryUncommittedCheckpoint) {
  CheckpointManager m("job", 3, &env_, &journal_);
  BothWrote(m, 10);
  ASSERT_TRUE(m.OnWritten(Shard(0, 20)).ok());  // rank 1 never reports
  Shard(1, 30);                                  // written, never reported
  ASSERT_TRUE(fs::exists(checkpoint::CheckpointDir(root_, {"job", 20, 1})));
  ASSERT_TRUE(fs::exists(checkpoint::CheckpointDir(root_, {"job", 30, 1})));
  m.EndJob();
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root_)) left.push_back(e.path().filename());
  EXPECT_EQ(left, (std::vector<std::string>{fs::path(m.latest_dir()).filename()}));
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
  EXPECT_EQ(m.latest_step(), 10);
}

// With messages queued behind a report (OnWritten's `defer`), a checkpoint every rank wrote waits
// for CommitReady (the coordinator's tick); a newer one ready first makes it moot (its directory
// goes), and the job's end commits the one still ready.
TEST_F(CheckpointManagerTest, ADeferredCheckpointIsCommittedAtTheTickTheNewestWins) {
  CheckpointManager m("job", 3, &env_, &journal_);
  ASSERT_TRUE(m.OnWritten(Shard(0, 10), /*defer=*/true).ok());
  ASSERT_TRUE(m.OnWritten(Shard(1, 10), /*defer=*/true).ok());
  EXPECT_EQ(m.latest_step(), -1) << "committed while messages were queued";
  EXPECT_TRUE(OnDisk().empty());
  m.CommitReady();
  EXPECT_EQ(m.latest_step(), 10);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
  m.CommitReady();  // nothing ready: nothing changes
  EXPECT_EQ(m.committed().size(), 1u);

  // Steps 20 and 30 both become ready before a tick: only 30 is committed, 20's files go.
  for (int64_t step : {20, 30}) {
    auto a = Shard(0, step), b = Shard(1, step);
    ASSERT_TRUE(m.OnWritten(a, /*defer=*/true).ok());
    ASSERT_TRUE(m.OnWritten(b, /*defer=*/true).ok());
  }
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root_, {"job", 20, 1})));
  EXPECT_EQ(m.latest_step(), 10);
  m.CommitReady();
  EXPECT_EQ(m.latest_step(), 30);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{30, 10}));
  EXPECT_EQ(m.committed().size(), 2u);

  // A report handled with an empty queue commits at once, and replaces an older ready one.
  auto a40 = Shard(0, 40), b40 = Shard(1, 40);
  ASSERT_TRUE(m.OnWritten(a40, /*defer=*/true).ok());
  ASSERT_TRUE(m.OnWritten(b40, /*defer=*/true).ok());
  BothWrote(m, 50);
  EXPECT_EQ(m.latest_step(), 50);
  EXPECT_FALSE(fs::exists(checkpoint::CheckpointDir(root_, {"job", 40, 1})));
  m.CommitReady();
  EXPECT_EQ(m.latest_step(), 50);

  // The job's end commits the checkpoint still ready: it is the job's last.
  auto a60 = Shard(0, 60), b60 = Shard(1, 60);
  ASSERT_TRUE(m.OnWritten(a60, /*defer=*/true).ok());
  ASSERT_TRUE(m.OnWritten(b60, /*defer=*/true).ok());
  m.EndJob();
  EXPECT_EQ(m.latest_step(), 60);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{60, 50, 30}));
}

TEST_F(CheckpointManagerTest, AFailedManifestWriteKeepsThePreviousCheckpoint) {
  CheckpointManager m("job", 3, &env_, &journal_);
  BothWrote(m, 10);
  const std::string step10 = m.latest_dir();
  env_.SetDiskSpace(0);  // the manifest does not fit
  BothWrote(m, 20);
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
  EXPECT_EQ(m.latest_step(), 10);
  EXPECT_EQ(m.latest_dir(), step10);
  EXPECT_EQ(m.committed().size(), 1u);
  env_.Reset();
  env_.FailNthWrite(1);  // an I/O error instead of a full disk
  BothWrote(m, 30);
  EXPECT_EQ(m.latest_dir(), step10);
  env_.Reset();
  BothWrote(m, 40);  // room again: the next one commits
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{40, 10}));
  EXPECT_EQ(m.latest_step(), 40);
}

TEST_F(CheckpointManagerTest, APowerCutBeforeTheManifestRenameCommitsNothing) {
  CheckpointManager m("job", 3, &env_, &journal_);
  BothWrote(m, 10);
  env_.CutPowerBeforeNthRename(1);
  BothWrote(m, 20);
  EXPECT_EQ(m.latest_step(), 10);
  env_.Reset();
  ASSERT_TRUE(env_.SimulatePowerLoss().ok());
  EXPECT_EQ(OnDisk(), (std::vector<int64_t>{10}));
}

TEST_F(CheckpointManagerTest, ResumeFromTakesTheNewestCommittedCheckpoint) {
  {
    CheckpointManager writer("job", 3, &env_, &journal_);
    BothWrote(writer, 10);
    BothWrote(writer, 20);
  }
  CheckpointManager m("job", 3, &env_, &journal_);
  auto none = m.ResumeFrom(root_ + "/nothing");
  EXPECT_EQ(none.status().code(), StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("no committed checkpoint under " + root_ + "/nothing"),
            std::string::npos)
      << none.status();
  auto newest = m.ResumeFrom(root_);
  ASSERT_TRUE(newest.ok()) << newest.status();
  EXPECT_EQ(newest->step, 20);
  EXPECT_EQ(m.latest_step(), 20);
  EXPECT_EQ(m.latest_dir(), newest->dir);

  CheckpointManager restored("job", 3, &env_, &journal_);
  restored.Restore({{10, 1, "/a"}, {20, 1, "/b"}});
  EXPECT_EQ(restored.latest_dir(), "/b");
  EXPECT_EQ(restored.latest_step(), 20);
  EXPECT_EQ(restored.committed().size(), 2u);
}

}  // namespace
}  // namespace elastra::coordinator
