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

TEST(CkptCommandTest, InspectNamesEachTensorsType) {
  TempDir root;
  std::vector<uint16_t> w(6, 0x3f80);  // bfloat16 1.0
  std::vector<uint16_t> h(4, 0x3c00);  // float16 1.0
  std::vector<int32_t> n(3, 7);
  StateView v;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, DataType dt, const void* p,
                 size_t bytes) {
    TensorShard t;
    t.name = name;
    t.shape = shape;
    t.dtype = dt;
    t.region = Box::Whole(shape);
    t.data = {static_cast<const std::byte*>(p), bytes};
    v.tensors.push_back(t);
  };
  add("w", {2, 3}, DataType::kBFloat16, w.data(), 12);
  add("h", {4}, DataType::kFloat16, h.data(), 8);
  add("n", {3}, DataType::kInt32, n.data(), 12);
  v.scalars = {{"elastra.step", 3}};
  WriterOptions o;
  o.root = root.str();
  auto writer = CheckpointWriter::Create(o);
  ASSERT_TRUE(writer.ok());
  auto d = (*writer)->Write({"job", 3, 1}, v);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(CommitCheckpoint({nullptr, root.str(), 2}, {"job", 3, 1}, {1, 1, 1}, {*d}).ok());
  testing::internal::CaptureStdout();
  EXPECT_EQ(launch::CkptCommand({"inspect", root.str()}), 0);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("w bfloat16 [2,3]"), std::string::npos) << out;
  EXPECT_NE(out.find("h float16 [4]"), std::string::npos) << out;
  EXPECT_NE(out.find("n int32 [3]"), std::string::npos) << out;
}

}  // namespace
}  // namespace elastra::checkpoint
