// collection_adapter.h: a TensorCollection's local shards (TP split, ZeRO flat ranges) saved
// under one layout and loaded under another, then swapped into the collection.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include "worker/collection_adapter.h"
#include "state/tensor_collection_access.h"

namespace elastra::checkpoint {
namespace {

namespace fs = std::filesystem;

// A [4, 6] float tensor split over TP along dim 1, and a [12] float vector under ZeRO. Built
// through the collection's plain members, so no worker library is needed.
TensorCollection Make(const Region& w_region, const Region& v_region, float base) {
  TensorCollection c;
  TensorCollection::Tensor w;
  w.spec = {"w", {4, 6}, 4, SplitOverTp(1)};
  w.region = w_region;
  w.data.resize(static_cast<size_t>(w_region.elements()) * 4);
  TensorCollection::Tensor v;
  v.spec = {"v", {12}, 4, ShardingRule{-1, -1, true}};
  v.region = v_region;
  v.data.resize(static_cast<size_t>(v_region.elements()) * 4);
  // Fill with the global values base + row-major global index.
  auto fill = [&](TensorCollection::Tensor& t, int64_t cols) {
    float* p = reinterpret_cast<float*>(t.data.data());
    int64_t i = 0;
    for (const Box& b : BoxesOf(t.spec, t.region)) {
      const bool one_d = b.begin.size() == 1;
      const int64_t r0 = one_d ? 0 : b.begin[0], r1 = one_d ? 1 : b.end[0];
      const int64_t c0 = b.begin.back(), c1 = b.end.back();
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t col = c0; col < c1; ++col) p[i++] = base + static_cast<float>(r * cols + col);
      }
    }
  };
  fill(w, 6);
  fill(v, 12);
  TensorCollectionAccess::Tensors(c).push_back(std::move(w));
  TensorCollectionAccess::Tensors(c).push_back(std::move(v));
  TensorCollectionAccess::Scalars(c) = {{"elastra.step", 0}};
  return c;
}

Region Rows(int64_t rows, int64_t c0, int64_t c1) {
  return Region{Rect{0, rows, c0, c1}, 0, rows * (c1 - c0)};
}

