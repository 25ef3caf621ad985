// elastra::torch: LibTorch over Elastra's state. A TorchState registers tensors (a module's
// parameters, an AdamW optimizer's moments, any other tensor) in a Worker's TensorCollection with
// a sharding rule each (elastra::Replicated(), SplitOverTp(dim, layer), OwnedByLayer(layer)), and
// gives back torch::Tensor views over the local shards: torch::from_blob over the collection's
// memory, no copies. A module's parameters and the optimizer's state *are* those views (the
// parameters through Tensor::set_data, so the optimizer keeps them), and Bind() re-makes them
// after Worker::Start() and after every StepEnd() that returned kReconfigured, when the shards
// have moved or changed shape. A parameter this rank holds nothing of (a layer on another
// pipeline stage) is an empty tensor.
//
// GradientReducer is DDP's bucketed allreduce over a Communicator (dp_group()).
//
// Host shards only (the CPU LibTorch of Debian; the state on a CUDA device is not bound here).
// ZeRO rules are refused: a flat range of a tensor is no torch view of it. Not thread-safe: use
// it from the training thread, like the Worker. This header includes torch: keep it out of
// <elastra/...> headers.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "elastra/communicator.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"

namespace elastra::torch_interop {

// The Elastra type of a torch dtype (float32, float64, bfloat16, float16, int64, int32, uint8);
// kInvalidArgument for another.
StatusOr<DataType> ToDataType(c10::ScalarType type);
c10::ScalarType ToScalarType(DataType type);

class TorchState {
 public:
  // `state` (the Worker's state(), or a collection of its own for a single process) must outlive
  // this object.
  explicit TorchState(TensorCollection* state) : state_(state) {}
  TorchState(const TorchState&) = delete;
  TorchState& operator=(const TorchState&) = delete;

  // Registers `name` with the global shape and dtype of `global` (1-D or 2-D, on the CPU) and
  // copies its values in. Before Worker::Start(). kInvalidArgument for a shape, dtype or rule
  // the collection refuses (AddTensor), a ZeRO rule, or a tensor not on the CPU.
  Status Add(const std::string& name, const torch::Tensor& global, ShardingRule rule);

  // Registers every parameter of `module` (built at its full, global size) as
  // prefix + parameter name, with rule_of(parameter name), values copied in; the parameters
  // become views over the shards at the next Bind(). Same errors as Add().
  Status AddModule(torch::nn::Module& module,
                   const std::function<ShardingRule(const std::string&)>& rule_of,
                   const std::string& prefix = "");

  // Registers AdamW's moments for every parameter of `optimizer` that AddModule registered:
  // "<name>.exp_avg" and "<name>.exp_avg_sq" (zero, the parameter's dtype and rule). Bind() hands
  // them to the optimizer as its per-parameter state. kInvalidArgument for a parameter that
  // AddModule did not register.
  Status AddAdamW(torch::optim::AdamW& optimizer);

  // Re-makes every view over the current local shards: module parameters (set_data; their
  // gradients are dropped, as their shapes may change) and the optimizer's state, with
  // `optimizer_steps` as AdamW's step count (the steps applied so far). Call after Start() and
  // after every StepEnd() that returned kReconfigured (also a single process, once, before
  // training). kFailedPrecondition when a shard is on a device.
  Status Bind(int64_t optimizer_steps);

  // The view of `name`'s local shard: its box's shape ([rows, cols], or [n] for a 1-D tensor),
  // empty when this rank holds none of it. CHECK-fails on an unknown name (a programming error).
  torch::Tensor View(const std::string& name);

  // The module parameters registered, in registration order, with their names.
  const std::vector<std::pair<std::string, torch::Tensor>>& parameters() const { return params_; }

 private:
  struct Moments {
    torch::Tensor param;
    std::string name;
  };
  TensorCollection* state_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  torch::optim::AdamW* adamw_ = nullptr;
  std::vector<Moments> moments_;
};

// DDP-style gradient averaging: the gradients of `params` (those defined and non-empty, in
// reverse order, as backward produces them) packed into flat buckets of about bucket_bytes,
// each bucket summed over `comm` with one Allreduce, scaled by `scale` and unpacked. Every rank
// of `comm` must pass parameters with the same shapes and defined gradients in the same order
// (the same pipeline stage and tensor rank: a dp_group()). The bucket's element type is the
// gradients'; a bucket never mixes types. Returns the Allreduce's error (kPeerLost, kTimedOut,
// kAborted): hand it to StepEnd().
struct GradientReducerOptions {
  size_t bucket_bytes = 4 << 20;  // DDP's default is 25 MiB; smaller fits small CPU models
};
class GradientReducer {
 public:
  explicit GradientReducer(GradientReducerOptions options = {}) : options_(options) {}
  Status Reduce(Communicator& comm, const std::vector<torch::Tensor>& params, double scale = 1.0);
  int64_t buckets_last_call() const { return buckets_; }

 private:
  GradientReducerOptions options_;
  int64_t buckets_ = 0;
  std::vector<uint8_t> flat_;
};

}  // namespace elastra::torch_interop
