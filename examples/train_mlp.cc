// train_mlp: a Megatron-style MLP trained under Elastra with data, pipeline and tensor
// parallelism, on synthetic data from a fixed teacher network. The global batch is fixed and split
// across the DP ranks by the data cursor, so a run that is resized, changes layout or loses a
// worker follows the same losses as --reference.
//
//   elastra run --nproc 4 -- train_mlp --steps 200 --log run.jsonl
//   elastra resize --workers 4 --layout dp=1,pp=2,tp=2 --wait
//   train_mlp --reference --steps 200 --log ref.jsonl
//
// The model: an input layer (16 -> hidden, tanh), `--layers` residual MLP blocks
// x + fc2(tanh(fc1(x))) with fc1 column-parallel and fc2 row-parallel over TP (hidden -> ffn ->
// hidden), and an output layer (hidden -> 4). Blocks are split into pipeline stages; the input
// layer lives with block 0, the output layer with the last block. Each DP rank's share of the
// batch runs as --micro-batches micro-batches through the stages (GPipe: all forwards, then all
// backwards), activations and their gradients passing between stages with send/recv. Gradients
// are summed over DP, Adam updates every local shard.
//
// Arithmetic: float64 everywhere; a layout changes only how partial sums are grouped, which moves
// the loss by ~1e-15 relative.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "elastra/worker.h"

namespace {

using elastra::Communicator;
using elastra::DataType;
using elastra::ReduceOp;
using elastra::Status;
using elastra::TensorCollection;

constexpr int kInputs = 16;
constexpr int kOutputs = 4;

struct Flags {
  int64_t steps = 100;
  int64_t global_batch = 64;
  int hidden = 32;
  int ffn = 0;     // 0: 2 x hidden
  int layers = 2;  // residual MLP blocks
  int micro_batches = 2;
  uint64_t seed = 1;
  int64_t dataset_size = 4096;
  double lr = 1e-2;
  std::string log;
  double step_time_ms = 0;
  bool reference = false;
  int commit_every = 0;  // 0: the worker's default (ELASTRA_COMMIT_EVERY or 10)
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool plan = false;  // give the coordinator's planner a model description
  int pin_tp = 0, pin_pp = 0;
  bool only_dp = false;
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr,
               "train_mlp: %s\n"
               "usage: train_mlp [--steps N] [--global-batch B] [--hidden H] [--ffn F]\n"
               "                 [--layers L] [--micro-batches M] [--seed S] [--dataset-size N]\n"
               "                 [--lr X] [--log FILE] [--step-time-ms T] [--commit-every K]\n"
               "                 [--checkpoint-dir DIR --checkpoint-every M]\n"
               "                 [--plan [--pin-tp N] [--pin-pp N] [--only-dp]] [--reference]\n",
               msg);
  std::exit(2);
}

bool ParseInt(const char* s, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0') return false;
  *out = v;
  return true;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    auto int_value = [&](int64_t lo) {
      int64_t v = 0;
      const char* s = value();
      if (!ParseInt(s, &v) || v < lo) Usage(("bad value for " + a + ": " + s).c_str());
      return v;
    };
    if (a == "--steps") f.steps = int_value(0);
    else if (a == "--global-batch") f.global_batch = int_value(1);
    else if (a == "--hidden") f.hidden = static_cast<int>(int_value(1));
    else if (a == "--ffn") f.ffn = static_cast<int>(int_value(1));
    else if (a == "--layers") f.layers = static_cast<int>(int_value(1));
    else if (a == "--micro-batches") f.micro_batches = static_cast<int>(int_value(1));
    else if (a == "--seed") f.seed = static_cast<uint64_t>(int_value(0));
    else if (a == "--dataset-size") f.dataset_size = int_value(1);
    else if (a == "--lr") f.lr = std::atof(value());
    else if (a == "--log") f.log = value();
    else if (a == "--step-time-ms") f.step_time_ms = static_cast<double>(int_value(0));
    else if (a == "--commit-every") f.commit_every = static_cast<int>(int_value(1));
    else if (a == "--checkpoint-dir") f.checkpoint_dir = value();
    else if (a == "--checkpoint-every") f.checkpoint_every = static_cast<int>(int_value(1));
    else if (a == "--plan") f.plan = true;
    else if (a == "--pin-tp") f.pin_tp = static_cast<int>(int_value(1));
    else if (a == "--pin-pp") f.pin_pp = static_cast<int>(int_value(1));
    else if (a == "--only-dp") f.only_dp = true;
    else if (a == "--reference") f.reference = true;
    else Usage(("unknown flag " + a).c_str());
  }
  if (f.ffn == 0) f.ffn = 2 * f.hidden;
  if (f.hidden > 4096 || f.ffn > 16384 || f.layers > 64) Usage("model too large for this example");
  return f;
}

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

