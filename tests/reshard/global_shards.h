// Known global tensors for reshard tests and benchmarks: every byte is a hash of (tensor,
// element, byte), so a shard cut for any region can be checked byte for byte after a move.
// Header-only, for the CPU reshard test, bench_reshard and the GPU reshard helper.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "elastra/sharding.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"

namespace elastra::testing {

// Byte `k` of element `e` of tensor `t` in the global tensors.
inline uint8_t GlobalByte(int t, int64_t e, size_t k) {
  uint64_t x = (static_cast<uint64_t>(t) << 40) ^ (static_cast<uint64_t>(e) * 0x9E3779B97F4A7C15ULL) ^ k;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 32;
  return static_cast<uint8_t>(x);
}

// The local shard of `tensor` (index t) for `region`, cut from the global tensor.
inline HostBytes MakeShard(int t, const TensorSpec& tensor, const Region& region) {
  const size_t es = tensor.element_size;
  HostBytes out(region.elements() * es, 0);
  const int64_t cols = FullRect(tensor.shape).col_end;
  for (const Rect& p : region.Pieces()) {
    for (int64_t r = p.row_begin; r < p.row_end; ++r) {
      // A piece's row is contiguous in the local buffer.
      uint8_t* dst = out.data() + region.LocalOffset(r, p.col_begin) * es;
      for (int64_t c = p.col_begin; c < p.col_end; ++c) {
        for (size_t k = 0; k < es; ++k) *dst++ = GlobalByte(t, r * cols + c, k);
      }
    }
  }
  return out;
}

// Every shard `worker` holds under placement `p` (none when it holds no rank there).
inline ShardMap ShardsOf(const StateSpec& state, const Placement& p, int worker) {
  ShardMap shards;
  const int rank = p.RankOfWorker(worker);
  if (rank < 0) return shards;
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    const Region region = LocalRegion(state.tensors[t], state.num_layers, p.layout,
                                      CoordinatesOf(p.layout, rank));
    if (!region.empty()) {
      shards[state.tensors[t].name] = MakeShard(static_cast<int>(t), state.tensors[t], region);
    }
  }
  return shards;
}

}  // namespace elastra::testing
