// The checkpoint format: manifest and shard-descriptor encoding, every truncation and mutation of a
// manifest refused or still consistent, and the boxes of a flat range.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/checkpoint/checkpoint_test_util.h"

namespace elastra::checkpoint {
namespace {

TEST(CheckpointTest, ManifestAndDescriptorEncodingRoundTrip) {
  Manifest m;
  m.job = "j";
  m.step = 7;
  m.generation = 2;
  m.layout = {2, 1, 2};
  m.scalars = {{"elastra.step", 7}};
  m.files = {{"shard-00000.bin", 0, 4096 + 16}};
  m.tensors = {{"t", {4}, 0, {}, {{Box::Whole({4}), 0, 4096, 16, 4096, {123}}}}};
  std::string bytes = EncodeManifest(m);
  auto back = DecodeManifest(AsBytes(bytes), "M");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->layout, m.layout);
  EXPECT_EQ(back->tensors[0].regions[0].chunk_checksums[0], 123u);

  // Every truncation of a valid manifest is refused cleanly.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeManifest(AsBytes(bytes.substr(0, n)), "M").ok()) << n;
  }
  // A lying payload size is bounded before anything is allocated.
  std::string huge = bytes;
  uint64_t big = 1ull << 60;
  std::memcpy(huge.data() + 16, &big, 8);
  auto h = DecodeManifest(AsBytes(huge), "M");
  EXPECT_EQ(h.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(h.status().message().find("exceeds the limit"), std::string::npos);

  ShardDescriptor d;
  d.rank = 3;
  d.file = "shard-00003.bin";
  d.tensors = m.tensors;
  auto dd = DecodeShardDescriptor(AsBytes(EncodeShardDescriptor(d)));
  ASSERT_TRUE(dd.ok()) << dd.status();
  EXPECT_EQ(dd->rank, 3);
  EXPECT_FALSE(DecodeShardDescriptor(AsBytes(bytes)).ok());  // a manifest is not a descriptor
}

// Every single-byte change of a manifest's payload, with the frame checksum recomputed so the
// decoder and the validator see it, is either refused with an error or still a consistent
// manifest: never a crash, a huge allocation or an out-of-range read (run under ASan too).
TEST(CheckpointTest, MutatedManifestsNeverCrash) {
  TempDir root;
  ASSERT_TRUE(SaveAndCommit(Env::Default(), root.str(), State(4), 5, 4096).ok());
  const std::string path = JoinPath(DirOf(root.str(), 4), kManifestName);
  std::vector<std::byte> good = ReadAll(path);
  ASSERT_TRUE(DecodeManifest(good, path).ok());
  int refused = 0, accepted = 0;
  for (size_t pos = 32; pos < good.size(); ++pos) {
    for (uint8_t x : {0x01, 0x80, 0xff}) {
      std::vector<std::byte> bad = good;
      bad[pos] ^= std::byte{x};
      const uint64_t sum = Checksum(bad.data() + 32, bad.size() - 32);
      std::memcpy(bad.data() + 24, &sum, 8);
      auto m = DecodeManifest(bad, path);
      if (m.ok()) {
        ++accepted;
        EXPECT_TRUE(ValidateManifest(*m).ok());
      } else {
        ++refused;
        EXPECT_FALSE(m.status().message().empty());
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // e.g. a changed checksum value or scalar is still well-formed
}

TEST(CheckpointTest, FlatRangePieces) {
  const Box m{{0, 0}, {6, 10}};
  auto p = FlatRangePieces(m, 17, 41);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (Box{{1, 7}, {2, 10}}));
  EXPECT_EQ(p[1], (Box{{2, 0}, {4, 10}}));
  EXPECT_EQ(p[2], (Box{{4, 0}, {5, 1}}));
  EXPECT_EQ(FlatRangePieces(m, 20, 40), (std::vector<Box>{Box{{2, 0}, {4, 10}}}));
  EXPECT_EQ(FlatRangePieces(m, 3, 5), (std::vector<Box>{Box{{0, 3}, {1, 5}}}));
  EXPECT_TRUE(FlatRangePieces(m, 5, 5).empty());
  // Offset boxes (a TP shard further split over DP).
  EXPECT_EQ(FlatRangePieces(Box{{2, 4}, {4, 8}}, 2, 6),
            (std::vector<Box>{Box{{2, 6}, {3, 8}}, Box{{3, 4}, {4, 6}}}));
}

}  // namespace
}  // namespace elastra::checkpoint
