// Sharding rules and region math for the training state (Megatron-style 3-D parallelism).
//
// Every tensor is viewed as a matrix: a 2-D tensor [rows, cols] as it is, a 1-D tensor [n] as
// [1, n]. A rule says how the tensor is laid out over a Layout:
//   - tp_split_dim: -1 replicated over TP, else the (original) dimension split over the TP ranks
//     in balanced contiguous parts (rank t gets [t*n/tp, (t+1)*n/tp)); sizes need not divide.
//   - layer: -1 held by every pipeline stage, else only by the stage holding that layer.
//   - zero: ZeRO-1; the rank's TP/PP box, flattened row-major, is split over the DP ranks in
//     balanced contiguous flat ranges. Without it every DP rank holds the whole box (replicas).
// The layer-to-stage split is balanced and contiguous: with L layers and pp stages, the first
// L % pp stages hold ceil(L/pp) layers, the others floor(L/pp), in layer order.
//
// A rank's local shard of a tensor is one contiguous buffer: the elements of its Region in the
// box's row-major order, starting at flat_begin. Plain value types and pure functions:
// thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra {

struct ShardingRule {
  int tp_split_dim = -1;  // -1: replicated over TP; else the dimension split over TP
  int layer = -1;         // -1: on every stage; else owned by the stage holding this layer
  bool zero = false;      // ZeRO-1: the local box is further split flat over DP
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // 1 or 2 dimensions, each >= 1
  size_t element_size = 4;     // bytes per element
  ShardingRule rule;
};

// The whole state of a job: its tensors in a fixed order (every rank iterates in this order).
struct StateSpec {
  int num_layers = 1;
  std::vector<TensorSpec> tensors;
  // Bytes of every tensor at full size, counted once.
  int64_t TotalBytes() const;
};

// A rectangle of the matrix view: rows [row_begin, row_end) x cols [col_begin, col_end).
struct Rect {
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  bool empty() const { return row_end <= row_begin || col_end <= col_begin; }
  int64_t volume() const { return empty() ? 0 : (row_end - row_begin) * (col_end - col_begin); }
  bool operator==(const Rect&) const = default;
};

Rect Intersect(const Rect& a, const Rect& b);
// a minus b as at most 4 disjoint rectangles (row bands above and below, then left and right).
std::vector<Rect> Subtract(const Rect& a, const Rect& b);

// What one rank holds of one tensor: the elements of `box` whose row-major flat index inside
// the box lies in [flat_begin, flat_end). Empty when the rank holds nothing of the tensor.
struct Region {
  Rect box;
  int64_t flat_begin = 0;
  int64_t flat_end = 0;

  bool empty() const { return flat_end <= flat_begin || box.empty(); }
  int64_t elements() const { return empty() ? 0 : flat_end - flat_begin; }
  // The region as at most 3 disjoint rectangles: a partial first row, full middle rows, a
  // partial last row.
  std::vector<Rect> Pieces() const;
  // Position in the rank's local buffer (in elements) of global element (row, col), which must
  // lie in the region.
  int64_t LocalOffset(int64_t row, int64_t col) const {
    return (row - box.row_begin) * (box.col_end - box.col_begin) + (col - box.col_begin) -
           flat_begin;
  }
};

// The matrix view [rows, cols] of a shape (1-D [n] -> [1, n]).
Rect FullRect(const std::vector<int64_t>& shape);