TEST(CollectionAdapterTest, SaveUnderTp2ZeroLoadUnderTp3) {
  const std::string root =
      (fs::temp_directory_path() / ("elastra_adapter_test_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  // Layout A: two ranks; w split in column halves, v split flat [0,5) and [5,12).
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 2; ++rank) {
    TensorCollection c = Make(Rows(4, rank * 3, rank * 3 + 3),
                              Region{Rect{0, 1, 0, 12}, rank == 0 ? 0 : 5, rank == 0 ? 5 : 12},
                              1000.0f);
    TensorCollectionAccess::Scalars(c)[0].second = 42;
    WriterOptions o;
    o.root = root;
    o.rank = rank;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    auto d = (*w)->Write({"job", 42, 3}, ViewOf(c));
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  ASSERT_TRUE(CommitCheckpoint({nullptr, root, 2}, {"job", 42, 3}, {1, 1, 2}, descs).ok());
  // Layout B: three ranks; w split in column thirds, v flat [0,4), [4,8), [8,12).
  for (int rank = 0; rank < 3; ++rank) {
    TensorCollection expected = Make(Rows(4, rank * 2, rank * 2 + 2),
                                     Region{Rect{0, 1, 0, 12}, rank * 4, rank * 4 + 4}, 1000.0f);
    TensorCollection c = Make(Rows(4, rank * 2, rank * 2 + 2),
                              Region{Rect{0, 1, 0, 12}, rank * 4, rank * 4 + 4}, -5.0f);
    auto loaded = LoadLatest(Env::Default(), root, RequestsFor(c));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(RestoreInto(std::move(loaded).value(), &c).ok());
    EXPECT_EQ(c.tensors()[0].data, expected.tensors()[0].data) << rank;
    EXPECT_EQ(c.tensors()[1].data, expected.tensors()[1].data) << rank;
    EXPECT_EQ(c.scalars()[0].second, 42);
  }
  fs::remove_all(root);
}

// dp=2 x tp=2: the two DP replicas of each TP shard of w save half of it each, and the four
// holders of the replicated v a quarter each: one copy of everything on disk. A tp=1 rank then
// loads the whole tensors from the four files.
TEST(CollectionAdapterTest, ReplicasShareTheWrite) {
  const std::string root =
      (fs::temp_directory_path() / ("elastra_adapter_dp_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  std::vector<ShardDescriptor> descs;
  uint64_t saved = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const int dp_rank = rank / 2, tp_rank = rank % 2;
    TensorCollection c = Make(Rows(4, tp_rank * 3, tp_rank * 3 + 3),
                              Region{Rect{0, 1, 0, 12}, 0, 12}, 7.0f);  // v not ZeRO here
    TensorCollectionAccess::Tensors(c)[1].spec.rule = Replicated();
    const Layout layout{2, 1, 2};
    const Coordinates coords = CoordinatesOf(layout, rank);
    ASSERT_EQ(coords.dp_rank, dp_rank);
    ASSERT_EQ(coords.tp_rank, tp_rank);
    StateView v = ViewOf(c, layout, coords);
    for (const TensorShard& t : v.tensors) saved += t.data.size();
    WriterOptions o;
    o.root = root;
    o.rank = rank;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    auto d = (*w)->Write({"job", 5, 1}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  EXPECT_EQ(saved, (24u + 12u) * 4);  // every element once
  // Without one DP rank's half the commit refuses: the regions do not tile the tensors.
  auto partial = CommitCheckpoint({nullptr, root, 2}, {"job", 5, 1}, {2, 1, 2},
                                  {descs[0], descs[1], descs[2]});
  EXPECT_EQ(partial.status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(CommitCheckpoint({nullptr, root, 2}, {"job", 5, 1}, {2, 1, 2}, descs).ok());
  TensorCollection expected = Make(Rows(4, 0, 6), Region{Rect{0, 1, 0, 12}, 0, 12}, 7.0f);
  TensorCollection c = Make(Rows(4, 0, 6), Region{Rect{0, 1, 0, 12}, 0, 12}, 0.0f);
  auto loaded = LoadLatest(Env::Default(), root, RequestsFor(c));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(RestoreInto(std::move(loaded).value(), &c).ok());
  EXPECT_EQ(c.tensors()[0].data, expected.tensors()[0].data);
  EXPECT_EQ(c.tensors()[1].data, expected.tensors()[1].data);
  fs::remove_all(root);
}

// A bfloat16 [4, 6] tensor split over TP along dim 1, a float16 [12] vector under ZeRO and an
// int32 [5] vector, each element's bits a function of its global index (bfloat16 and float16 of
// index / 8 - 1, rounded to nearest-even here): saved at tp=2, loaded at tp=3 bit for bit; a
// float32 collection of the same shapes is refused, with both types named.
TensorCollection MakeHalf(const Region& w_region, const Region& v_region, bool fill,
                          DataType w_type = DataType::kBFloat16) {
  TensorCollection c;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, DataType type,
                 ShardingRule rule, const Region& region) {
    TensorCollection::Tensor t;
    t.spec = {name, std::move(shape), DataTypeSize(type), rule};
    t.dtype = type;
    t.region = region;
    t.data.resize(static_cast<size_t>(region.elements()) * DataTypeSize(type));
    if (fill) {
      const int64_t cols = t.spec.shape.back();
      int64_t i = 0;
      for (const Box& b : BoxesOf(t.spec, t.region)) {
        const bool one_d = b.begin.size() == 1;
        const int64_t r0 = one_d ? 0 : b.begin[0], r1 = one_d ? 1 : b.end[0];
        for (int64_t r = r0; r < r1; ++r) {
          for (int64_t col = b.begin.back(); col < b.end.back(); ++col, ++i) {
            const int64_t g = r * cols + col;
            const float x = static_cast<float>(g) / 8.0f - 1.0f + 1.0f / 3.0f;
            uint8_t* p = t.data.data() + i * DataTypeSize(type);
            if (type == DataType::kBFloat16 || type == DataType::kFloat16) {
              const uint16_t h = type == DataType::kBFloat16 ? FloatToBFloat16(x) : FloatToHalf(x);
              std::memcpy(p, &h, 2);
            } else if (type == DataType::kInt32) {
              const int32_t v = static_cast<int32_t>(g * 7 - 3);
              std::memcpy(p, &v, 4);
            } else {
              std::memcpy(p, &x, 4);
            }
          }
        }
      }
    }
    TensorCollectionAccess::Tensors(c).push_back(std::move(t));
  };
  add("w", {4, 6}, w_type, SplitOverTp(1), w_region);
  add("v", {12}, DataType::kFloat16, ShardingRule{-1, -1, true}, v_region);
  add("u", {5}, DataType::kInt32, Replicated(), Region{Rect{0, 1, 0, 5}, 0, 5});
  TensorCollectionAccess::Scalars(c) = {{"elastra.step", 9}};
  return c;
}

TEST(CollectionAdapterTest, HalfTypesRoundTripBitExactAcrossLayoutsAndKeepTheirType) {
  const std::string root =
      (fs::temp_directory_path() / ("elastra_adapter_half_" + std::to_string(::getpid()))).string();
  fs::remove_all(root);
  std::vector<ShardDescriptor> descs;
  for (int rank = 0; rank < 2; ++rank) {
    TensorCollection c = MakeHalf(Rows(4, rank * 3, rank * 3 + 3),
                                  Region{Rect{0, 1, 0, 12}, rank == 0 ? 0 : 5, rank == 0 ? 5 : 12},
                                  true);
    WriterOptions o;
    o.root = root;
    o.rank = rank;
    auto w = CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok());
    // u is replicated: only rank 0 writes it (one copy on disk).
    StateView v = ViewOf(c);
    if (rank == 1) v.tensors.erase(v.tensors.begin() + 2);
    auto d = (*w)->Write({"job", 9, 1}, v);
    ASSERT_TRUE(d.ok()) << d.status();
    descs.push_back(*d);
  }
  ASSERT_TRUE(CommitCheckpoint({nullptr, root, 2}, {"job", 9, 1}, {1, 1, 2}, descs).ok());
  // The manifest records each tensor's type.
  auto reader = CheckpointReader::Open(Env::Default(), root + "/" + CheckpointDirName(9, 1));
  ASSERT_TRUE(reader.ok()) << reader.status();
  ASSERT_NE((*reader)->manifest().FindTensor("w"), nullptr);
  EXPECT_EQ((*reader)->manifest().FindTensor("w")->dtype, static_cast<int>(DataType::kBFloat16));
  EXPECT_EQ((*reader)->manifest().FindTensor("v")->dtype, static_cast<int>(DataType::kFloat16));
  EXPECT_EQ((*reader)->manifest().FindTensor("u")->dtype, static_cast<int>(DataType::kInt32));
  for (int rank = 0; rank < 3; ++rank) {
    const Region wr = Rows(4, rank * 2, rank * 2 + 2);
    const Region vr{Rect{0, 1, 0, 12}, rank * 4, rank * 4 + 4};
    TensorCollection expected = MakeHalf(wr, vr, true);
    TensorCollection c = MakeHalf(wr, vr, false);
    auto loaded = LoadLatest(Env::Default(), root, RequestsFor(c));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    ASSERT_TRUE(RestoreInto(std::move(loaded).value(), &c).ok());
    for (size_t t = 0; t < 3; ++t) {
      EXPECT_EQ(c.tensors()[t].data, expected.tensors()[t].data) << rank << " " << t;
    }
  }
  // The same shapes in float32: refused, naming both types.
  TensorCollection f32 = MakeHalf(Rows(4, 0, 6), Region{Rect{0, 1, 0, 12}, 0, 12}, false,
                                  DataType::kFloat32);
  auto refused = LoadLatest(Env::Default(), root, RequestsFor(f32));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("bfloat16 in the checkpoint"), std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find("float32 expected"), std::string::npos)
      << refused.status();
  fs::remove_all(root);
}

}  // namespace
}  // namespace elastra::checkpoint
