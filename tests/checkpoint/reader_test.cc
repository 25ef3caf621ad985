// Loading checkpoints: round trips, any box of a sharded tensor with partial reads, ZeRO shards
// at another degree, and every kind of corruption detected before a tensor changes, with fallback
// to the previous checkpoint (and `elastra ckpt verify` naming the fault).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "launch/commands.h"
#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointTest, RoundTrip) {
  TempDir root;
  State s(3);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s).ok());
  auto loaded = LoadLatest(Env::Default(), root.str(), s.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s.Matches(*loaded));
  EXPECT_TRUE(loaded->skipped.empty());

  // A direct load of the same directory gives the same bytes; VerifyAll passes.
  auto direct = LoadCheckpoint(Env::Default(), DirOf(root.str(), 3), s.Requests());
  ASSERT_TRUE(direct.ok()) << direct.status();
  EXPECT_TRUE(s.Matches(*direct));
  auto reader = CheckpointReader::Open(Env::Default(), DirOf(root.str(), 3));
  ASSERT_TRUE(reader.ok());
  uint64_t checked = 0;
  std::vector<Fault> faults;
  EXPECT_TRUE((*reader)->VerifyAll(&checked, &faults).ok());
  EXPECT_TRUE(faults.empty());
  // Every byte of every shard file: the header block, the regions and the zeros between them.
  EXPECT_EQ(checked, (*reader)->manifest().total_file_bytes());
  EXPECT_GT(checked, s.w.size() * 4 + 800 + 56);
  EXPECT_TRUE((*reader)->padding_checked());
}

