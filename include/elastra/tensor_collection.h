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
// one or two dimensions (fold more into two).
//
// Device state: after SetDevice(d) the shards live in CUDA device memory on device d from Start()
// on (cudaMalloc, see device_buffer.h); before Start() they are still whole in host memory, so the
// program initializes them with View() as usual. From Start() on, DeviceView() gives the device
// shard and View() is a programming error. The Worker stages the shards through host memory where
// its machinery needs bytes (in-memory commits, resharding over a host backend, checkpoint
// loads) and hands them back to the device before StepEnd() returns. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "elastra/data_type.h"
#include "elastra/device_buffer.h"
#include "elastra/host_bytes.h"
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
    HostBytes data;              // the local shard, when it is in host memory
    DeviceBuffer device_data;    // the local shard, when it is in device memory (on_device)
    bool on_device = false;

    const std::string& name() const { return spec.name; }
    size_t elements() const { return bytes() / DataTypeSize(dtype); }
    size_t bytes() const { return on_device ? device_data.size() : data.size(); }
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

  // Where the shards live from Worker::Start() on: a CUDA device ordinal, or -1 for host memory
  // (the default). Call before Start(). kUnavailable when the build has no CUDA or this process
  // sees no such device; kFailedPrecondition once a shard is on a device.
  Status SetDevice(int device);
  int device() const { return device_; }

  // A typed view of the local shard in host memory. CHECK-fails on an unknown name, a wrong
  // element type or a shard that is on the device: those are programming errors, not bad input.
  template <class T>
  std::span<T> View(const std::string& name) {
    Tensor& t = tensor(name);
    CheckType(t, sizeof(T));
    CheckOnHost(t);
    return std::span<T>(reinterpret_cast<T*>(t.data.data()), t.data.size() / sizeof(T));
  }
  // The same for a shard in device memory: the span holds a device pointer (pass it to kernels,
  // cuBLAS and NCCL; never dereference it on the host). CHECK-fails when the shard is on the host.
  template <class T>
  std::span<T> DeviceView(const std::string& name) {
    Tensor& t = tensor(name);
    CheckType(t, sizeof(T));
    CheckOnDevice(t);
    return std::span<T>(static_cast<T*>(t.device_data.data()), t.device_data.size() / sizeof(T));
  }
  // The part of the global tensor this rank holds.
  const Region& region(const std::string& name) { return tensor(name).region; }

  int64_t GetScalar(const std::string& name) const;
  void SetScalar(const std::string& name, int64_t value);

  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, int64_t>>& scalars() const { return scalars_; }

  // The tensors' specs in registration order, for reshard plans and checkpoints.
  StateSpec Spec() const;
  // Bytes of all local shards.
  size_t bytes() const;
  // A hash of names, shapes, dtypes, rules and scalar names: equal on ranks that registered the
  // same state.
  uint64_t Signature() const;

  Tensor& tensor(const std::string& name);

  // With a device set: copies every shard held in host memory to a new device buffer and frees
  // the host copy (Worker::Start() does it for the shards; a program without a Worker may call it).
  // A no-op without a device. On an error the tensors already moved stay moved and the rest stay
  // where they were: nothing is lost.
  Status MoveToDevice();
  // Copies a shard, wherever it is, into `dst` (t.bytes() bytes of host memory).
  Status CopyToHost(const Tensor& t, void* dst) const;

 private:
  // The worker library's access (state/tensor_collection_access.h): filling tensors and scalars
  // in place, MoveToHost, ReleaseShards.
  friend class TensorCollectionAccess;
  Status MoveToHost(bool keep_values);
  void ReleaseShards();

  void CheckType(const Tensor& t, size_t element_size) const;
  void CheckOnHost(const Tensor& t) const;
  void CheckOnDevice(const Tensor& t) const;

  int device_ = -1;
  int num_layers_ = 1;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, int64_t>> scalars_;
};

}  // namespace elastra