// Layers [first, last) held by pipeline stage `stage`.
struct LayerRange {
  int first = 0;
  int last = 0;
};
// Inline: the coordinator's planner uses them without linking the worker's region math.
inline LayerRange StageLayers(int num_layers, int pp, int stage) {
  const int base = num_layers / pp, extra = num_layers % pp;
  const int first = stage * base + (stage < extra ? stage : extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}
inline int StageOfLayer(int num_layers, int pp, int layer) {
  const int base = num_layers / pp, extra = num_layers % pp;
  const int big = extra * (base + 1);  // layers held by the first `extra` stages
  if (base == 0) return layer;  // pp > num_layers: invalid, see ValidateTensor
  return layer < big ? layer / (base + 1) : extra + (layer - big) / base;
}

// Checks a tensor's spec and that `layout` can hold it (kInvalidArgument with the reason):
// 1-2 dims, sizes >= 1, split dim exists and has at least tp elements, layer in range,
// pp <= num_layers. Inline so the coordinator can check layouts without linking the worker.
inline Status ValidateTensor(const TensorSpec& t, int num_layers, const Layout& layout) {
  const std::string who = "tensor '" + t.name + "': ";
  if (t.shape.empty() || t.shape.size() > 2) {
    return InvalidArgumentError(who + "must have 1 or 2 dimensions, has " +
                                std::to_string(t.shape.size()));
  }
  for (int64_t d : t.shape) {
    if (d < 1) return InvalidArgumentError(who + "every dimension must be >= 1");
  }
  if (t.element_size == 0) return InvalidArgumentError(who + "element size must be >= 1");
  if (layout.dp < 1 || layout.pp < 1 || layout.tp < 1) {
    return InvalidArgumentError("layout " + layout.ToString() + " has a degree below 1");
  }
  if (num_layers < 1 || layout.pp > num_layers) {
    return InvalidArgumentError("pp=" + std::to_string(layout.pp) + " exceeds the " +
                                std::to_string(num_layers) + " layers");
  }
  const auto& r = t.rule;
  if (r.tp_split_dim != -1) {
    if (r.tp_split_dim < 0 || r.tp_split_dim >= static_cast<int>(t.shape.size())) {
      return InvalidArgumentError(who + "split dimension " + std::to_string(r.tp_split_dim) +
                                  " does not exist");
    }
    if (t.shape[r.tp_split_dim] < layout.tp) {
      return InvalidArgumentError(who + "dimension " + std::to_string(r.tp_split_dim) + " of " +
                                  std::to_string(t.shape[r.tp_split_dim]) +
                                  " elements cannot be split over tp=" +
                                  std::to_string(layout.tp));
    }
  }
  if (r.layer < -1 || r.layer >= num_layers) {
    return InvalidArgumentError(who + "layer " + std::to_string(r.layer) + " out of range");
  }
  return OkStatus();
}

// The region of `tensor` held by the rank at `coords` of `layout`. Assumes ValidateTensor passed.
Region LocalRegion(const TensorSpec& tensor, int num_layers, const Layout& layout,
                   const Coordinates& coords);

// Megatron-style GPT state. Parameters in `param_size` bytes per element; with `adam` every
// parameter also has fp32 master weights and two fp32 moments ("<name>.master", ".exp_avg",
// ".exp_avg_sq"), sharded over DP when `zero` is set (ZeRO-1: parameters stay replicated).
//   embed.word [vocab, hidden] vocabulary split over TP, stage of layer 0
//   embed.pos [seq_len, hidden] replicated, stage of layer 0
//   layer<l>.ln1.{weight,bias}, ln2.{weight,bias} [hidden] replicated
//   layer<l>.attn.qkv.{weight [3h, h], bias [3h]} column-parallel (dim 0 split)
//   layer<l>.attn.proj.weight [h, h] row-parallel (dim 1 split), .bias [h] replicated
//   layer<l>.mlp.fc1.{weight [ffn, h], bias [ffn]} column-parallel
//   layer<l>.mlp.fc2.weight [h, ffn] row-parallel, .bias [h] replicated
//   final_ln.{weight,bias} [hidden] replicated, stage of the last layer
struct GptConfig {
  int layers = 1;
  int64_t hidden = 64;
  int64_t ffn_hidden = 256;
  int64_t vocab = 1000;
  int64_t seq_len = 128;
  size_t param_size = 2;  // bytes per parameter element (bf16/fp16: 2, fp32: 4)
  bool adam = true;
  bool zero = false;
};
StateSpec GptState(const GptConfig& config);

}  // namespace elastra