// The fixed teacher (seed 777): input -> tanh(hidden) -> output, same sizes as the student's ends.
class Teacher {
 public:
  explicit Teacher(int hidden) : hidden_(hidden), w1_(hidden * kInputs), w2_(kOutputs * hidden) {
    for (size_t k = 0; k < w1_.size(); ++k) w1_[k] = 1.5 / std::sqrt(kInputs) * Uniform(777000 + k);
    for (size_t k = 0; k < w2_.size(); ++k) w2_[k] = 1.5 / std::sqrt(hidden) * Uniform(888000 + k);
  }
  void Target(const double* x, double* y) const {
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

 private:
  int hidden_;
  std::vector<double> w1_, w2_;
};

// Where this rank sits and whom it talks to. Communicators are null in --reference mode.
struct Placement {
  int dp = 1, pp = 1, tp = 1;
  elastra::Coordinates coords;
  Communicator* dp_group = nullptr;
  Communicator* pp_group = nullptr;
  Communicator* tp_group = nullptr;
  Communicator* world = nullptr;
};

// Row-major dense helpers on [rows x cols] arrays.
using Mat = std::vector<double>;

class Model {
 public:
  explicit Model(const Flags& flags) : flags_(flags), teacher_(flags.hidden) {}

  // Registers parameters and Adam moments with their sharding, initialized from --seed on the
  // whole tensors (the job starts from global rank 0's values).
  Status Register(TensorCollection* state) const {
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

  // One training step; the loss (mean over the global batch) lands in *loss on global rank 0.
  Status Step(TensorCollection* state, const Placement& at, double* loss) {
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
    grads_.clear();
    for (const auto& name : param_names_) {
      const auto& t = state->tensor(name);
      if (!t.data.empty()) grads_[name].assign(t.elements(), 0.0);
    }
    const int64_t dp_begin = B * at.coords.dp_rank / at.dp, dp_end = B * (at.coords.dp_rank + 1) / at.dp;
    const int M = flags_.micro_batches;
    struct Micro {
      int64_t begin = 0, rows = 0;
      Mat input, x0;                 // first stage: inputs and the input layer's output
      std::vector<Mat> xin, h;       // per local block: its input and its tanh activations
      Mat out_grad;                  // last stage: d loss / d output
      Mat dx;                        // gradient flowing backwards
    };
    std::vector<Micro> micro(M);
    double loss_sum = 0;
    // Forward, all micro-batches.
    for (int j = 0; j < M; ++j) {
      Micro& mb = micro[j];
      const int64_t n = dp_end - dp_begin;
      mb.begin = dp_begin + n * j / M;
      mb.rows = dp_begin + n * (j + 1) / M - mb.begin;
      const int64_t R = mb.rows;
      Mat x(R * H, 0.0);
      if (first) {
        mb.input.assign(R * kInputs, 0.0);
        for (int64_t r = 0; r < R; ++r) {
          MakeInput(flags_.seed, (cursor + mb.begin + r) % flags_.dataset_size, &mb.input[r * kInputs]);
        }
        auto w = state->View<double>("in.w");
        auto b = state->View<double>("in.b");
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < H; ++o) {
            double s = b[o];
            for (int i = 0; i < kInputs; ++i) s += w[o * kInputs + i] * mb.input[r * kInputs + i];
            x[r * H + o] = std::tanh(s);
          }
        }
        mb.x0 = x;
      } else if (R > 0) {
        Status s = at.pp_group->Recv(x.data(), x.size() * sizeof(double), stage - 1, 2 * j,
                                     at.pp_group->default_timeout());
        if (!s.ok()) return s;
      }
      for (int l = layers.first; l < layers.last; ++l) {
        std::string p = "l" + std::to_string(l) + ".";
        auto w1 = state->View<double>(p + "fc1.w");  // [Fl, H]
        auto b1 = state->View<double>(p + "fc1.b");  // [Fl]
        auto w2 = state->View<double>(p + "fc2.w");  // [H, Fl]
        auto b2 = state->View<double>(p + "fc2.b");  // [H]
        mb.xin.push_back(x);
        Mat h(R * Fl);
        for (int64_t r = 0; r < R; ++r) {
          for (int f = 0; f < Fl; ++f) {
            double s = b1[f];
            for (int i = 0; i < H; ++i) s += w1[f * H + i] * x[r * H + i];
            h[r * Fl + f] = std::tanh(s);
          }
        }
        Mat y(R * H, 0.0);
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < H; ++o) {
            double s = 0;
            for (int f = 0; f < Fl; ++f) s += w2[o * Fl + f] * h[r * Fl + f];
            y[r * H + o] = s;
          }
        }
        if (at.tp > 1 && R > 0) {
          Status s = at.tp_group->Allreduce(y.data(), y.size(), DataType::kFloat64, ReduceOp::kSum);
          if (!s.ok()) return s;
        }
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < H; ++o) x[r * H + o] += y[r * H + o] + b2[o];
        }
        mb.h.push_back(std::move(h));
      }
      if (last) {
        auto w = state->View<double>("out.w");
        auto b = state->View<double>("out.b");
        mb.out_grad.assign(R * kOutputs, 0.0);
        double in[kInputs], target[kOutputs];
        for (int64_t r = 0; r < R; ++r) {
          MakeInput(flags_.seed, (cursor + mb.begin + r) % flags_.dataset_size, in);
          teacher_.Target(in, target);
          for (int o = 0; o < kOutputs; ++o) {
            double s = b[o];
            for (int i = 0; i < H; ++i) s += w[o * H + i] * x[r * H + i];
            double d = s - target[o];
            mb.out_grad[r * kOutputs + o] = d;
            loss_sum += 0.5 * d * d;
          }
        }
        mb.dx = x;  // keep the last activations for the output layer's gradient
      } else if (R > 0) {
        Status s = at.pp_group->Send(x.data(), x.size() * sizeof(double), stage + 1, 2 * j,
                                     at.pp_group->default_timeout());
        if (!s.ok()) return s;
      }
    }
    // Backward, micro-batches in reverse.
    for (int j = M - 1; j >= 0; --j) {
      Micro& mb = micro[j];
      const int64_t R = mb.rows;
      Mat dx(R * H, 0.0);
      if (last) {
        const Mat& xl = mb.dx;
        auto w = state->View<double>("out.w");
        auto& gw = grads_["out.w"];
        auto& gb = grads_["out.b"];
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < kOutputs; ++o) {
            double d = mb.out_grad[r * kOutputs + o];
            gb[o] += d;
            for (int i = 0; i < H; ++i) {
              gw[o * H + i] += d * xl[r * H + i];
              dx[r * H + i] += d * w[o * H + i];
            }
          }
        }
      } else if (R > 0) {
        Status s = at.pp_group->Recv(dx.data(), dx.size() * sizeof(double), stage + 1, 2 * j + 1,
                                     at.pp_group->default_timeout());
        if (!s.ok()) return s;
      }
      for (int l = layers.last - 1; l >= layers.first; --l) {
        const int k = l - layers.first;
        std::string p = "l" + std::to_string(l) + ".";
        auto w1 = state->View<double>(p + "fc1.w");
        auto w2 = state->View<double>(p + "fc2.w");
        auto& g_w1 = grads_[p + "fc1.w"];
        auto& g_b1 = grads_[p + "fc1.b"];
        auto& g_w2 = grads_[p + "fc2.w"];
        auto& g_b2 = grads_[p + "fc2.b"];
        const Mat& h = mb.h[k];
        const Mat& xin = mb.xin[k];
        Mat dz(R * Fl, 0.0);
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < H; ++o) g_b2[o] += dx[r * H + o];
          for (int f = 0; f < Fl; ++f) {
            double dh = 0;
            for (int o = 0; o < H; ++o) {
              dh += dx[r * H + o] * w2[o * Fl + f];
              g_w2[o * Fl + f] += dx[r * H + o] * h[r * Fl + f];
            }
            double hv = h[r * Fl + f];
            dz[r * Fl + f] = dh * (1.0 - hv * hv);
          }
        }
        Mat dxb(R * H, 0.0);
        for (int64_t r = 0; r < R; ++r) {
          for (int f = 0; f < Fl; ++f) {
            double d = dz[r * Fl + f];
            g_b1[f] += d;
            for (int i = 0; i < H; ++i) {
              g_w1[f * H + i] += d * xin[r * H + i];
              dxb[r * H + i] += d * w1[f * H + i];
            }
          }
        }
        if (at.tp > 1 && R > 0) {
          Status s = at.tp_group->Allreduce(dxb.data(), dxb.size(), DataType::kFloat64, ReduceOp::kSum);
          if (!s.ok()) return s;
        }
        for (size_t i = 0; i < dx.size(); ++i) dx[i] += dxb[i];
      }
      if (first) {
        auto& gw = grads_["in.w"];
        auto& gb = grads_["in.b"];
        for (int64_t r = 0; r < R; ++r) {
          for (int o = 0; o < H; ++o) {
            double x0 = mb.x0[r * H + o];
            double d = dx[r * H + o] * (1.0 - x0 * x0);
            gb[o] += d;
            for (int i = 0; i < kInputs; ++i) gw[o * kInputs + i] += d * mb.input[r * kInputs + i];
          }
        }
      } else if (R > 0) {
        Status s = at.pp_group->Send(dx.data(), dx.size() * sizeof(double), stage - 1, 2 * j + 1,
                                     at.pp_group->default_timeout());
        if (!s.ok()) return s;
      }
    }
    // Sum gradients (and the loss) over DP: one allreduce of everything this rank holds.
    std::vector<double> flat;
    for (const auto& name : param_names_) {
      auto it = grads_.find(name);
      if (it != grads_.end()) flat.insert(flat.end(), it->second.begin(), it->second.end());
    }
    flat.push_back(loss_sum);
    if (at.dp_group != nullptr && at.dp > 1) {
      Status s = at.dp_group->Allreduce(flat.data(), flat.size(), DataType::kFloat64, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    for (double& g : flat) g /= static_cast<double>(B);
    size_t offset = 0;
    for (const auto& name : param_names_) {
      auto it = grads_.find(name);
      if (it == grads_.end()) continue;
      for (double& g : it->second) g = flat[offset++];
    }
    // The loss lives on the last stage; global rank 0 (first stage) logs it.
    double l = (last && at.coords.dp_rank == 0 && at.coords.tp_rank == 0) ? flat.back() : 0.0;
    if (at.world != nullptr && at.pp > 1) {
      Status s = at.world->Allreduce(&l, 1, DataType::kFloat64, ReduceOp::kSum);
      if (!s.ok()) return s;
    }
    *loss = l;
    ApplyAdam(state, step + 1);
    state->SetScalar("cursor", cursor + B);
    return Status();
  }

 private:
  void ApplyAdam(TensorCollection* state, int64_t t) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double c1 = 1.0 - std::pow(b1, static_cast<double>(t));
    double c2 = 1.0 - std::pow(b2, static_cast<double>(t));
    for (const auto& [name, grad] : grads_) {
      auto p = state->View<double>(name);
      auto m = state->View<double>("m:" + name);
      auto v = state->View<double>("v:" + name);
      for (size_t k = 0; k < p.size(); ++k) {
        double g = grad[k];
        m[k] = b1 * m[k] + (1 - b1) * g;
        v[k] = b2 * v[k] + (1 - b2) * g * g;
        p[k] -= flags_.lr * (m[k] / c1) / (std::sqrt(v[k] / c2) + eps);
      }
    }
  }

  Flags flags_;
  Teacher teacher_;
  mutable std::vector<std::string> param_names_;
  std::map<std::string, std::vector<double>> grads_;
};

