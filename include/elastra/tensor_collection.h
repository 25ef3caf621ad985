// TensorCollection: the training state a Worker owns and moves between processes: named tensors
// with a global shape and dtype, plus int64 scalars (step, data cursor, seeds, optimizer
// counters). The model reads and writes views of it; after a reconfiguration the views may change,
// so re-fetch them. Every rank must register the same tensors and scalars, in the same order,
// before Worker::Start(). Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "elastra/communicator.h"
#include "elastra/status.h"

namespace elastra {

// How a tensor is laid out over ranks. Only kReplicated exists today: every rank holds the whole
// tensor (data parallelism). TP splits, pipeline ownership and ZeRO shards come with 3-D layouts.
enum class Sharding : int { kReplicated = 0 };

// The reserved scalar that holds the number of applied steps; the Worker registers it.
inline constexpr char kStepScalarName[] = "elastra.step";

class TensorCollection {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    DataType dtype = DataType::kFloat32;
    Sharding sharding = Sharding::kReplicated;
    std::vector<std::byte> data;  // the local shard (the whole tensor when replicated)

    size_t elements() const;
    size_t bytes() const { return data.size(); }
  };

  // Registers a zero-filled tensor. kInvalidArgument for a duplicate name, an empty name, a
  // negative dimension, or a size that does not fit in memory limits (> 2^40 bytes).
  Status AddTensor(const std::string& name, std::vector<int64_t> shape, DataType dtype,
                   Sharding sharding = Sharding::kReplicated);
  // Registers a scalar (initial value `value`). kInvalidArgument for a duplicate name.
  Status AddScalar(const std::string& name, int64_t value);

  bool HasTensor(const std::string& name) const { return index_.count(name) > 0; }

  // A typed view of the local shard. CHECK-fails on an unknown name or a wrong element type:
  // that is a programming error, not bad input.
  template <class T>
  std::span<T> View(const std::string& name) {
    Tensor& t = tensor(name);
    CheckType(t, sizeof(T));
    return std::span<T>(reinterpret_cast<T*>(t.data.data()), t.data.size() / sizeof(T));
  }

  int64_t GetScalar(const std::string& name) const;
  void SetScalar(const std::string& name, int64_t value);

  const std::vector<Tensor>& tensors() const { return tensors_; }
  std::vector<Tensor>& mutable_tensors() { return tensors_; }
  const std::vector<std::pair<std::string, int64_t>>& scalars() const { return scalars_; }
  std::vector<std::pair<std::string, int64_t>>& mutable_scalars() { return scalars_; }

  // Bytes of all local shards.
  size_t bytes() const;
  // A hash of names, shapes, dtypes and scalar names: equal on ranks that registered the same state.
  uint64_t Signature() const;

  Tensor& tensor(const std::string& name);

 private:
  void CheckType(const Tensor& t, size_t element_size) const;

  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, int64_t>> scalars_;
};

}  // namespace elastra
