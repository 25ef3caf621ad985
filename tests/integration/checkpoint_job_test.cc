// Durable state end to end: real `elastra run` jobs that checkpoint to disk, lose a rank whose
// shards have no replica, are restarted from disk at another size, and meet corrupt checkpoints.
// Each run is checked against `train_mlp --reference` (1e-4 relative loss, exact accounting).
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "journal/events.h"
#include "examples/log_check.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using std::chrono::seconds;
namespace fs = std::filesystem;

class CheckpointJobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra_ckpt_XXXXXX";
    root_ = mkdtemp(tmpl);
    ckpt_ = root_ + "/ckpt";
  }
  void TearDown() override {
    std::error_code ec;
    if (std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) fs::remove_all(root_, ec);
  }

  std::vector<std::string> Args(int steps, int step_ms, int every = 10) const {
    return {"--steps", std::to_string(steps), "--step-time-ms", std::to_string(step_ms),
            "--global-batch", "32", "--hidden", "16", "--ffn", "32", "--layers", "2",
            "--commit-every", "5", "--checkpoint-dir", ckpt_, "--checkpoint-every",
            std::to_string(every)};
  }

  // Committed checkpoint directories, newest first.
  std::vector<fs::path> Committed() const {
    std::vector<fs::path> dirs;
    if (!fs::exists(ckpt_)) return dirs;  // no rank wrote yet
    for (const auto& e : fs::directory_iterator(ckpt_)) {
      if (fs::exists(e.path() / "MANIFEST")) dirs.push_back(e.path());
    }
    std::sort(dirs.rbegin(), dirs.rend());
    return dirs;
  }

  // Checkpoint directories without a MANIFEST: none may be left once a job ended.
  std::vector<fs::path> Uncommitted() const {
    std::vector<fs::path> dirs;
    if (!fs::exists(ckpt_)) return dirs;
    for (const auto& e : fs::directory_iterator(ckpt_)) {
      if (!fs::exists(e.path() / "MANIFEST")) dirs.push_back(e.path());
    }
    return dirs;
  }

  // The step a committed checkpoint directory holds ("ckpt-<step>-g<generation>").
  static int64_t StepOf(const fs::path& dir) {
    return std::stoll(dir.filename().string().substr(5, 12));
  }

  // The concatenated logs of several jobs, checked against one reference run of `steps` steps.
  void ExpectMatches(const std::vector<std::string>& logs, int steps) {
    std::string all = root_ + "/all.jsonl", ref = root_ + "/ref.jsonl";
    {
      std::ofstream out(all);
      for (const auto& l : logs) out << std::ifstream(l).rdbuf();
    }
    auto args = Args(steps, 0);
    args.resize(args.size() - 4);  // the reference writes no checkpoints
    ASSERT_TRUE(RunReference(args, ref));
    ExpectLogMatches(all, ref, steps, 1e-4);
  }

  void KillTensorRankAndRecover(int step_ms, int every);

  std::string root_, ckpt_;
};

// Trains on two workers laid out as tp=2 (no replica of any TP shard), kills one TP
// rank once a checkpoint of that layout is committed, and checks the job recovered from disk.
void CheckpointJobTest::KillTensorRankAndRecover(int step_ms, int every) {
  Job job(2, Args(kUntilStopped, step_ms, every));
  ASSERT_TRUE(job.WaitForStep(3, seconds(60))) << LauncherLog(job);
  auto r = job.Resize("--workers 2 --layout dp=1,pp=1,tp=2 --wait");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_TRUE(job.WaitFor(
      [&](const nlohmann::json&) {
        for (const auto& d : Committed()) {
          if (d.filename().string().find("-g000002") != std::string::npos) return true;
        }
        return false;
      },
      seconds(60)));
  pid_t victim = job.PidOfRank(1);
  ASSERT_GT(victim, 0);
  // Recovered from disk: a generation of the failure formed and trains on.
  ASSERT_NO_FATAL_FAILURE(KillWorkerAndRecover(job, victim));
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  EXPECT_NE(LauncherLog(job).find("loaded checkpoint"), std::string::npos) << LauncherLog(job);
  ExpectMatches({job.log_path()}, static_cast<int>(StepsApplied(job)));
}

