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
// --device cpu|cuda (default cpu) picks the arithmetic (mlp_ops.h): loops on the CPU, or, in a
// build with CUDA, cuBLAS and CUDA kernels with the state's shards in device memory. The CUDA
// device is ELASTRA_DEVICE when it is a number, else OMPI_COMM_WORLD_LOCAL_RANK, else 0; with
// --reference the single process runs on it too. The model above the arithmetic (schedule,
// collectives, data, logging) is the same code for both. The training communicators take device
// buffers on the nccl backend; on gloo (ELASTRA_BACKEND=gloo) device buffers go through host
// copies. A build without CUDA refuses --device cuda (exit 2). A CUDA or cuBLAS error ends the
// process with a message naming the call and exit status 1 (the job goes on without it); a worker
// parked by a shrink (mpirun) gives its scratch memory back to the device while it waits.
//
//   ELASTRA_DEVICE=0 train_mlp --reference --device cuda --steps 200 --log gpu_ref.jsonl
//
// Arithmetic: float64 everywhere; a layout changes only how partial sums are grouped, which moves
// the loss by ~1e-15 relative, and so does the device (different grouping, fused multiply-adds).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "elastra/worker.h"
#include "examples/mlp_ops.h"

#ifndef ELASTRA_TRAIN_MLP_CUDA
#define ELASTRA_TRAIN_MLP_CUDA 0
#endif

namespace {

using elastra::Communicator;
using elastra::DataType;
using elastra::Status;
using elastra::TensorCollection;
using elastra::examples::AdamStep;
using elastra::examples::Array;
using elastra::examples::MlpOps;
using elastra::examples::OpsCollectives;
using elastra::examples::Span;

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
  bool cuda = false;  // --device cuda
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr,
               "train_mlp: %s\n"
               "usage: train_mlp [--steps N] [--global-batch B] [--hidden H] [--ffn F]\n"
               "                 [--layers L] [--micro-batches M] [--seed S] [--dataset-size N]\n"
               "                 [--lr X] [--log FILE] [--step-time-ms T] [--commit-every K]\n"
               "                 [--checkpoint-dir DIR --checkpoint-every M]\n"
               "                 [--plan [--pin-tp N] [--pin-pp N] [--only-dp]] [--reference]\n"
               "                 [--device cpu|cuda]\n",
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
    auto device_value = [&]() {  // true for cuda
      std::string d = value();
      if (d != "cpu" && d != "cuda") Usage(("bad value for --device: " + d).c_str());
      return d == "cuda";
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
    else if (a == "--device") f.cuda = device_value();
    else Usage(("unknown flag " + a).c_str());
  }
  if (f.ffn == 0) f.ffn = 2 * f.hidden;
  if (f.hidden > 4096 || f.ffn > 16384 || f.layers > 64) Usage("model too large for this example");
  if (f.cuda && !ELASTRA_TRAIN_MLP_CUDA) {
    std::fprintf(stderr, "train_mlp: --device cuda: this train_mlp was built without CUDA\n");
    std::exit(2);
  }
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

class Model {
 public:
  // `ops` (not owned) does the arithmetic; the state's shards must live in its memory.
  Model(const Flags& flags, MlpOps* ops)
      : flags_(flags), teacher_(flags.hidden), ops_(ops), comm_(ops) {}

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
  // The shards are looked up afresh every step (they move at a reconfiguration), and the ops'
  // queue is drained before returning, also on an error: the Worker reads and writes the device
  // shards between steps. When the ops have failed (a CUDA error) their status is returned
  // whatever else went wrong: see device_failed().
  Status Step(TensorCollection* state, const Placement& at, double* loss) {
    Status s = RunStep(state, at, loss);
    ops_->Synchronize();
    if (device_failed()) return ops_->status();
    return s;
  }

  // True once the arithmetic has failed (MlpOps::status()): the step's device work is lost and
  // the device may be unusable, so the process gives up.
  bool device_failed() const { return !ops_->status().ok(); }

