// The checkpoint engine under injected faults through the Env: failed writes, full disks, power
// cuts between write and rename, and unsynced data lost on power loss. The previous checkpoint
// always survives.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

// After each injected fault: the error is reported, step 10 still loads, step 20 is not listed,
// and no temporary file is left visible.
void ExpectPreviousSurvives(FaultInjectionEnv* env, const std::string& root) {
  ASSERT_TRUE(env->SimulatePowerLoss().ok());
  env->Reset();
  auto list = ListCheckpoints(env, root);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().step, 10);
  auto loaded = LoadLatest(env, root, State(10).Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(State(10).Matches(*loaded));
  EXPECT_TRUE(loaded->skipped.empty());
  EXPECT_FALSE(fs::exists(JoinPath(DirOf(root, 20), "shard-00000.bin")) &&
               fs::exists(JoinPath(DirOf(root, 20), kManifestName)));
  // A later checkpoint commits normally and prunes the debris.
  ASSERT_TRUE(SaveAndCommit(env, root, State(30)).ok());
  EXPECT_FALSE(fs::exists(DirOf(root, 20)));
  EXPECT_FALSE(HasTmpFiles(root));
}

TEST(CheckpointFaultTest, FailedWrite) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.FailNthWrite(1);
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("injected failure"), std::string::npos) << s;
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, FullDiskDuringShardWrite) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.SetDiskSpace(6000);  // less than one shard file
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s;
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, FullDiskDuringManifestCommit) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  WriterOptions o;
  o.env = &env;
  o.root = root.str();
  auto w = CheckpointWriter::Create(o);
  ASSERT_TRUE(w.ok());
  auto d = (*w)->Write({"job", 20, 1}, State(20).View());
  ASSERT_TRUE(d.ok());
  env.SetDiskSpace(10);
  auto c = CommitCheckpoint({&env, root.str(), 5}, {"job", 20, 1}, {}, {*d});
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted) << c.status();
  EXPECT_FALSE(fs::exists(JoinPath(DirOf(root.str(), 20), kManifestName)));
  EXPECT_FALSE(HasTmpFiles(root.str()));
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerCutBetweenShardWriteAndRename) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.CutPowerBeforeNthRename(1);
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_TRUE(env.power_cut());
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerCutBetweenManifestWriteAndRename) {
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  ASSERT_TRUE(SaveAndCommit(&env, root.str(), State(10)).ok());
  env.CutPowerBeforeNthRename(2);  // the shard's rename happens, the manifest's does not
  Status s = SaveAndCommit(&env, root.str(), State(20));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find(kManifestName), std::string::npos) << s;
  ExpectPreviousSurvives(&env, root.str());
}

TEST(CheckpointFaultTest, PowerLossDropsUnsyncedData) {
  // The seam itself: unsynced appends vanish, synced ones stay.
  TempDir root;
  FaultInjectionEnv env(Env::Default());
  const std::string p = JoinPath(root.str(), "f");
  auto f = env.NewWritableFile(p);
  ASSERT_TRUE(f.ok());
  std::string a(100, 'a'), b(50, 'b');
  ASSERT_TRUE((*f)->Append(AsBytes(a)).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE(env.SyncDir(root.str()).ok());
  ASSERT_TRUE((*f)->Append(AsBytes(b)).ok());
  ASSERT_TRUE((*f)->Close().ok());
  ASSERT_TRUE(env.SimulatePowerLoss().ok());
  EXPECT_EQ(fs::file_size(p), 100u);
  // A file whose directory was never synced disappears.
  auto g = env.NewWritableFile(JoinPath(root.str(), "g"));
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE((*g)->Append(AsBytes(a)).ok());
  ASSERT_TRUE((*g)->Sync().ok());
  ASSERT_TRUE(env.SimulatePowerLoss().ok());
  EXPECT_FALSE(fs::exists(JoinPath(root.str(), "g")));
}

}  // namespace
}  // namespace elastra::checkpoint