TEST_F(CheckpointJobTest, KilledTensorRankWithoutReplicaRecoversFromDisk) {
  KillTensorRankAndRecover(/*step_ms=*/15, /*every=*/10);
}

TEST_F(CheckpointJobTest, KillDuringAsynchronousWritesLoadsTheLastCommittedOne) {
  // A checkpoint every step with a 2 ms step: a write is almost always in flight when the TP rank
  // dies (the job trains until the test stops it). Its half-written checkpoint must
  // never be loaded; the newest committed one is.
  KillTensorRankAndRecover(/*step_ms=*/2, /*every=*/1);
}

TEST_F(CheckpointJobTest, ResumeAFourWorkerCheckpointWithTwoAndWithSix) {
  const int first = 60, steps = 100;
  std::string log1, log2;
  {
    Job job(4, Args(first, 5));
    ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
    log1 = root_ + "/first.jsonl";
    fs::copy_file(job.log_path(), log1);
  }
  ASSERT_FALSE(Committed().empty());
  // A checkpoint due while the previous write is still in flight is skipped, so the newest one
  // holds step 60 or a little before it.
  const int64_t newest = StepOf(Committed().front());
  // Resume the newest at 2 and (separately) at 6 workers, each from
  // the same files (a resumed job writes and prunes checkpoints of its own).
  const std::string saved = root_ + "/saved";
  fs::copy(ckpt_, saved, fs::copy_options::recursive);
  for (int n : {2, 6}) {
    fs::remove_all(ckpt_);
    fs::copy(saved, ckpt_, fs::copy_options::recursive);
    Job job(n, Args(steps, 5), {}, {"--resume", ckpt_});
    ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
    std::string log = root_ + "/resumed" + std::to_string(n) + ".jsonl";
    fs::copy_file(job.log_path(), log);
    auto resumed = examples::ReadTrainLog(log);
    ASSERT_TRUE(resumed.ok());
    ASSERT_FALSE(resumed->applied.empty());
    EXPECT_EQ(resumed->applied.begin()->first, newest) << "resumed at the wrong step";
    EXPECT_EQ(resumed->applied.begin()->second.dp, n);
    ExpectMatches({log1, log}, steps);
  }
}

// The checkpoint of a job's last step is committed before the job ends (issue 38): `ckpt list`
// shows it first, status.json and the journal's job_end event (GET /v1/events) name it, no
// uncommitted directory is left, and --resume starts after it. A checkpoint every step with a
// 1 ms step keeps a write in flight at almost every step end, the last one included.
TEST_F(CheckpointJobTest, TheLastStepIsCommittedBeforeTheJobEndsAndResumedAfter) {
  const int first = 40, steps = 60;
  const std::string log1 = root_ + "/first.jsonl";
  std::string state_dir;
  {
    Job job(4, Args(first, 1, /*every=*/1));
    ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
    fs::copy_file(job.log_path(), log1);
    state_dir = root_ + "/state";
    fs::copy(job.state_dir(), state_dir, fs::copy_options::recursive);
  }
  for (const fs::path& d : Uncommitted()) ADD_FAILURE() << "uncommitted: " << d;
  ASSERT_FALSE(Committed().empty());
  const fs::path last = Committed().front();
  EXPECT_EQ(StepOf(last), first);
  auto listed = RunShell(ElastraBinary() + " ckpt list " + ckpt_);
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  // The first row under the header is the newest: step 40.
  const size_t row = listed.out.find('\n') + 1;
  EXPECT_EQ(listed.out.substr(row, listed.out.find(' ', row) - row), std::to_string(first))
      << listed.out;
  std::ifstream status_file(state_dir + "/status.json");
  const auto status = nlohmann::json::parse(status_file, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(status.is_object()) << "status.json unreadable";
  EXPECT_EQ(status["checkpoints"].value("committed_step", int64_t{-1}), first) << status.dump();
  EXPECT_EQ(status["checkpoints"].value("committed_dir", ""), last.string()) << status.dump();
  auto events = journal::JournalEventReader(state_dir + "/journal.bin", 0).ReadNew();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().type, "job_end");
  const auto end = nlohmann::json::parse(events.back().data);
  EXPECT_EQ(end.value("outcome", ""), "finished") << events.back().data;
  EXPECT_EQ(end.value("checkpoint_step", int64_t{-1}), first) << events.back().data;
  EXPECT_EQ(end.value("checkpoint_dir", ""), last.string()) << events.back().data;

  Job job(2, Args(steps, 1, /*every=*/10), {}, {"--resume", ckpt_});
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  auto resumed = examples::ReadTrainLog(job.log_path());
  ASSERT_TRUE(resumed.ok());
  ASSERT_FALSE(resumed->applied.empty());
  EXPECT_EQ(resumed->applied.begin()->first, first) << "resumed at the wrong step";
  ExpectMatches({log1, job.log_path()}, steps);
}

