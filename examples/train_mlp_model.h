// The model train_mlp trains: an input layer (16 -> hidden, tanh), `--layers` residual MLP blocks
// x + fc2(tanh(fc1(x))) with fc1 column-parallel and fc2 row-parallel over TP, and an output
// layer (hidden -> 4), in pipeline stages and over DP, learning a fixed teacher network on
// synthetic data (see train_mlp.cc). Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "elastra/worker.h"
#include "examples/mlp_ops.h"
#include "examples/train_mlp_options.h"

namespace train_mlp {

constexpr int kInputs = 16;
constexpr int kOutputs = 4;

// The fixed teacher (seed 777): input -> tanh(hidden) -> output, same sizes as the student's ends.
class Teacher {
 public:
  explicit Teacher(int hidden);
  void Target(const double* x, double* y) const;

 private:
  int hidden_;
  std::vector<double> w1_, w2_;
};

// Where this rank sits and whom it talks to. Communicators are null in --reference mode.
struct Placement {
  int dp = 1, pp = 1, tp = 1;
  elastra::Coordinates coords;
  elastra::Communicator* dp_group = nullptr;
  elastra::Communicator* pp_group = nullptr;
  elastra::Communicator* tp_group = nullptr;
  elastra::Communicator* world = nullptr;
};

class Model {
 public:
  // `ops` (not owned) does the arithmetic; the state's shards must live in its memory.
  Model(const Flags& flags, elastra::examples::MlpOps* ops)
      : flags_(flags), teacher_(flags.hidden), ops_(ops), comm_(ops) {}

  // Registers parameters and Adam moments with their sharding, initialized from --seed on the
  // whole tensors (the job starts from global rank 0's values).
  elastra::Status Register(elastra::TensorCollection* state) const;

  // One training step; the loss (mean over the global batch) lands in *loss on global rank 0.
  // The shards are looked up afresh every step (they move at a reconfiguration), and the ops'
  // queue is drained before returning, also on an error: the Worker reads and writes the device
  // shards between steps. When the ops have failed (a CUDA error) their status is returned
  // whatever else went wrong: see device_failed().
  elastra::Status Step(elastra::TensorCollection* state, const Placement& at, double* loss);

  // True once the arithmetic has failed (MlpOps::status()): the step's device work is lost and
  // the device may be unusable, so the process gives up.
  bool device_failed() const { return !ops_->status().ok(); }

  // Gives the memory the model keeps between steps back (a parked worker): the ops' pool and
  // handles, the host copy of the collectives. Returns the device bytes given back.
  size_t ReleaseMemory();

 private:
  using Span = elastra::examples::Span;

  // The local shard of `name` in the ops' memory.
  Span Shard(elastra::TensorCollection* state, const std::string& name) const;
  elastra::Status RunStep(elastra::TensorCollection* state, const Placement& at, double* loss);
  void ApplyAdam(elastra::TensorCollection* state, const std::map<std::string, Span>& grads,
                 int64_t t);

  Flags flags_;
  Teacher teacher_;
  elastra::examples::MlpOps* ops_;
  elastra::examples::OpsCollectives comm_;
  mutable std::vector<std::string> param_names_;
};

}  // namespace train_mlp
