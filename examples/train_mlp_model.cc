// The model train_mlp trains: see train_mlp_model.h.
#include "examples/train_mlp_model.h"

#include <cmath>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace train_mlp {

using elastra::DataType;
using elastra::Status;
using elastra::TensorCollection;
using elastra::examples::AdamStep;
using elastra::examples::Array;
using elastra::examples::MlpOps;
using elastra::examples::OpsCollectives;
using elastra::examples::Span;

namespace {

// splitmix64: a counter-based generator, so sample i's data does not depend on who computes it.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
double Uniform(uint64_t key) {  // in [-1, 1)
  return static_cast<double>(Mix(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

void MakeInput(uint64_t seed, int64_t index, double* x) {
  for (int i = 0; i < kInputs; ++i) x[i] = Uniform(Mix(seed * 1000003ULL + index) + i);
}

// The local shard of `name` in the memory of `ops`.
Span ShardOf(const MlpOps& ops, TensorCollection* state, const std::string& name) {
  std::span<double> v =
      ops.on_device() ? state->DeviceView<double>(name) : state->View<double>(name);
  return Span{v.data(), v.size()};
}

}  // namespace

Teacher::Teacher(int hidden) : hidden_(hidden), w1_(hidden * kInputs), w2_(kOutputs * hidden) {
  for (size_t k = 0; k < w1_.size(); ++k) w1_[k] = 1.5 / std::sqrt(kInputs) * Uniform(777000 + k);
  for (size_t k = 0; k < w2_.size(); ++k) w2_[k] = 1.5 / std::sqrt(hidden) * Uniform(888000 + k);
}

void Teacher::Target(const double* x, double* y) const {
  std::vector<double> h(hidden_);
  for (int o = 0; o < hidden_; ++o) {
    double s = 0;
    for (int i = 0; i < kInputs; ++i) s += w1_[o * kInputs + i] * x[i];
    h[o] = std::tanh(s);
  }
  for (int o = 0; o < kOutputs; ++o) {
    double s = 0;
    for (int i = 0; i < hidden_; ++i) s += w2_[o * hidden_ + i] * h[i];
    y[o] = s;
  }
}

Status Model::Register(TensorCollection* state) const {
  const int64_t H = flags_.hidden, F = flags_.ffn, L = flags_.layers;
  if (Status s = state->SetNumLayers(static_cast<int>(L)); !s.ok()) return s;
  struct P {
    std::string name;
    std::vector<int64_t> shape;
    elastra::ShardingRule rule;
    double scale;
  };
  std::vector<P> params = {
      {"in.w", {H, kInputs}, elastra::OwnedByLayer(0), 1.0 / std::sqrt(kInputs)},
      {"in.b", {H}, elastra::OwnedByLayer(0), 0}};
  for (int l = 0; l < L; ++l) {
    std::string p = "l" + std::to_string(l) + ".";
    params.push_back({p + "fc1.w", {F, H}, elastra::SplitOverTp(0, l), 1.0 / std::sqrt(H)});
    params.push_back({p + "fc1.b", {F}, elastra::SplitOverTp(0, l), 0});
    params.push_back({p + "fc2.w", {H, F}, elastra::SplitOverTp(1, l), 0.5 / std::sqrt(F)});
    params.push_back({p + "fc2.b", {H}, elastra::OwnedByLayer(l), 0});
  }
  params.push_back({"out.w", {kOutputs, H}, elastra::OwnedByLayer(static_cast<int>(L - 1)),
                    1.0 / std::sqrt(H)});
  params.push_back({"out.b", {kOutputs}, elastra::OwnedByLayer(static_cast<int>(L - 1)), 0});
  uint64_t salt = 0;
  for (const auto& p : params) {
    for (const char* prefix : {"", "m:", "v:"}) {
      Status s = state->AddTensor(prefix + p.name, p.shape, DataType::kFloat64, p.rule);
      if (!s.ok()) return s;
    }
    auto w = state->View<double>(p.name);
    for (size_t k = 0; k < w.size(); ++k) w[k] = p.scale * Uniform(Mix(flags_.seed) + salt + k);
    salt += 1000003;
    param_names_.push_back(p.name);
  }
  if (flags_.state_mb > 0) {
    // Not a parameter: no step reads or writes it. Its pages are written here, so that every
    // commit, checkpoint and move copies real memory.
    const int64_t elements = flags_.state_mb << 17;  // float64
    Status s = state->AddTensor("pad", {elements}, DataType::kFloat64, elastra::SplitOverTp(0, 0));
    if (!s.ok()) return s;
    auto pad = state->View<double>("pad");
    for (size_t k = 0; k < pad.size(); ++k) pad[k] = static_cast<double>(k % 4096);
  }
  return state->AddScalar("cursor", 0);
}

Status Model::Step(TensorCollection* state, const Placement& at, double* loss) {
  Status s = RunStep(state, at, loss);
  ops_->Synchronize();
  if (device_failed()) return ops_->status();
  return s;
}

size_t Model::ReleaseMemory() {
  comm_.ReleaseMemory();
  return ops_->ReleaseMemory();
}

Span Model::Shard(TensorCollection* state, const std::string& name) const {
  return ShardOf(*ops_, state, name);
}

namespace {

// The activations of one micro-batch, kept from its forward pass for its backward pass.
struct Micro {
  int64_t begin = 0, rows = 0;
  Array input;           // first stage: the inputs
  std::vector<Array> x;  // [0]: the stage's input activations, [k + 1]: local block k's output
  std::vector<Array> h;  // per local block: its tanh activations
  Array out_grad;        // last stage: d loss / d output
};

// One rank's part of one training step, in the order Model::RunStep calls its phases: the
// forward pass of every micro-batch, then their backward passes in reverse (GPipe), activations
// and their gradients passing between stages with send/recv; then the gradients and the loss
// summed over DP, and the loss brought to the rank that logs it.
class StepRun {
 public:
  StepRun(const Flags& flags, const Teacher& teacher, MlpOps* ops, OpsCollectives* comm,
          TensorCollection* state, const Placement& at, const std::vector<std::string>& param_names)
      : flags_(flags),
        teacher_(teacher),
        ops_(ops),
        comm_(comm),
        state_(state),
        at_(at),
        cursor_(state->GetScalar("cursor")),
        stage_(at.coords.pp_rank),
        layers_(elastra::StageLayers(flags.layers, at.pp, stage_)),
        first_(layers_.first == 0),
        last_(layers_.last == flags.layers),
        ffn_local_(LocalFfnWidth()),
        dp_begin_(flags.global_batch * at.coords.dp_rank / at.dp),
        dp_end_(flags.global_batch * (at.coords.dp_rank + 1) / at.dp) {
    AllocateGradients(param_names);
    micro_.resize(flags.micro_batches);
  }

  // The forward pass of micro-batch j: from the inputs (first stage) or the previous stage,
  // through this stage's blocks, to the loss (last stage) or the next stage.
  Status Forward(int j) {
    Micro& mb = micro_[j];
    const int M = flags_.micro_batches;
    const int64_t n = dp_end_ - dp_begin_;
    mb.begin = dp_begin_ + n * j / M;
    mb.rows = dp_begin_ + n * (j + 1) / M - mb.begin;
    const int64_t R = mb.rows;
    Array x = ops_->Allocate(R * flags_.hidden);
    if (first_) {
      ForwardInput(mb, x.span());
    } else if (R > 0) {
      Status s = comm_->Recv(*at_.pp_group, x.span(), stage_ - 1, 2 * j);
      if (!s.ok()) return s;
    }
    mb.x.push_back(std::move(x));
    if (Status s = ForwardBlocks(mb); !s.ok()) return s;
    if (last_) {
      ForwardOutput(mb);
    } else if (R > 0) {
      Status s = comm_->Send(*at_.pp_group, mb.x.back().span(), stage_ + 1, 2 * j);
      if (!s.ok()) return s;
    }
    return Status();
  }

  // The backward pass of micro-batch j: from the loss (last stage) or the next stage, back
  // through this stage's blocks, to the input layer (first stage) or the previous stage.
  Status Backward(int j) {
    Micro& mb = micro_[j];
    const int64_t R = mb.rows;
    const int H = flags_.hidden;
    Array dx = ops_->Allocate(R * H);
    if (last_) {
      ops_->LinearBackward(mb.out_grad.span(), mb.x.back().span(), Shard("out.w"), R, H, kOutputs,
                           dx.span(), grads_["out.w"], grads_["out.b"]);
    } else if (R > 0) {
      Status s = comm_->Recv(*at_.pp_group, dx.span(), stage_ + 1, 2 * j + 1);
      if (!s.ok()) return s;
    }
    if (Status s = BackwardBlocks(mb, dx.span()); !s.ok()) return s;
    if (first_) {
      ops_->TanhBackward(mb.x[0].span(), dx.span());
      ops_->LinearBackward(dx.span(), mb.input.span(), Shard("in.w"), R, kInputs, H, Span{},
                           grads_["in.w"], grads_["in.b"]);
    } else if (R > 0) {
      Status s = comm_->Send(*at_.pp_group, dx.span(), stage_ - 1, 2 * j + 1);
      if (!s.ok()) return s;
    }
    return Status();
  }

  // Sums the gradients (and the loss) over DP: one allreduce of everything this rank holds;
  // then the means over the global batch.
  Status SumOverDp() {
    if (at_.dp_group != nullptr && at_.dp > 1) {
      Status s = comm_->AllreduceSum(*at_.dp_group, grad_buffer_.span());
      if (!s.ok()) return s;
    }
    ops_->Divide(grad_buffer_.span(), static_cast<double>(flags_.global_batch));
    return Status();
  }

  // The loss lives on the last stage, the same on every rank there once summed over DP. Without
  // pipeline stages every rank has it; with them one rank of the last stage brings it to all, so
  // that whichever rank logs (global rank 0, on the first stage) has it.
  Status GatherLoss(double* loss) {
    double l = 0;
    if (last_ && (at_.pp == 1 || (at_.coords.dp_rank == 0 && at_.coords.tp_rank == 0))) {
      ops_->CopyToHost(loss_sum_, &l);
    }
    if (at_.world != nullptr && at_.pp > 1) {
      ops_->CopyFromHost(&l, loss_sum_);
      Status s = comm_->AllreduceSum(*at_.world, loss_sum_);
      if (!s.ok()) return s;
      ops_->CopyToHost(loss_sum_, &l);
    }
    *loss = l;
    return Status();
  }

  // The gradients of the shards this rank holds, by tensor name.
  const std::map<std::string, Span>& grads() const { return grads_; }

 private:
  Span Shard(const std::string& name) const { return ShardOf(*ops_, state_, name); }

  // The local width of each block's ffn slice.
  int LocalFfnWidth() const {
    if (layers_.last <= layers_.first) return 0;
    const auto& r = state_->region("l" + std::to_string(layers_.first) + ".fc1.b");
    return static_cast<int>(r.box.col_end - r.box.col_begin);
  }

  // The gradients of the shards this rank holds, in param_names order, and the loss sum last:
  // one buffer for the DP allreduce.
  void AllocateGradients(const std::vector<std::string>& param_names) {
    size_t total = 0;
    for (const auto& name : param_names) total += state_->tensor(name).elements();
    grad_buffer_ = ops_->Allocate(total + 1);
    size_t offset = 0;
    for (const auto& name : param_names) {
      const size_t n = state_->tensor(name).elements();
      if (n > 0) grads_[name] = grad_buffer_.span().sub(offset, n);
      offset += n;
    }
    loss_sum_ = grad_buffer_.span().sub(total, 1);
  }

  // The input layer (first stage): the micro-batch's inputs into `x`, tanh(in.w x + in.b).
  void ForwardInput(Micro& mb, Span x) {
    const int64_t R = mb.rows;
    host_.assign(R * kInputs, 0.0);
    for (int64_t r = 0; r < R; ++r) {
      MakeInput(flags_.seed, (cursor_ + mb.begin + r) % flags_.dataset_size, &host_[r * kInputs]);
    }
    mb.input = ops_->Allocate(R * kInputs);
    ops_->CopyFromHost(host_.data(), mb.input.span());
    ops_->Linear(mb.input.span(), Shard("in.w"), Shard("in.b"), R, kInputs, flags_.hidden, x);
    ops_->Tanh(x);
  }

  // This stage's blocks, x + fc2(tanh(fc1(x))): fc1 column-parallel, fc2 row-parallel over TP
  // (its partial sums added up over the TP group).
  Status ForwardBlocks(Micro& mb) {
    const int64_t R = mb.rows;
    const int H = flags_.hidden, Fl = ffn_local_;
    for (int l = layers_.first; l < layers_.last; ++l) {
      std::string p = "l" + std::to_string(l) + ".";
      const Span xin = mb.x.back().span();
      Array h = ops_->Allocate(R * Fl);
      ops_->Linear(xin, Shard(p + "fc1.w"), Shard(p + "fc1.b"), R, H, Fl, h.span());
      ops_->Tanh(h.span());
      Array y = ops_->Allocate(R * H);
      ops_->Linear(h.span(), Shard(p + "fc2.w"), Span{}, R, Fl, H, y.span());
      if (at_.tp > 1 && R > 0) {
        Status s = comm_->AllreduceSum(*at_.tp_group, y.span());
        if (!s.ok()) return s;
      }
      ops_->AddResidual(xin, Shard(p + "fc2.b"), R, H, y.span());
      mb.h.push_back(std::move(h));
      mb.x.push_back(std::move(y));
    }
    return Status();
  }

  // The output layer (last stage): the output against the teacher's targets, its squared error
  // added to the loss sum and its gradient kept in mb.out_grad.
  void ForwardOutput(Micro& mb) {
    const int64_t R = mb.rows;
    host_.assign(R * kOutputs, 0.0);
    double in[kInputs];
    for (int64_t r = 0; r < R; ++r) {
      MakeInput(flags_.seed, (cursor_ + mb.begin + r) % flags_.dataset_size, in);
      teacher_.Target(in, &host_[r * kOutputs]);
    }
    Array target = ops_->Allocate(R * kOutputs);
    ops_->CopyFromHost(host_.data(), target.span());
    mb.out_grad = ops_->Allocate(R * kOutputs);
    ops_->Linear(mb.x.back().span(), Shard("out.w"), Shard("out.b"), R, flags_.hidden, kOutputs,
                 mb.out_grad.span());
    ops_->SquaredError(target.span(), mb.out_grad.span(), loss_sum_);
  }

  // This stage's blocks in reverse, `dx` the gradient of the last block's output on the way in
  // and of the first block's input on the way out.
  Status BackwardBlocks(Micro& mb, Span dx) {
    const int64_t R = mb.rows;
    const int H = flags_.hidden, Fl = ffn_local_;
    for (int l = layers_.last - 1; l >= layers_.first; --l) {
      const int k = l - layers_.first;
      std::string p = "l" + std::to_string(l) + ".";
      const Span h = mb.h[k].span();
      Array dz = ops_->Allocate(R * Fl);
      ops_->LinearBackward(dx, h, Shard(p + "fc2.w"), R, Fl, H, dz.span(), grads_[p + "fc2.w"],
                           grads_[p + "fc2.b"]);
      ops_->TanhBackward(h, dz.span());
      Array dxb = ops_->Allocate(R * H);
      ops_->LinearBackward(dz.span(), mb.x[k].span(), Shard(p + "fc1.w"), R, H, Fl, dxb.span(),
                           grads_[p + "fc1.w"], grads_[p + "fc1.b"]);
      if (at_.tp > 1 && R > 0) {
        Status s = comm_->AllreduceSum(*at_.tp_group, dxb.span());
        if (!s.ok()) return s;
      }
      ops_->Add(dxb.span(), dx);
    }
    return Status();
  }

  const Flags& flags_;
  const Teacher& teacher_;
  MlpOps* ops_;
  OpsCollectives* comm_;
  TensorCollection* state_;
  const Placement& at_;
  const int64_t cursor_;
  const int stage_;
  const elastra::LayerRange layers_;
  const bool first_, last_;
  const int ffn_local_;
  const int64_t dp_begin_, dp_end_;  // this DP rank's share of the global batch
  std::map<std::string, Span> grads_;
  Array grad_buffer_;
  Span loss_sum_;
  std::vector<Micro> micro_;
  std::vector<double> host_;  // inputs and targets on their way to the ops' memory
};

}  // namespace

Status Model::RunStep(TensorCollection* state, const Placement& at, double* loss) {
  const int64_t cursor = state->GetScalar("cursor");
  const int64_t step = state->GetScalar(elastra::kStepScalarName);
  StepRun run(flags_, teacher_, ops_, &comm_, state, at, param_names_);
  // Forward, all micro-batches; backward, micro-batches in reverse.
  for (int j = 0; j < flags_.micro_batches; ++j) {
    if (Status s = run.Forward(j); !s.ok()) return s;
  }
  for (int j = flags_.micro_batches - 1; j >= 0; --j) {
    if (Status s = run.Backward(j); !s.ok()) return s;
  }
  if (Status s = run.SumOverDp(); !s.ok()) return s;
  if (Status s = run.GatherLoss(loss); !s.ok()) return s;
  ApplyAdam(state, run.grads(), step + 1);
  state->SetScalar("cursor", cursor + flags_.global_batch);
  return Status();
}

void Model::ApplyAdam(TensorCollection* state, const std::map<std::string, Span>& grads,
                      int64_t t) {
  AdamStep s;
  s.lr = flags_.lr;
  s.b1 = 0.9;
  s.b2 = 0.999;
  s.eps = 1e-8;
  s.c1 = 1.0 - std::pow(s.b1, static_cast<double>(t));
  s.c2 = 1.0 - std::pow(s.b2, static_cast<double>(t));
  for (const auto& [name, grad] : grads) {
    ops_->Adam(grad, s, Shard(state, name), Shard(state, "m:" + name), Shard(state, "v:" + name));
  }
}

}  // namespace train_mlp
