// `elastra ckpt` (list, inspect, verify): output and exit codes.
#include <gtest/gtest.h>

#include <string>

#include "launch/commands.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

TEST(CkptCommandTest, ExitCodes) {
  TempDir root;
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(5)).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(6)).ok());
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"list", root.str()}), 0);
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("dp=1,pp=1,tp=1"), std::string::npos) << out;
  EXPECT_NE(out.find(CheckpointDirName(6, 1)), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"inspect", root.str()}), 0);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("counts int64 [7] sharding=replicated"), std::string::npos) << out;
  EXPECT_NE(out.find("step 6"), std::string::npos) << out;
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 0);
  testing::internal::GetCapturedStdout();
  EXPECT_EQ(launch::CkptCommand({"bogus", root.str()}), 2);
  EXPECT_EQ(launch::CkptCommand({"verify"}), 2);
  EXPECT_EQ(launch::CkptCommand({"verify", root.str() + "/nonexistent"}), 1);
  EXPECT_EQ(launch::CkptCommand({"inspect", root.str() + "/nonexistent"}), 1);
  FlipByte(JoinPath(DirOf(root.str(), 5), "shard-00000.bin"), 4100);
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 1);
  out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("shard-00000.bin"), std::string::npos) << out;
  EXPECT_NE(out.find("checksum mismatch"), std::string::npos) << out;
}

}  // namespace
}  // namespace elastra::checkpoint
