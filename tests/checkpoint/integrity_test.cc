// Every byte of a checkpoint is checked: a byte flipped anywhere in any of its files (a shard
// header's fields, the zeros after them, a region, the padding between regions or after the last,
// the manifest's frame or payload) is reported by `elastra ckpt verify` with the file and the
// bytes; loads use only regions that verify, and report damage outside them as a warning naming
// the file. Format 1 checkpoints (before the zero-padding promise) still load.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "launch/commands.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

// The file bytes [begin, end) that a FAULT line names for `file`, or {-1, -1} when no FAULT line
// names it.
std::pair<int64_t, int64_t> FaultBytes(const std::string& out, const std::string& file) {
  size_t at = 0;
  while ((at = out.find("FAULT ", at)) != std::string::npos) {
    const size_t eol = out.find('\n', at);
    const std::string line = out.substr(at, eol - at);
    at = eol;
    const size_t f = line.find(file + ": bytes ");
    if (f == std::string::npos) continue;
    long long a = -1, b = -1;
    if (std::sscanf(line.c_str() + f + file.size() + 8, "%lld..%lld", &a, &b) == 2) return {a, b};
  }
  return {-1, -1};
}

// What `elastra ckpt verify DIR` prints, and its exit code.
std::pair<int, std::string> Verify(const std::string& dir) {
  testing::internal::CaptureStdout();
  const int code = launch::CkptCommand({"verify", dir});
  return {code, testing::internal::GetCapturedStdout()};
}

// A one-rank checkpoint laid out as: header block [0, 4096), w (64x48 float32) [4096, 16384) in
// three 4 KiB chunks, b (100 float64) [16384, 17184), padding to 20480, counts (7 int64)
// [20480, 20536), padding to the end of the file at 24576.
class IntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(SaveAndCommit(Env::Default(), root_.str(), State(3), 5, 4096).ok());
    dir_ = DirOf(root_.str(), 3);
    shard_ = JoinPath(dir_, "shard-00000.bin");
    manifest_ = JoinPath(dir_, kManifestName);
    auto reader = CheckpointReader::Open(Env::Default(), dir_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    ASSERT_EQ((*reader)->manifest().files.at(0).size, 24576u);
    const TensorEntry* b = (*reader)->manifest().FindTensor("b");
    ASSERT_EQ(b->regions.at(0).offset, 16384u);
    ASSERT_EQ(b->regions.at(0).bytes, 800u);
  }

  TempDir root_;
  std::string dir_, shard_, manifest_;
};

TEST_F(IntegrityTest, VerifyNamesTheFileAndTheBytesOfAFlippedByteInEveryPositionClass) {
  const uint64_t manifest_size = ReadAll(manifest_).size();
  struct Case {
    const char* where;
    const std::string* file;
    uint64_t offset;
  };
  const std::vector<Case> cases = {
      {"shard header: magic", &shard_, 3},
      {"shard header: step", &shard_, 17},
      {"shard header: checksum", &shard_, 35},
      {"shard header block: zeros after the fields", &shard_, 100},
      {"shard header block: its last byte", &shard_, 4095},
      {"region: w's first chunk", &shard_, 4096 + 10},
      {"region: w's last byte", &shard_, 16383},
      {"region: b", &shard_, 16384 + 799},
      {"padding between b and counts", &shard_, 17184 + 5},
      {"padding: the byte before counts", &shard_, 20479},
      {"region: counts", &shard_, 20480},
      {"padding after the last region", &shard_, 24000},
      {"the file's last byte", &shard_, 24575},
      {"manifest: magic", &manifest_, 1},
      {"manifest: version", &manifest_, 9},
      {"manifest: reserved", &manifest_, 13},
      {"manifest: payload size", &manifest_, 17},
      {"manifest: checksum", &manifest_, 30},
      {"manifest: payload", &manifest_, 40},
      {"manifest: last byte", &manifest_, manifest_size - 1},
  };
  ASSERT_EQ(Verify(dir_).first, 0);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.where);
    FlipByte(*c.file, c.offset);
    const auto [code, out] = Verify(dir_);
    EXPECT_EQ(code, 1) << out;
    const std::string name = *c.file == shard_ ? "shard-00000.bin" : kManifestName;
    const auto [begin, end] = FaultBytes(out, JoinPath(dir_, name));
    EXPECT_LE(begin, static_cast<int64_t>(c.offset)) << out;
    EXPECT_GT(end, static_cast<int64_t>(c.offset)) << out;
    FlipByte(*c.file, c.offset);  // back
    EXPECT_EQ(Verify(dir_).first, 0) << c.where << ": restored";
  }
}

TEST_F(IntegrityTest, VerifyReportsEveryDamagedPartNotOnlyTheFirst) {
  FlipByte(shard_, 4096 + 10);  // w, chunk 0
  FlipByte(shard_, 8192 + 10);  // w, chunk 1
  FlipByte(shard_, 17184 + 5);  // padding after b
  FlipByte(shard_, 24000);      // padding after counts
  const auto [code, out] = Verify(dir_);
  EXPECT_EQ(code, 1);
  auto reader = CheckpointReader::Open(Env::Default(), dir_);
  ASSERT_TRUE(reader.ok());
  std::vector<Fault> faults;
  EXPECT_EQ((*reader)->VerifyAll(nullptr, &faults).code(), StatusCode::kCorrupt);
  ASSERT_EQ(faults.size(), 4u) << out;
  EXPECT_EQ(faults[0].begin, 4096u);
  EXPECT_EQ(faults[0].end, 8192u);
  EXPECT_EQ(faults[1].begin, 8192u);
  EXPECT_EQ(faults[2].begin, 17189u);
  EXPECT_EQ(faults[2].end, 17190u);
  EXPECT_NE(faults[2].what.find("padding after tensor 'b'"), std::string::npos) << faults[2].what;
  EXPECT_EQ(faults[3].begin, 24000u);
  EXPECT_EQ(faults[3].file, shard_);
}

