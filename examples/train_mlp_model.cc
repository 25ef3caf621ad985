// The model train_mlp trains: see train_mlp_model.h.
#include "examples/train_mlp_model.h"

#include <cmath>
#include <span>

namespace train_mlp {

using elastra::DataType;
using elastra::Status;
using elastra::TensorCollection;
using elastra::examples::AdamStep;
using elastra::examples::Array;
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
  std::span<double> v =
      ops_->on_device() ? state->DeviceView<double>(name) : state->View<double>(name);
  return Span{v.data(), v.size()};
}

Status Model::RunStep(TensorCollection* state, const Placement& at, double* loss) {
  const int64_t B = flags_.global_batch;
  const int64_t cursor = state->GetScalar("cursor");
  const int64_t step = state->GetScalar(elastra::kStepScalarName);
  const int stage = at.coords.pp_rank;
  const elastra::LayerRange layers = elastra::StageLayers(flags_.layers, at.pp, stage);
  const bool first = layers.first == 0, last = layers.last == flags_.layers;
  const int H = flags_.hidden;
  // The local width of each block's ffn slice.
  int Fl = 0;
  if (layers.last > layers.first) {
    const auto& r = state->region("l" + std::to_string(layers.first) + ".fc1.b");
    Fl = static_cast<int>(r.box.col_end - r.box.col_begin);
  }
  // The gradients of the shards this rank holds, in param_names_ order, and the loss sum last:
  // one buffer for the DP allreduce.
  std::map<std::string, Span> grads;
  size_t total = 0;
  for (const auto& name : param_names_) total += state->tensor(name).elements();
  Array grad_buffer = ops_->Allocate(total + 1);
  size_t offset = 0;
  for (const auto& name : param_names_) {
    const size_t n = state->tensor(name).elements();
    if (n > 0) grads[name] = grad_buffer.span().sub(offset, n);
    offset += n;
  }
  const Span loss_sum = grad_buffer.span().sub(total, 1);
  const int64_t dp_begin = B * at.coords.dp_rank / at.dp, dp_end = B * (at.coords.dp_rank + 1) / at.dp;
  const int M = flags_.micro_batches;
  struct Micro {
    int64_t begin = 0, rows = 0;
    Array input;           // first stage: the inputs
    std::vector<Array> x;  // [0]: the stage's input activations, [k + 1]: local block k's output
    std::vector<Array> h;  // per local block: its tanh activations
    Array out_grad;        // last stage: d loss / d output
  };
  std::vector<Micro> micro(M);
  std::vector<double> host;  // inputs and targets on their way to the ops' memory
  // Forward, all micro-batches.
  for (int j = 0; j < M; ++j) {
    Micro& mb = micro[j];
    const int64_t n = dp_end - dp_begin;
    mb.begin = dp_begin + n * j / M;
    mb.rows = dp_begin + n * (j + 1) / M - mb.begin;
    const int64_t R = mb.rows;
    Array x = ops_->Allocate(R * H);
    if (first) {
      host.assign(R * kInputs, 0.0);
      for (int64_t r = 0; r < R; ++r) {
        MakeInput(flags_.seed, (cursor + mb.begin + r) % flags_.dataset_size, &host[r * kInputs]);
      }
      mb.input = ops_->Allocate(R * kInputs);
      ops_->CopyFromHost(host.data(), mb.input.span());
      ops_->Linear(mb.input.span(), Shard(state, "in.w"), Shard(state, "in.b"), R, kInputs, H,
                   x.span());
      ops_->Tanh(x.span());
    } else if (R > 0) {
      Status s = comm_.Recv(*at.pp_group, x.span(), stage - 1, 2 * j);
      if (!s.ok()) return s;
    }
    mb.x.push_back(std::move(x));
    for (int l = layers.first; l < layers.last; ++l) {
      std::string p = "l" + std::to_string(l) + ".";
      const Span xin = mb.x.back().span();
      Array h = ops_->Allocate(R * Fl);
      ops_->Linear(xin, Shard(state, p + "fc1.w"), Shard(state, p + "fc1.b"), R, H, Fl, h.span());
      ops_->Tanh(h.span());
      Array y = ops_->Allocate(R * H);
      ops_->Linear(h.span(), Shard(state, p + "fc2.w"), Span{}, R, Fl, H, y.span());
      if (at.tp > 1 && R > 0) {
        Status s = comm_.AllreduceSum(*at.tp_group, y.span());
        if (!s.ok()) return s;
      }
      ops_->AddResidual(xin, Shard(state, p + "fc2.b"), R, H, y.span());
      mb.h.push_back(std::move(h));
      mb.x.push_back(std::move(y));
    }
    if (last) {
      host.assign(R * kOutputs, 0.0);
      double in[kInputs];
      for (int64_t r = 0; r < R; ++r) {
        MakeInput(flags_.seed, (cursor + mb.begin + r) % flags_.dataset_size, in);
        teacher_.Target(in, &host[r * kOutputs]);
      }
      Array target = ops_->Allocate(R * kOutputs);
      ops_->CopyFromHost(host.data(), target.span());
      mb.out_grad = ops_->Allocate(R * kOutputs);
      ops_->Linear(mb.x.back().span(), Shard(state, "out.w"), Shard(state, "out.b"), R, H,
                   kOutputs, mb.out_grad.span());
      ops_->SquaredError(target.span(), mb.out_grad.span(), loss_sum);
    } else if (R > 0) {
      Status s = comm_.Send(*at.pp_group, mb.x.back().span(), stage + 1, 2 * j);
      if (!s.ok()) return s;
    }
  }
  // Backward, micro-batches in reverse.
  for (int j = M - 1; j >= 0; --j) {
    Micro& mb = micro[j];
    const int64_t R = mb.rows;
    Array dx = ops_->Allocate(R * H);
    if (last) {
      ops_->LinearBackward(mb.out_grad.span(), mb.x.back().span(), Shard(state, "out.w"), R, H,
                           kOutputs, dx.span(), grads["out.w"], grads["out.b"]);
    } else if (R > 0) {
      Status s = comm_.Recv(*at.pp_group, dx.span(), stage + 1, 2 * j + 1);
      if (!s.ok()) return s;
    }
    for (int l = layers.last - 1; l >= layers.first; --l) {
      const int k = l - layers.first;
      std::string p = "l" + std::to_string(l) + ".";
      const Span h = mb.h[k].span();
      Array dz = ops_->Allocate(R * Fl);
      ops_->LinearBackward(dx.span(), h, Shard(state, p + "fc2.w"), R, Fl, H, dz.span(),
                           grads[p + "fc2.w"], grads[p + "fc2.b"]);
      ops_->TanhBackward(h, dz.span());
      Array dxb = ops_->Allocate(R * H);
      ops_->LinearBackward(dz.span(), mb.x[k].span(), Shard(state, p + "fc1.w"), R, H, Fl,
                           dxb.span(), grads[p + "fc1.w"], grads[p + "fc1.b"]);
      if (at.tp > 1 && R > 0) {
        Status s = comm_.AllreduceSum(*at.tp_group, dxb.span());
        if (!s.ok()) return s;
      }
      ops_->Add(dxb.span(), dx.span());
    }
    if (first) {
      ops_->TanhBackward(mb.x[0].span(), dx.span());
      ops_->LinearBackward(dx.span(), mb.input.span(), Shard(state, "in.w"), R, kInputs, H,
                           Span{}, grads["in.w"], grads["in.b"]);
    } else if (R > 0) {
      Status s = comm_.Send(*at.pp_group, dx.span(), stage - 1, 2 * j + 1);
      if (!s.ok()) return s;
    }
  }
  // Sum gradients (and the loss) over DP: one allreduce of everything this rank holds.
  if (at.dp_group != nullptr && at.dp > 1) {
    Status s = comm_.AllreduceSum(*at.dp_group, grad_buffer.span());
    if (!s.ok()) return s;
  }
  ops_->Divide(grad_buffer.span(), static_cast<double>(B));
  // The loss lives on the last stage, the same on every rank there once summed over DP. Without
  // pipeline stages every rank has it; with them one rank of the last stage brings it to all, so
  // that whichever rank logs (global rank 0, on the first stage) has it.
  double l = 0;
  if (last && (at.pp == 1 || (at.coords.dp_rank == 0 && at.coords.tp_rank == 0))) {
    ops_->CopyToHost(loss_sum, &l);
  }
  if (at.world != nullptr && at.pp > 1) {
    ops_->CopyFromHost(&l, loss_sum);
    Status s = comm_.AllreduceSum(*at.world, loss_sum);
    if (!s.ok()) return s;
    ops_->CopyToHost(loss_sum, &l);
  }
  *loss = l;
  ApplyAdam(state, grads, step + 1);
  state->SetScalar("cursor", cursor + B);
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