// Ctrl-C on `elastra run` while every step writes a checkpoint: the launcher stops the workers,
// the coordinator fails the job (no member survived) and removes the uncommitted directories of
// the writes the stop cut short before it exits; every checkpoint left is committed and loads.
TEST_F(CheckpointJobTest, ASignalledRunLeavesOnlyCommittedCheckpoints) {
  Job job(3, Args(kUntilStopped, 1, /*every=*/1));
  ASSERT_TRUE(job.WaitFor([&](const nlohmann::json&) { return Committed().size() >= 2; },
                          seconds(60)))
      << LauncherLog(job);
  job.Signal(SIGINT);
  EXPECT_EQ(job.Wait(seconds(60)), 128 + SIGINT) << LauncherLog(job);
  ASSERT_FALSE(Committed().empty());
  for (const fs::path& d : Uncommitted()) ADD_FAILURE() << "uncommitted: " << d;
  auto verify = RunShell(ElastraBinary() + " ckpt verify " + ckpt_);
  EXPECT_EQ(verify.exit_code, 0) << verify.out;
}

TEST_F(CheckpointJobTest, CorruptOrIncompleteCheckpointsFallBackToThePreviousOne) {
  const int first = 80, steps = 110;
  std::string log1 = root_ + "/first.jsonl";
  {
    Job job(2, Args(first, 5), {"ELASTRA_CHECKPOINT_KEEP=4"});
    ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
    fs::copy_file(job.log_path(), log1);
  }
  auto dirs = Committed();
  ASSERT_EQ(dirs.size(), 4u);  // the newest four (a checkpoint due during a write is skipped)
  // Newest: one flipped byte in a shard file. Next: its manifest deleted. Next: a shard file cut
  // short. Oldest: intact, so the job resumes there and re-applies the steps after it exactly.
  const int64_t intact = StepOf(dirs[3]);
  for (const auto& e : fs::directory_iterator(dirs[0])) {
    if (e.path().filename() == "MANIFEST") continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4096 + 17);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(4096 + 17);
    f.write(&c, 1);
    break;
  }
  fs::remove(dirs[1] / "MANIFEST");
  for (const auto& e : fs::directory_iterator(dirs[2])) {
    if (e.path().filename() == "MANIFEST") continue;
    fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
    break;
  }
  auto listed = RunShell(ElastraBinary() + " ckpt list " + ckpt_);
  EXPECT_EQ(listed.out.find(dirs[1].filename().string()), std::string::npos) << listed.out;
  auto verify = RunShell(ElastraBinary() + " ckpt verify " + dirs[0].string());
  EXPECT_EQ(verify.exit_code, 1) << verify.out;
  Job job(3, Args(steps, 5), {}, {"--resume", ckpt_});
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  auto resumed = examples::ReadTrainLog(job.log_path());
  ASSERT_TRUE(resumed.ok());
  ASSERT_FALSE(resumed->applied.empty());
  EXPECT_EQ(resumed->applied.begin()->first, intact);
  ExpectMatches({log1, job.log_path()}, steps);
}

}  // namespace
}  // namespace elastra::testing
