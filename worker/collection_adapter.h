// Glue between a TensorCollection (its local shards under the current layout, see
// <elastra/sharding.h>) and the checkpoint engine: the view to snapshot, the requests to load a
// rank's regions under any layout, and the move of a verified load into the collection.
// Header-only so elastra_checkpoint does not depend on the worker library. Thread-compatible.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "elastra/tensor_collection.h"
#include "checkpoint/format.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "state/tensor_collection_access.h"

namespace elastra::checkpoint {

inline RuleEntry RuleOf(const ShardingRule& r) {
  return RuleEntry{r.tp_split_dim, r.layer, r.zero};
}

// The boxes (in the tensor's own dimensions) that make up `region`, in the order of the rank's
// local buffer: one box for a TP/PP shard, up to three for a ZeRO flat range, none when empty.
inline std::vector<Box> BoxesOf(const TensorSpec& spec, const Region& region) {
  if (region.empty()) return {};
  const Box matrix{{region.box.row_begin, region.box.col_begin},
                   {region.box.row_end, region.box.col_end}};
  std::vector<Box> pieces = FlatRangePieces(matrix, region.flat_begin, region.flat_end);
  if (spec.shape.size() == 1) {  // the matrix view of [n] is [1, n]
    for (Box& b : pieces) b = Box{{b.begin[1]}, {b.end[1]}};
  }
  return pieces;
}

// What this rank saves, as boxes over its local buffers. The spans point into `state` (into device
// memory for shards on a device: the writer needs WriterOptions::copy_from_device then): keep it
// unchanged until CheckpointWriter::Snapshot() returns.
//
// A shard held identically by several ranks (its rule replicates it over DP unless `zero`, over
// TP unless `tp_split_dim` >= 0, over PP unless `layer` >= 0) is saved once in total, not once per
// holder: the k-th of its n holders saves the flat part [k*m/n, (k+1)*m/n) of its m elements, so
// the holders share the write bandwidth. CommitCheckpoint checks that the parts of all ranks tile
// every tensor. The defaults (one rank) save everything, as before Worker::Start().
inline StateView ViewOf(const TensorCollection& state, const Layout& layout = {},
                        const Coordinates& coords = {}) {
  StateView view;
  for (const TensorCollection::Tensor& t : state.tensors()) {
    const size_t esize = ElementSize(static_cast<int32_t>(t.dtype));
    int64_t holders = 1, k = 0;
    if (!t.spec.rule.zero) {
      holders *= layout.dp;
      k = k * layout.dp + coords.dp_rank;
    }
    if (t.spec.rule.tp_split_dim < 0) {
      holders *= layout.tp;
      k = k * layout.tp + coords.tp_rank;
    }
    if (t.spec.rule.layer < 0) {
      holders *= layout.pp;
      k = k * layout.pp + coords.pp_rank;
    }
    Region part = t.region;
    if (holders > 1 && !part.empty()) {
      const int64_t m = part.elements();
      part.flat_begin = t.region.flat_begin + m * k / holders;
      part.flat_end = t.region.flat_begin + m * (k + 1) / holders;
    }
    if (part.empty()) continue;
    size_t at = static_cast<size_t>(part.flat_begin - t.region.flat_begin) * esize;
    for (const Box& b : BoxesOf(t.spec, part)) {
      const size_t n = b.volume() * esize;
      TensorShard s;
      s.name = t.spec.name;
      s.shape = t.spec.shape;
      s.dtype = t.dtype;
      s.rule = RuleOf(t.spec.rule);
      s.region = b;
      const void* base = t.on_device ? t.device_data.data() : t.data.data();
      s.data = {static_cast<const std::byte*>(base) + at, n};
      s.on_device = t.on_device;
      at += n;
      view.tensors.push_back(std::move(s));
    }
  }
  view.scalars = state.scalars();
  return view;
}

// The requests for this rank's current regions (set them for the new layout first): a load then
// reads only those bytes, from whichever files hold them.
inline std::vector<RegionRequest> RequestsFor(const TensorCollection& state) {
  std::vector<RegionRequest> out;
  for (const TensorCollection::Tensor& t : state.tensors()) {
    out.push_back({t.spec.name, BoxesOf(t.spec, t.region), t.spec.shape, t.dtype});
  }
  return out;
}

// The host shards of `state` as the buffers of a load in place (LoadCheckpointInto) of
// RequestsFor(*state). The shards must be in host memory and sized for their regions.
inline std::vector<std::span<std::byte>> BuffersOf(TensorCollection& state) {
  std::vector<std::span<std::byte>> out;
  for (TensorCollection::Tensor& t : TensorCollectionAccess::Tensors(state)) {
    out.push_back({reinterpret_cast<std::byte*>(t.data.data()), t.data.size()});
  }
  return out;
}

// Sets the scalars of `state` that the checkpoint of `loaded` has.
inline void RestoreScalars(const LoadedState& loaded, TensorCollection* state) {
  for (auto& [name, value] : TensorCollectionAccess::Scalars(*state)) {
    for (const auto& [n, v] : loaded.scalars) {
      if (n == name) value = v;
    }
  }
}

// Moves a load made with RequestsFor(*state) into *state (buffers swapped, no copy) and sets the
// scalars the checkpoint has. kInvalidArgument when the load does not match; nothing changes then.
inline Status RestoreInto(LoadedState&& loaded, TensorCollection* state) {
  auto& tensors = TensorCollectionAccess::Tensors(*state);
  if (loaded.regions.size() != tensors.size()) {
    return InvalidArgumentError("the load holds " + std::to_string(loaded.regions.size()) +
                                " tensors, the collection " + std::to_string(tensors.size()));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].on_device) {
      return FailedPreconditionError("tensor '" + tensors[i].spec.name +
                                     "' is on the device: load into host shards (MoveToHost)");
    }
    if (loaded.regions[i].size() != tensors[i].data.size()) {
      return InvalidArgumentError("tensor '" + tensors[i].spec.name + "': the load holds " +
                                  std::to_string(loaded.regions[i].size()) + " bytes, " +
                                  std::to_string(tensors[i].data.size()) + " expected");
    }
  }
  for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data.swap(loaded.regions[i]);
  RestoreScalars(loaded, state);
  return OkStatus();
}

}  // namespace elastra::checkpoint
