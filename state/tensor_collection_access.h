// TensorCollectionAccess: what the worker library (and its tests) do to a TensorCollection that a
// training program never does: fill its tensors and scalars in place (state moves, commits,
// checkpoint loads), move every shard back to host memory, release every shard while parked. Kept
// off the public class so that the public API shows only what programs use.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "elastra/tensor_collection.h"

namespace elastra {

class TensorCollectionAccess {
 public:
  static std::vector<TensorCollection::Tensor>& Tensors(TensorCollection& c) { return c.tensors_; }
  static std::vector<std::pair<std::string, int64_t>>& Scalars(TensorCollection& c) {
    return c.scalars_;
  }
  // MoveToDevice() reversed (with keep_values false it only frees the device buffers, leaving
  // zero-filled host shards of the same size, for a caller that overwrites them anyway). A no-op
  // without a device. On an error the tensors already moved stay moved: nothing is lost.
  static Status MoveToHost(TensorCollection& c, bool keep_values = true) {
    return c.MoveToHost(keep_values);
  }
  // Frees every shard (host and device); regions become empty. For a worker that leaves the
  // layout (parking) and gets its state back from the members later.
  static void ReleaseShards(TensorCollection& c) { c.ReleaseShards(); }
};

}  // namespace elastra