TEST_F(IntegrityTest, ALoadUsesRegionsThatVerifyAndWarnsOfDamageOutsideThem) {
  FlipByte(shard_, 100);        // the header block's zeros
  FlipByte(shard_, 17184 + 5);  // padding after b
  State s(3);
  auto loaded = LoadLatest(Env::Default(), root_.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
  EXPECT_TRUE(loaded->skipped.empty()) << "the regions verify: this checkpoint loads";
  ASSERT_EQ(loaded->warnings.size(), 2u);
  for (const Fault& f : loaded->warnings) EXPECT_EQ(f.file, shard_);
  EXPECT_EQ(loaded->warnings[0].begin, 100u);
  EXPECT_EQ(loaded->warnings[1].begin, 17189u);

  // A damaged region is not used: the load falls back to the previous checkpoint, as before.
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root_.str(), State(4), 5, 4096).ok());
  FlipByte(JoinPath(DirOf(root_.str(), 4), "shard-00000.bin"), 4096 + 10);
  auto fallback = LoadLatest(Env::Default(), root_.str(), State(4).Requests());
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->step, 3);
  ASSERT_EQ(fallback->skipped.size(), 1u);
  EXPECT_NE(fallback->skipped[0].find("checksum mismatch"), std::string::npos);
}

TEST_F(IntegrityTest, ALoadInPlaceFillsTheCallersBuffers) {
  State s(3);
  State other(9);  // the buffers hold another state before the load
  std::vector<std::span<std::byte>> into = {
      {reinterpret_cast<std::byte*>(other.w.data()), other.w.size() * 4},
      {reinterpret_cast<std::byte*>(other.b.data()), other.b.size() * 8},
      {reinterpret_cast<std::byte*>(other.counts.data()), other.counts.size() * 8}};
  auto loaded = LoadLatestInto(Env::Default(), root_.str(), s.Requests(), into);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->regions.empty());
  EXPECT_EQ(loaded->step, 3);
  EXPECT_EQ(other.w, s.w);
  EXPECT_EQ(other.b, s.b);
  EXPECT_EQ(other.counts, s.counts);
  into[1] = into[1].subspan(8);
  EXPECT_EQ(LoadCheckpointInto(Env::Default(), dir_, s.Requests(), into).status().code(),
            StatusCode::kInvalidArgument);
  into.pop_back();
  EXPECT_EQ(LoadCheckpointInto(Env::Default(), dir_, s.Requests(), into).status().code(),
            StatusCode::kInvalidArgument);
}

// A format 1 checkpoint (made here by rewriting the versions and their checksums) loads and
// verifies; the bytes between its regions are not checked, and verify says so.
TEST_F(IntegrityTest, FormatOneCheckpointsStillLoad) {
  auto bytes = ReadAll(manifest_);
  auto m = DecodeManifest(bytes, manifest_);
  ASSERT_TRUE(m.ok()) << m.status();
  m->version = 1;
  WriteAll(manifest_, EncodeManifest(*m));
  std::vector<std::byte> header = ReadAll(shard_);
  header.resize(kShardHeaderBytes);
  auto h = DecodeShardHeader(header, shard_);
  ASSERT_TRUE(h.ok());
  h->version = 1;
  std::vector<std::byte> encoded(kShardHeaderBytes);
  EncodeShardHeader(*h, encoded.data());
  std::string file(reinterpret_cast<const char*>(ReadAll(shard_).data()), 24576);
  file.replace(0, kShardHeaderBytes, reinterpret_cast<const char*>(encoded.data()),
               kShardHeaderBytes);
  WriteAll(shard_, file);

  State s(3);
  auto loaded = LoadLatest(Env::Default(), root_.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
  FlipByte(shard_, 17184 + 5);  // padding: not checked in format 1
  const auto [code, out] = Verify(dir_);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("format 1"), std::string::npos) << out;
  FlipByte(shard_, 4096 + 10);  // a region still is
  EXPECT_EQ(Verify(dir_).first, 1);
}

TEST(FormatVersionTest, AnUnknownVersionNamesTheVersionsThisBuildReads) {
  TempDir root;
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(2)).ok());
  const std::string manifest = JoinPath(DirOf(root.str(), 2), kManifestName);
  auto bytes = ReadAll(manifest);
  std::string s(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  s[8] = 99;
  WriteAll(manifest, s);
  auto reader = CheckpointReader::Open(Env::Default(), DirOf(root.str(), 2));
  ASSERT_EQ(reader.status().code(), StatusCode::kProtocolMismatch);
  EXPECT_NE(reader.status().message().find("unknown format version 99 (this build reads "
                                           "versions 1 to 2)"),
            std::string::npos)
      << reader.status();
}

}  // namespace
}  // namespace elastra::checkpoint
