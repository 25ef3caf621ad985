// bfloat16 and float16: the conversions (round to nearest, ties to even, against independent
// references), and Gloo's allreduce and reduce-scatter of them, bit-exact against a reduction the
// test computes: the exact float32 sum of every rank's value, rounded once.
#include <gtest/gtest.h>

#if !defined(__FLT16_MAX__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "elastra/data_type.h"
#include "gloo_test_util.h"

namespace elastra {
namespace {

using testing::Spawn;

// The reference float16 conversions: the compiler's _Float16 where it has one (gcc; correctly
// rounded, nearest, ties to even), else the CPU's F16C instructions (clang 14, which builds
// make test-asan, has no _Float16 on x86), the same rounding in hardware.
#if defined(__FLT16_MAX__)
bool HaveReferenceHalf() { return true; }
uint16_t ReferenceHalf(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}
float ReferenceFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}
#else
bool HaveReferenceHalf() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
__attribute__((target("f16c"))) uint16_t ReferenceHalf(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float ReferenceFloat(uint16_t bits) { return _cvtsh_ss(bits); }
#endif

// The bfloat16 nearest to `x` (finite, in range), found in double precision from the two
// candidates around it: an independent reference for FloatToBFloat16.
uint16_t NearestBFloat16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t lo = static_cast<uint16_t>(bits >> 16);  // toward zero
  const uint16_t hi = static_cast<uint16_t>(lo + 1);      // away from zero
  const double d_lo = std::fabs(static_cast<double>(BFloat16ToFloat(lo)) - x);
  const double d_hi = std::fabs(static_cast<double>(BFloat16ToFloat(hi)) - x);
  if (d_lo < d_hi) return lo;
  if (d_hi < d_lo) return hi;
  return (lo & 1) == 0 ? lo : hi;
}

TEST(HalfConversionTest, BFloat16RoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::bit_cast<float>(any(rng));
    if (!std::isfinite(x) || std::fabs(x) > 3.0e38f) continue;
    ASSERT_EQ(FloatToBFloat16(x), NearestBFloat16(x)) << x;
    ++checked;
  }
  EXPECT_GT(checked, 100000);
  // Ties: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7 and goes to the even one (1).
  EXPECT_EQ(FloatToBFloat16(1.0f + 0x1p-8f), FloatToBFloat16(1.0f));
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * 0x1p-8f), FloatToBFloat16(1.0f + 4 * 0x1p-8f));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(INFINITY)), INFINITY);
}

TEST(HalfConversionTest, Float16MatchesTheCompilersFloat16) {
  if (!HaveReferenceHalf()) GTEST_SKIP() << "neither _Float16 nor F16C to compare with";
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 300000; ++i) {
    // Mostly values near half's range, so that subnormals, overflow and ties all occur.
    uint32_t bits = any(rng);
    if (i % 2 == 0) bits = (bits & 0x807fffffu) | ((100u + bits % 50u) << 23);
    if (i % 7 == 0) bits &= 0xffffe000u | 0x00001000u;  // ties at half's precision
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x)) continue;
    ASSERT_EQ(FloatToHalf(x), ReferenceHalf(x)) << x;
  }
  // Every half converts to float and back to itself.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const float c = ReferenceFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(c));
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(c)) << h;
    ASSERT_EQ(FloatToHalf(f), h);
  }
}

// Rank r's i-th value of `type`: a number of the type with at most 8 (bf16) or 11 (fp16)
// significant bits in [2^-7, 8), so that sums over up to 16 ranks are exact in float32 (they are
// multiples of 2^-17 below 2^7: 24 bits) whatever the order of the reduction.
uint16_t Value(DataType type, int rank, size_t i) {
  uint64_t x = static_cast<uint64_t>(rank) * 0x9E3779B97F4A7C15ULL + i + 1;  // splitmix64
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  x ^= x >> 31;
  // Magnitude in [2^-7, 8): a uniform fraction in [0.0078125, 7.99).
  const float mag = 0.0078125f + static_cast<float>(x >> 40) * (7.98f / 16777216.0f);
  const float v = (x & 1 ? -1.0f : 1.0f) * mag;
  return type == DataType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
}

float ToFloat(DataType type, uint16_t bits) {
  return type == DataType::kBFloat16 ? BFloat16ToFloat(bits) : HalfToFloat(bits);
}
uint16_t FromFloat(DataType type, float v) {
  return type == DataType::kBFloat16 ? FloatToBFloat16(v) : FloatToHalf(v);
}