// Two ranks each hold a column block (TP-like split along dim 1) of a [rows, cols] tensor; any
// box can be loaded, reading only the chunks it touches.
TEST(CheckpointTest, ShardedRegionsLoadAnyBoxWithPartialReads) {
  TempDir root;
  const int64_t rows = 256, cols = 512;  // 512 KiB of float32
  std::vector<float> full(rows * cols);
  std::iota(full.begin(), full.end(), 0.0f);
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 2; ++rank) {
    const int64_t c0 = rank * cols / 2, c1 = (rank + 1) * cols / 2;
    std::vector<float> local;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = c0; c < c1; ++c) local.push_back(full[r * cols + c]);
    }
    WriterOptions o;
    o.root = root.str();
    o.rank = rank;
    o.chunk_bytes = 4096;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    StateView v;
    TensorShard t;
    t.name = "tp.weight";
    t.shape = {rows, cols};
    t.rule = {1, -1, false};
    t.region = Box{{0, c0}, {rows, c1}};
    t.data = {reinterpret_cast<const std::byte*>(local.data()), local.size() * 4};
    v.tensors.push_back(t);
    auto d = (*w)->Write({"job", 5, 2}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  // One region missing: the commit refuses (sizes do not add up).
  auto partial = CommitCheckpoint({nullptr, root.str(), 2}, {"job", 5, 2}, {1, 1, 2}, {descs[0]});
  EXPECT_EQ(partial.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(partial.status().message().find("cover"), std::string::npos) << partial.status();
  ASSERT_TRUE(CommitCheckpoint({nullptr, root.str(), 2}, {"job", 5, 2}, {1, 1, 2}, descs).ok());

  auto reader =
      CheckpointReader::Open(Env::Default(), JoinPath(root.str(), CheckpointDirName(5, 2)));
  ASSERT_TRUE(reader.ok()) << reader.status();
  // A box across both files: rows 10..20, columns 250..262.
  Box want{{10, 250}, {20, 262}};
  std::vector<float> got(want.volume());
  ASSERT_TRUE((*reader)->ReadRegion("tp.weight", want,
                                    {reinterpret_cast<std::byte*>(got.data()), got.size() * 4})
                  .ok());
  for (int64_t r = 10; r < 20; ++r) {
    for (int64_t c = 250; c < 262; ++c) {
      ASSERT_EQ(got[(r - 10) * 12 + (c - 250)], full[r * cols + c]) << r << "," << c;
    }
  }
  // Only the chunks spanning rows 10..20 of each file were read, far less than the files.
  EXPECT_LT((*reader)->bytes_read(), 12u * 4096u);
  EXPECT_GT((*reader)->bytes_read(), 0u);
  // A different layout: the whole tensor (both regions), as a 1-rank restart would need.
  std::vector<float> all(rows * cols);
  ASSERT_TRUE((*reader)->ReadRegion("tp.weight", Box::Whole({rows, cols}),
                                    {reinterpret_cast<std::byte*>(all.data()), all.size() * 4})
                  .ok());
  EXPECT_EQ(all, full);
  EXPECT_TRUE((*reader)->VerifyAll().ok());
  // Bad requests are refused, not crashed on.
  std::vector<std::byte> small(8);
  EXPECT_EQ((*reader)->ReadRegion("tp.weight", want, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadRegion("nope", want, small).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadRegion("tp.weight", Box{{0, 0}, {1, 999}}, small).code(),
            StatusCode::kInvalidArgument);
}

// ZeRO: three DP ranks each save an uneven flat range of a [6, 10] tensor (up to three boxes
// each); two ranks of a new layout load their own flat ranges.
TEST(CheckpointTest, ZeroShardsReloadAtAnotherDegree) {
  TempDir root;
  std::vector<float> full(60);
  std::iota(full.begin(), full.end(), 100.0f);
  const Box whole{{0, 0}, {6, 10}};
  const int64_t cuts[] = {0, 17, 41, 60};
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 3; ++rank) {
    WriterOptions o;
    o.root = root.str();
    o.rank = rank;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    StateView v;
    int64_t at = cuts[rank];
    for (const Box& b : FlatRangePieces(whole, cuts[rank], cuts[rank + 1])) {
      TensorShard t;
      t.name = "adam.exp_avg";
      t.shape = {6, 10};
      t.rule = {-1, -1, true};
      t.region = b;
      t.data = {reinterpret_cast<const std::byte*>(full.data() + at), b.volume() * 4};
      at += static_cast<int64_t>(b.volume());
      v.tensors.push_back(t);
    }
    ASSERT_EQ(at, cuts[rank + 1]);
    v.scalars = {{"elastra.step", 9}};
    auto d = (*w)->Write({"job", 9, 4}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  ASSERT_TRUE(CommitCheckpoint({nullptr, root.str(), 2}, {"job", 9, 4}, {3, 1, 1}, descs).ok());
  for (auto [fb, fe] : {std::pair<int64_t, int64_t>{0, 30}, {30, 60}}) {
    RegionRequest q{"adam.exp_avg", FlatRangePieces(whole, fb, fe), {6, 10}, DataType::kFloat32};
    auto loaded = LoadLatest(Env::Default(), root.str(), {q});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_EQ(loaded->regions[0].size(), static_cast<size_t>(fe - fb) * 4);
    EXPECT_EQ(std::memcmp(loaded->regions[0].data(), full.data() + fb, (fe - fb) * 4), 0);
    EXPECT_EQ(loaded->layout, (Layout{3, 1, 1}));
  }
  // A request outside the tensor is refused before any allocation.
  RegionRequest bad{"adam.exp_avg", {Box{{0, 0}, {1000000, 1000000}}}, {}, DataType::kFloat32};
  auto r = LoadCheckpoint(Env::Default(), JoinPath(root.str(), CheckpointDirName(9, 4)), {bad});
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// The corruption tests: step 10 (good) and step 20 (damaged by `damage`). Loading must refuse 20
// with `reason` naming `file`, and load 10.
void ExpectFallback(const std::function<void(const std::string& dir20)>& damage,
                    const std::string& file, const std::string& reason, bool listed = true) {
  TempDir root;
  State s10(10), s20(20);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s10, 5, 4096).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s20, 5, 4096).ok());
  const std::string dir20 = DirOf(root.str(), 20);
  damage(dir20);

  auto direct = LoadCheckpoint(Env::Default(), dir20, s20.Requests());
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.status().message().find(file), std::string::npos) << direct.status();
  EXPECT_NE(direct.status().message().find(reason), std::string::npos) << direct.status();

  auto loaded = LoadLatest(Env::Default(), root.str(), s20.Requests());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(s10.Matches(*loaded));
  if (listed) {
    ASSERT_EQ(loaded->skipped.size(), 1u);
    EXPECT_NE(loaded->skipped[0].find(reason), std::string::npos) << loaded->skipped[0];
  }
  // `elastra ckpt verify` names the fault and fails; the good one alone passes.
  if (listed) {
    testing::internal::CaptureStdout();
    EXPECT_EQ(launch::CkptCommand({"verify", root.str()}), 1);
    std::string out = testing::internal::GetCapturedStdout();
    EXPECT_NE(out.find(file), std::string::npos) << out;
  }
  EXPECT_EQ(launch::CkptCommand({"verify", DirOf(root.str(), 10)}), 0);
}

