// TensorCollection: the training state a Worker owns and moves between processes: named tensors
// with a global shape, a dtype and a sharding rule (include/elastra/sharding.h), plus int64
// scalars (step, data cursor, seeds, optimizer counters).
//
// Before Worker::Start() every tensor is held whole, so a program registers its state and
// initializes the global values (deterministically or not: the job starts from global rank 0's
// values). From Start() on each rank holds only its local shard under the current layout: the
// elements of region(name), in row-major order of the region's box. The model reads and writes
// views of the local shards; after a reconfiguration the shards and views change, so re-fetch
// them. Every rank must register the same tensors and scalars, in the same order. Tensors have
// one or two dimensions (fold more into two). Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/sharding.h"
#include "elastra/status.h"

namespace elastra {

// The reserved scalar that holds the number of applied steps; the Worker registers it.
inline constexpr char kStepScalarName[] = "elastra.step";

// Common rules (see sharding.h): replicated on every rank; split over TP along `dim`.
inline ShardingRule Replicated() { return ShardingRule{}; }
inline ShardingRule SplitOverTp(int dim, int layer = -1) { return ShardingRule{dim, layer, false}; }
inline ShardingRule OwnedByLayer(int layer) { return ShardingRule{-1, layer, false}; }

class TensorCollection {
 public:
  struct Tensor {
    TensorSpec spec;  // name, global shape, element size, rule
    DataType dtype = DataType::kFloat32;
    Region region;               // what this rank holds (the whole tensor before Start())
    std::vector<uint8_t> data;   // the local shard

    const std::string& name() const { return spec.name; }
    size_t elements() const { return data.size() / DataTypeSize(dtype); }
    size_t bytes() const { return data.size(); }
  };

  // Registers a zero-filled tensor, held whole until Start(). kInvalidArgument for a duplicate or
  // empty name, a shape that is not 1-D or 2-D, a dimension < 1, a split dimension that does not
  // exist, a layer outside [0, num_layers()), or more than 2^40 bytes.
  Status AddTensor(const std::string& name, std::vector<int64_t> shape, DataType dtype,
                   ShardingRule rule = Replicated());
  // Registers a scalar (initial value `value`). kInvalidArgument for a duplicate name.
  Status AddScalar(const std::string& name, int64_t value);
  // The number of layers that layer-owned rules refer to (default 1). Set it before adding
  // layer-owned tensors. kInvalidArgument when < 1.
  Status SetNumLayers(int layers);
  int num_layers() const { return num_layers_; }

  bool HasTensor(const std::string& name) const { return index_.count(name) > 0; }

  // A typed view of the local shard. CHECK-fails on an unknown name or a wrong element type:
  // that is a programming error, not bad input.
  template <class T>
  std::span<T> View(const std::string& name) {
    Tensor& t = tensor(name);
    CheckType(t, sizeof(T));
    return std::span<T>(reinterpret_cast<T*>(t.data.data()), t.data.size() / sizeof(T));
  }
  // The part of the global tensor this rank holds.
  const Region& region(const std::string& name) { return tensor(name).region; }

  int64_t GetScalar(const std::string& name) const;
  void SetScalar(const std::string& name, int64_t value);

  const std::vector<Tensor>& tensors() const { return tensors_; }
  std::vector<Tensor>& mutable_tensors() { return tensors_; }
  const std::vector<std::pair<std::string, int64_t>>& scalars() const { return scalars_; }
  std::vector<std::pair<std::string, int64_t>>& mutable_scalars() { return scalars_; }

  // The tensors' specs in registration order, for reshard plans and checkpoints.
  StateSpec Spec() const;
  // Bytes of all local shards.
  size_t bytes() const;
  // A hash of names, shapes, dtypes, rules and scalar names: equal on ranks that registered the
  // same state.
  uint64_t Signature() const;

  Tensor& tensor(const std::string& name);

 private:
  void CheckType(const Tensor& t, size_t element_size) const;

  int num_layers_ = 1;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, int64_t>> scalars_;
};

}  // namespace elastra