// The reference: the sum in double (exact here), rounded once; max and min are exact.
uint16_t Reference(DataType type, ReduceOp op, int size, size_t i) {
  double acc = ToFloat(type, Value(type, 0, i));
  for (int r = 1; r < size; ++r) {
    const double v = ToFloat(type, Value(type, r, i));
    if (op == ReduceOp::kSum) acc += v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  const float f = static_cast<float>(acc);
  EXPECT_EQ(static_cast<double>(f), acc) << "the test's values must sum exactly in float32";
  return FromFloat(type, f);
}

// The same sum rounded to the type after every addition (what a reduction in the type itself
// gives): the test is only meaningful where this differs from rounding once.
uint16_t RoundedEachStep(DataType type, int size, size_t i) {
  uint16_t acc = Value(type, 0, i);
  for (int r = 1; r < size; ++r) {
    acc = FromFloat(type, ToFloat(type, acc) + ToFloat(type, Value(type, r, i)));
  }
  return acc;
}

class HalfReduce : public ::testing::TestWithParam<int> {};

TEST_P(HalfReduce, AllreduceIsTheFloat32SumRoundedOnce) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  for (DataType type : {DataType::kBFloat16, DataType::kFloat16}) {
    // Distinguishes rounding once from rounding at each step on some elements.
    int differs = 0;
    for (size_t i = 0; i < 1000; ++i)
      differs += Reference(type, ReduceOp::kSum, size, i) != RoundedEachStep(type, size, i);
    if (size > 2) EXPECT_GT(differs, 10) << DataTypeName(type);
  }
  Spawn(&store, "half_allreduce/", size, [&](Communicator& comm) {
    for (DataType type : {DataType::kBFloat16, DataType::kFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
        // 40000 elements take the ring (160 KB as float32), the others the direct exchange.
        for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{40000}}) {
          std::vector<uint16_t> buf(count);
          for (size_t i = 0; i < count; ++i) buf[i] = Value(type, comm.rank(), i);
          ASSERT_TRUE(comm.Allreduce(buf.data(), count, type, op).ok());
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(buf[i], Reference(type, op, size, i))
                << DataTypeName(type) << " op " << static_cast<int>(op) << " i " << i;
          }
        }
      }
    }
  });
}

TEST_P(HalfReduce, ReduceScatterIsTheFloat32SumRoundedOnce) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  Spawn(&store, "half_reduce_scatter/", size, [&](Communicator& comm) {
    for (DataType type : {DataType::kBFloat16, DataType::kFloat16}) {
      for (size_t count : {size_t{1}, size_t{333}, size_t{20000}}) {
        std::vector<uint16_t> send(count * size), recv(count);
        for (size_t i = 0; i < send.size(); ++i) send[i] = Value(type, comm.rank(), i);
        ASSERT_TRUE(comm.ReduceScatter(send.data(), recv.data(), count, type, ReduceOp::kSum,
                                       std::chrono::milliseconds(10000))
                        .ok());
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(recv[i], Reference(type, ReduceOp::kSum, size, comm.rank() * count + i));
        }
      }
    }
  });
}

TEST(HalfReduceTest, BroadcastAndAllgatherMoveTheBitsUnchanged) {
  InMemoryKeyValueStore store;
  Spawn(&store, "half_moves/", 3, [&](Communicator& comm) {
    std::vector<uint16_t> buf(101);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = Value(DataType::kBFloat16, comm.rank(), i);
    ASSERT_TRUE(comm.Broadcast(buf.data(), buf.size(), DataType::kBFloat16, 2).ok());
    for (size_t i = 0; i < buf.size(); ++i) ASSERT_EQ(buf[i], Value(DataType::kBFloat16, 2, i));
    std::vector<uint16_t> all(buf.size() * 3);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = Value(DataType::kFloat16, comm.rank(), i);
    ASSERT_TRUE(comm.Allgather(buf.data(), all.data(), buf.size(), DataType::kFloat16,
                               std::chrono::milliseconds(10000))
                    .ok());
    for (int r = 0; r < 3; ++r) {
      for (size_t i = 0; i < buf.size(); ++i) {
        ASSERT_EQ(all[r * buf.size() + i], Value(DataType::kFloat16, r, i));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, HalfReduce, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace elastra