  // Gives the memory the model keeps between steps back (a parked worker): the ops' pool and
  // handles, the host copy of the collectives. Returns the device bytes given back.
  size_t ReleaseMemory() {
    comm_.ReleaseMemory();
    return ops_->ReleaseMemory();
  }

 private:
  // The local shard of `name` in the ops' memory.
  Span Shard(TensorCollection* state, const std::string& name) const {
    std::span<double> v =
        ops_->on_device() ? state->DeviceView<double>(name) : state->View<double>(name);
    return Span{v.data(), v.size()};
  }

  Status RunStep(TensorCollection* state, const Placement& at, double* loss) {
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
    // The loss lives on the last stage; global rank 0 (first stage) logs it.
    double l = 0;
    if (last && at.coords.dp_rank == 0 && at.coords.tp_rank == 0) ops_->CopyToHost(loss_sum, &l);
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

  void ApplyAdam(TensorCollection* state, const std::map<std::string, Span>& grads, int64_t t) {
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

  Flags flags_;
  Teacher teacher_;
  MlpOps* ops_;
  OpsCollectives comm_;
  mutable std::vector<std::string> param_names_;
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

// The CUDA device of this process for --device cuda: ELASTRA_DEVICE when it is a number, else the
// local rank under mpirun (OMPI_COMM_WORLD_LOCAL_RANK), else 0.
int DeviceOrdinal() {
  int64_t v = 0;
  if (const char* d = std::getenv("ELASTRA_DEVICE"); d != nullptr && ParseInt(d, &v)) {
    if (v < 0) {
      std::fprintf(stderr, "train_mlp: --device cuda, but ELASTRA_DEVICE=%s names no device\n", d);
      std::exit(2);
    }
    return static_cast<int>(v);
  }
  if (const char* r = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
      r != nullptr && ParseInt(r, &v) && v >= 0) {
    return static_cast<int>(v);
  }
  return 0;
}

// Test hook: ELASTRA_TEST_FAIL_OPS=WORKER_ID:STEP makes the arithmetic of the worker WORKER_ID fail
// at step STEP as a CUDA error would (MlpOps::FailForTest), on any device.
struct InjectedFailure {
  std::string worker_id;
  int64_t step = -1;
};
InjectedFailure InjectedFailureFromEnvironment() {
  InjectedFailure f;
  const char* v = std::getenv("ELASTRA_TEST_FAIL_OPS");
  if (v == nullptr) return f;
  std::string s = v;
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !ParseInt(s.substr(colon + 1).c_str(), &f.step)) {
    std::fprintf(stderr, "train_mlp: ELASTRA_TEST_FAIL_OPS=%s is not WORKER_ID:STEP\n", v);
    std::exit(2);
  }
  f.worker_id = s.substr(0, colon);
  return f;
}

// The arithmetic for --device: CpuOps, or CudaOps on `device`; null (after saying why) when CUDA
// cannot be set up.
std::unique_ptr<MlpOps> MakeOps(const Flags& flags, int device) {
  if (!flags.cuda) return elastra::examples::MakeCpuOps();
#if ELASTRA_TRAIN_MLP_CUDA
  auto ops = elastra::examples::MakeCudaOps(device);
  if (ops.ok()) return std::move(ops).value();
  std::fprintf(stderr, "train_mlp: --device cuda: %s\n", ops.status().ToString().c_str());
#endif
  return nullptr;  // without CUDA ParseFlags has refused --device cuda already
}

// " on CUDA device D" for the final line of a run on a device: its output says where it ran.
std::string DeviceNote(int device) {
  return device >= 0 ? " on CUDA device " + std::to_string(device) : std::string();
}

int RunReference(const Flags& flags) {
  const int device = flags.cuda ? DeviceOrdinal() : -1;
  std::unique_ptr<MlpOps> ops = MakeOps(flags, device);
  if (ops == nullptr) return 1;
  Model model(flags, ops.get());
  TensorCollection state;
  if (!state.AddScalar(elastra::kStepScalarName, 0).ok()) return 1;
  if (Status s = model.Register(&state); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (flags.cuda) {
    // Whole tensors on the device, as a worker's shards would be.
    Status s = state.SetDevice(device);
    if (s.ok()) s = state.MoveToDevice();
    if (!s.ok()) {
      std::fprintf(stderr, "train_mlp: --device cuda: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  StepLog log(flags.log);
  Placement at;
  double loss = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    int64_t begin = state.GetScalar("cursor");
    if (Status s = model.Step(&state, at, &loss); !s.ok()) {
      std::fprintf(stderr, "train_mlp: step %lld: %s\n", static_cast<long long>(step),
                   s.ToString().c_str());
      return 1;
    }
    state.SetScalar(elastra::kStepScalarName, step + 1);
    log.Write(step, 0, elastra::Layout{}, loss, begin, begin + flags.global_batch);
  }
  std::printf("reference: %lld steps, final loss %.6g%s\n", static_cast<long long>(flags.steps),
              loss, DeviceNote(device).c_str());
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
  // Under mpirun a worker that a shrink takes out parks inside StepEnd(); the model's scratch
  // memory goes back to the device then, and comes back with the next step's allocations.
  Model* model_to_park = nullptr;  // set once the model exists; outlives the worker
  options->on_park = [&model_to_park, &flags] {
    if (model_to_park == nullptr) return;
    size_t bytes = model_to_park->ReleaseMemory();
    if (flags.cuda) {
      std::fprintf(stderr, "train_mlp: parked: %zu bytes of scratch memory back to the device\n",
                   bytes);
    }
  };
  auto worker_or = elastra::Worker::Create(*options);
  if (!worker_or.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", worker_or.status().ToString().c_str());
    return 1;
  }
  auto worker = std::move(worker_or).value();
  const int device = flags.cuda ? DeviceOrdinal() : -1;
  std::unique_ptr<MlpOps> ops = MakeOps(flags, device);
  if (ops == nullptr) return 1;
  Model model(flags, ops.get());
  model_to_park = &model;
  // The parameters are initialized whole in host memory; with a device, Start() moves the shards
  // there.
  if (Status s = model.Register(&worker->state()); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (flags.cuda) {
    if (Status s = worker->state().SetDevice(device); !s.ok()) {
      std::fprintf(stderr, "train_mlp: --device cuda: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (Status s = worker->Start(); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!flags.cuda && worker->world().backend() == elastra::Backend::kNccl) {
    std::fprintf(stderr,
                 "train_mlp: the nccl backend takes device buffers: use --device cuda or "
                 "ELASTRA_BACKEND=gloo\n");
    return 2;
  }
  StepLog log(flags.log);
  const InjectedFailure inject = InjectedFailureFromEnvironment();
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
    if (step == inject.step && worker->worker_id() == inject.worker_id) {
      ops->FailForTest(elastra::InternalError("injected by ELASTRA_TEST_FAIL_OPS"));
    }
    // Step() looks the shards (DeviceView with --device cuda) up afresh, so the views it uses are
    // always those of the current generation, also after a StepEnd that returned kReconfigured.
    Status s = model.Step(&worker->state(), at, &loss);
    if (model.device_failed()) {
      // Not handed to StepEnd(): a recovery would bring this process back on the failed device.
      // Returning closes this worker's communicators and coordinator connection (as for the
      // other fatal errors below), so the peers' collectives and the coordinator see it gone and
      // the job recovers without it.
      std::fprintf(stderr, "train_mlp: step %lld failed%s: %s; this worker gives up\n",
                   static_cast<long long>(step), DeviceNote(device).c_str(), s.ToString().c_str());
      return 1;
    }
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
    std::printf("train_mlp: %lld steps, final loss %.6g, generation %llu, %s%s\n",
                static_cast<long long>(flags.steps), loss,
                static_cast<unsigned long long>(worker->generation()),
                worker->layout().ToString().c_str(), DeviceNote(device).c_str());
  }
  worker->Finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags = ParseFlags(argc, argv);
  return flags.reference ? RunReference(flags) : RunElastic(flags);
}