class StepLog {
 public:
  explicit StepLog(const std::string& path) {
    if (!path.empty()) {
      file_ = std::fopen(path.c_str(), "a");
      if (file_ == nullptr) {
        std::fprintf(stderr, "train_mlp: cannot open log %s: %s\n", path.c_str(),
                     std::strerror(errno));
        std::exit(1);
      }
    }
  }
  ~StepLog() {
    if (file_) std::fclose(file_);
  }
  void Write(int64_t step, uint64_t generation, const elastra::Layout& layout, double loss,
             int64_t begin, int64_t end) {
    if (file_ == nullptr) return;
    std::fprintf(file_,
                 "{\"step\":%lld,\"generation\":%llu,\"dp\":%d,\"pp\":%d,\"tp\":%d,"
                 "\"loss\":%.17g,\"sample_begin\":%lld,\"sample_end\":%lld}\n",
                 static_cast<long long>(step), static_cast<unsigned long long>(generation),
                 layout.dp, layout.pp, layout.tp, loss, static_cast<long long>(begin),
                 static_cast<long long>(end));
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
};

void PadStep(std::chrono::steady_clock::time_point start, double step_time_ms) {
  if (step_time_ms <= 0) return;
  std::this_thread::sleep_until(start + std::chrono::microseconds(
                                            static_cast<int64_t>(step_time_ms * 1000)));
}

int RunReference(const Flags& flags) {
  Model model(flags);
  TensorCollection state;
  if (!state.AddScalar(elastra::kStepScalarName, 0).ok()) return 1;
  if (Status s = model.Register(&state); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  StepLog log(flags.log);
  Placement at;
  double loss = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    int64_t begin = state.GetScalar("cursor");
    if (!model.Step(&state, at, &loss).ok()) return 1;
    state.SetScalar(elastra::kStepScalarName, step + 1);
    log.Write(step, 0, elastra::Layout{}, loss, begin, begin + flags.global_batch);
  }
  std::printf("reference: %lld steps, final loss %.6g\n", static_cast<long long>(flags.steps),
              loss);
  return 0;
}

int RunElastic(const Flags& flags) {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", options.status().ToString().c_str());
    return 2;
  }
  if (flags.commit_every > 0) options->commit_every = flags.commit_every;
  if (flags.plan) {
    // The model as the planner sees it (docs/resharding.md): each block is a "layer" whose fc1
    // and fc2 are the MLP of a transformer layer; heads = hidden lets tp be any divisor.
    char model[512];
    std::snprintf(model, sizeof(model),
                  "{\"model\":{\"layers\":%d,\"hidden\":%d,\"heads\":%d,\"ffn_hidden\":%d,"
                  "\"vocab\":%d,\"seq_len\":1,\"global_batch\":%lld,\"micro_batch\":1,"
                  "\"dtype\":\"fp32\",\"optimizer\":\"adam\",\"zero\":0,"
                  "\"device_memory_gib\":16},\"pins\":{\"tp\":%d,\"pp\":%d,\"only_dp\":%s}}",
                  flags.layers, flags.hidden, flags.hidden, flags.ffn, kInputs,
                  static_cast<long long>(flags.global_batch), flags.pin_tp, flags.pin_pp,
                  flags.only_dp ? "true" : "false");
    options->model_json = model;
  }
  if (!flags.checkpoint_dir.empty()) {
    options->checkpoint_dir = flags.checkpoint_dir;
    options->checkpoint_every = flags.checkpoint_every > 0 ? flags.checkpoint_every : 50;
  }
  auto worker_or = elastra::Worker::Create(*options);
  if (!worker_or.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", worker_or.status().ToString().c_str());
    return 1;
  }
  auto worker = std::move(worker_or).value();
  Model model(flags);
  if (Status s = model.Register(&worker->state()); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (Status s = worker->Start(); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  StepLog log(flags.log);
  double loss = 0;
  while (worker->step() < flags.steps) {
    auto start = std::chrono::steady_clock::now();
    int64_t step = worker->step();
    uint64_t generation = worker->generation();
    elastra::Layout layout = worker->layout();
    bool logs = worker->rank() == 0;
    int64_t begin = worker->state().GetScalar("cursor");
    Placement at;
    at.dp = layout.dp;
    at.pp = layout.pp;
    at.tp = layout.tp;
    at.coords = worker->coordinates();
    at.dp_group = &worker->dp_group();
    at.pp_group = &worker->pp_group();
    at.tp_group = &worker->tp_group();
    at.world = &worker->world();
    Status s = model.Step(&worker->state(), at, &loss);
    if (s.ok()) PadStep(start, flags.step_time_ms);
    auto action = worker->StepEnd(s);
    if (!action.ok()) {
      std::fprintf(stderr, "train_mlp: %s\n", action.status().ToString().c_str());
      return 1;
    }
    // StepEnd advances step() only when this step was applied (also when it then paused for a
    // planned change); after a rollback step() is back at the restored commit.
    if (logs && worker->step() == step + 1) {
      log.Write(step, generation, layout, loss, begin, begin + flags.global_batch);
    }
    if (*action == elastra::StepAction::kLeave) return 0;
  }
  if (worker->rank() == 0) {
    std::printf("train_mlp: %lld steps, final loss %.6g, generation %llu, %s\n",
                static_cast<long long>(flags.steps), loss,
                static_cast<unsigned long long>(worker->generation()),
                worker->layout().ToString().c_str());
  }
  worker->Finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  return flags.reference ? RunReference(flags) : RunElastic(flags);
}
