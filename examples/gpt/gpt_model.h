// The GPT of train_gpt, behind a header without torch (only gpt_model.cc includes LibTorch, whose
// headers take minutes to compile): token and position embeddings, pre-LayerNorm blocks of
// causal self-attention and MLP, a final LayerNorm and an LM head tied to the token embedding.
//
// Parallelism (Megatron-LM): QKV and the first MLP layer are column-parallel (output rows split
// over tp, the QKV rows laid out head by head so each tp rank holds whole heads), the attention
// output and second MLP layer row-parallel (input columns split over tp, partial sums allreduced
// over tp_group()); the blocks are split into pipeline stages over pp_group(), run GPipe-style
// (every micro-batch forward, then every one backward), activations and their gradients passed
// with Send/Recv; each dp rank takes its share of the global batch and the gradients are summed
// over dp_group() in buckets (elastra::torch's GradientReducer). The token embedding lives on
// every stage: the first uses it to embed, the last as the LM head, and their gradients are
// summed over pp_group().
//
// Precision: the parameters are bfloat16 state ("<name>", what the model computes with), with
// float32 master weights ("master.<name>") and AdamW moments, all in the worker's state; the
// step reads the bf16 weights, computes activations and gradients in float32 (Debian's CPU
// LibTorch 1.13 has bf16 kernels, but bf16 activations would make the reference comparison a
// matter of bf16 rounding rather than float32 reduction order), updates the fp32 master weights
// and rounds them to bf16 (nearest-even) for the next step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"
#include "examples/gpt/gpt_data.h"

namespace gpt {

struct ModelConfig {
  int layers = 2;
  int hidden = 32;
  int heads = 4;
  int seq_len = 32;
  int ffn = 0;  // 0: 4 x hidden
  int micro_batches = 2;
  int64_t global_batch = 16;
  uint64_t seed = 1;
  double lr = 3e-3;
  double weight_decay = 0.1;
};

// Where this process runs: its layout and coordinates and the communicators of the generation
// (null in a single process).
struct Placement {
  elastra::Layout layout;
  elastra::Coordinates coords;
  elastra::Communicator* dp = nullptr;
  elastra::Communicator* pp = nullptr;
  elastra::Communicator* tp = nullptr;
  elastra::Communicator* world = nullptr;
};

class GptTrainer {
 public:
  // Builds the model at full size from `config.seed` and registers it in `state`: the bf16
  // parameters, their fp32 master weights and AdamW moments, and the scalar "cursor". With a null
  // `state` the trainer is plain LibTorch (tensors of its own, no Elastra), for the benchmark.
  // kInvalidArgument for a model the flags cannot build (hidden not a multiple of heads).
  static elastra::StatusOr<std::unique_ptr<GptTrainer>> Create(const ModelConfig& config,
                                                               Corpus* corpus,
                                                               elastra::TensorCollection* state);
  ~GptTrainer();

  // Re-makes the views over the state's shards; `steps` is the number of applied steps (AdamW's
  // step count). After Worker::Start(), after each kReconfigured, and once in a single process.
  elastra::Status Bind(int64_t steps);

  // Runs one training step at `at` on samples [cursor, cursor + global_batch), updates the
  // parameters and advances the cursor. `loss` is the batch's mean loss (nats per token) on every
  // rank. kInvalidArgument for a layout the model cannot take (heads not a multiple of tp, fewer
  // layers than stages, fewer samples than dp ranks); a collective's error otherwise.
  elastra::Status Step(const Placement& at, double* loss);

  int64_t cursor() const;
  // Parameters of the model (elements), counted once.
  int64_t parameters() const;

 private:
  class Impl;
  explicit GptTrainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks that `layout` suits `config` (see Step); kInvalidArgument with the reason.
elastra::Status CheckLayout(const ModelConfig& config, const elastra::Layout& layout);

}  // namespace gpt