TEST(CheckpointCorruptionTest, FlippedByteInShard) {
  ExpectFallback([](const std::string& d) { FlipByte(JoinPath(d, "shard-00000.bin"), 4096 + 5000); },
                 "shard-00000.bin", "checksum mismatch");
}

TEST(CheckpointCorruptionTest, TruncatedShard) {
  ExpectFallback([](const std::string& d) { fs::resize_file(JoinPath(d, "shard-00000.bin"), 9000); },
                 "shard-00000.bin", "truncated");
}

TEST(CheckpointCorruptionTest, DeletedManifestMeansNotCommitted) {
  ExpectFallback([](const std::string& d) { fs::remove(JoinPath(d, kManifestName)); },
                 kManifestName, "not a committed checkpoint", /*listed=*/false);
}

TEST(CheckpointCorruptionTest, UnknownVersion) {
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto bytes = ReadAll(p);
        uint32_t v = 99;
        std::memcpy(bytes.data() + 8, &v, 4);
        WriteAll(p, std::string(reinterpret_cast<char*>(bytes.data()), bytes.size()));
      },
      kManifestName, "unknown format version 99");
}

TEST(CheckpointCorruptionTest, ManifestNamesMissingFile) {
  ExpectFallback([](const std::string& d) { fs::remove(JoinPath(d, "shard-00000.bin")); },
                 "shard-00000.bin", "missing");
}

TEST(CheckpointCorruptionTest, SizesThatDoNotAddUp) {
  // A well-formed, correctly checksummed manifest whose region claims more bytes than its box.
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto m = DecodeManifest(ReadAll(p), p);
        ASSERT_TRUE(m.ok());
        m->tensors[1].regions[0].bytes += 8;
        WriteAll(p, EncodeManifest(*m));
      },
      kManifestName, "sizes do not add up");
}

TEST(CheckpointCorruptionTest, ManifestLiesAboutFileSize) {
  ExpectFallback(
      [](const std::string& d) {
        const std::string p = JoinPath(d, kManifestName);
        auto m = DecodeManifest(ReadAll(p), p);
        ASSERT_TRUE(m.ok());
        m->files[0].size += 4096;
        WriteAll(p, EncodeManifest(*m));
      },
      "shard-00000.bin", "truncated");
}

TEST(CheckpointCorruptionTest, CorruptionIsFoundBeforeAnyTensorChanges) {
  TempDir root;
  State s10(10), s20(20);
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s10, 5, 4096).ok());
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), s20, 5, 4096).ok());
  // Damage the LAST tensor of step 20: the earlier ones read fine, yet nothing may be applied.
  auto m = DecodeManifest(ReadAll(JoinPath(DirOf(root.str(), 20), kManifestName)), "M");
  ASSERT_TRUE(m.ok());
  FlipByte(JoinPath(DirOf(root.str(), 20), "shard-00000.bin"),
           m->tensors[2].regions[0].offset + 3);
  auto bad = LoadCheckpoint(Env::Default(), DirOf(root.str(), 20), s20.Requests());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'counts'"), std::string::npos) << bad.status();
  // The load hands out nothing on a fault, so nothing can have been applied; the fallback is 10.
  auto good = LoadLatest(Env::Default(), root.str(), s20.Requests());
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(s10.Matches(*good));
  ASSERT_EQ(good->skipped.size(), 1u);
  EXPECT_NE(good->skipped[0].find("'counts'"), std::string::npos);
}

}  // namespace
}  // namespace elastra::checkpoint
