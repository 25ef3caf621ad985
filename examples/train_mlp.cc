// train_mlp: an MLP regression on synthetic data from a fixed teacher network, trained with data
// parallelism under Elastra. The global batch is fixed and split across the DP ranks by the data
// cursor, so a run that is resized or loses a worker follows the same losses as --reference.
//
//   elastra run --nproc 4 -- train_mlp --steps 200 --log run.jsonl
//   train_mlp --reference --steps 200 --log ref.jsonl
//
// Arithmetic: parameters, gradients and the loss are float64, and each rank's partial sums are
// added by one allreduce; only the grouping of the sum changes with the layout, which moves the
// loss by ~1e-15 relative.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
  int layers = 2;  // hidden layers
  uint64_t seed = 1;
  int64_t dataset_size = 4096;
  double lr = 1e-2;
  std::string log;
  double step_time_ms = 0;
  bool reference = false;
  int commit_every = 0;  // 0: the worker's default (ELASTRA_COMMIT_EVERY or 10)
};

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr,
               "train_mlp: %s\n"
               "usage: train_mlp [--steps N] [--global-batch B] [--hidden H] [--layers L]\n"
               "                 [--seed S] [--dataset-size N] [--lr X] [--log FILE]\n"
               "                 [--step-time-ms T] [--commit-every K] [--reference]\n",
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
    else if (a == "--layers") f.layers = static_cast<int>(int_value(1));
    else if (a == "--seed") f.seed = static_cast<uint64_t>(int_value(0));
    else if (a == "--dataset-size") f.dataset_size = int_value(1);
    else if (a == "--lr") f.lr = std::atof(value());
    else if (a == "--log") f.log = value();
    else if (a == "--step-time-ms") f.step_time_ms = static_cast<double>(int_value(0));
    else if (a == "--commit-every") f.commit_every = static_cast<int>(int_value(1));
    else if (a == "--reference") f.reference = true;
    else Usage(("unknown flag " + a).c_str());
  }
  if (f.hidden > 4096 || f.layers > 64) Usage("model too large for this example");
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

// Layer sizes: kInputs -> hidden x layers -> kOutputs.
std::vector<int> Sizes(const Flags& f) {
  std::vector<int> s{kInputs};
  for (int i = 0; i < f.layers; ++i) s.push_back(f.hidden);
  s.push_back(kOutputs);
  return s;
}

struct Net {
  std::vector<int> sizes;
  std::vector<const double*> w, b;  // w[l]: [sizes[l+1], sizes[l]]
};

// Forward pass; keeps each layer's activations in `acts` (tanh on hidden layers, linear output).
void Forward(const Net& net, const double* x, std::vector<std::vector<double>>* acts) {
  size_t n = net.sizes.size();
  acts->resize(n);
  (*acts)[0].assign(x, x + net.sizes[0]);
  for (size_t l = 0; l + 1 < n; ++l) {
    int in = net.sizes[l], out = net.sizes[l + 1];
    auto& y = (*acts)[l + 1];
    y.assign(out, 0.0);
    for (int o = 0; o < out; ++o) {
      double s = net.b[l][o];
      const double* row = net.w[l] + static_cast<size_t>(o) * in;
      for (int i = 0; i < in; ++i) s += row[i] * (*acts)[l][i];
      y[o] = (l + 2 < n) ? std::tanh(s) : s;
    }
  }
}

void MakeInput(uint64_t seed, int64_t index, double* x) {
  for (int i = 0; i < kInputs; ++i) x[i] = Uniform(Mix(seed * 1000003ULL + index) + i);
}

class Model {
 public:
  Model(const Flags& flags) : flags_(flags), sizes_(Sizes(flags)) {
    // The teacher is fixed (seed 777) and generates the targets.
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      int in = sizes_[l], out = sizes_[l + 1];
      std::vector<double> w(static_cast<size_t>(in) * out), b(out);
      double scale = 1.5 / std::sqrt(static_cast<double>(in));
      for (size_t k = 0; k < w.size(); ++k) w[k] = scale * Uniform(777000 + l * 1000003 + k);
      for (int k = 0; k < out; ++k) b[k] = 0.1 * Uniform(888000 + l * 1000003 + k);
      teacher_w_.push_back(std::move(w));
      teacher_b_.push_back(std::move(b));
    }
  }

  // Registers parameters, gradients' optimizer moments and scalars, initialized from --seed.
  Status Register(TensorCollection* state) {
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      int64_t in = sizes_[l], out = sizes_[l + 1];
      for (const char* kind : {"w", "m_w", "v_w"}) {
        auto s = state->AddTensor(std::string(kind) + std::to_string(l), {out, in},
                                  DataType::kFloat64);
        if (!s.ok()) return s;
      }
      for (const char* kind : {"b", "m_b", "v_b"}) {
        auto s = state->AddTensor(std::string(kind) + std::to_string(l), {out},
                                  DataType::kFloat64);
        if (!s.ok()) return s;
      }
      auto w = state->View<double>("w" + std::to_string(l));
      double scale = 1.0 / std::sqrt(static_cast<double>(in));
      for (size_t k = 0; k < w.size(); ++k) {
        w[k] = scale * Uniform(Mix(flags_.seed) + l * 1000003 + k);
      }
    }
    return state->AddScalar("cursor", 0);
  }

  size_t ParamCount() const {
    size_t n = 0;
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) n += sizes_[l + 1] * (sizes_[l] + 1);
    return n;
  }

  // One step: samples [cursor + begin, cursor + end) of the global batch are this rank's. The
  // gradient and loss sums are allreduced (when comm is set) and Adam is applied to every replica.
  Status Step(TensorCollection* state, Communicator* comm, int dp_rank, int dp, double* loss) {
    int64_t cursor = state->GetScalar("cursor");
    int64_t step = state->GetScalar(elastra::kStepScalarName);
    int64_t B = flags_.global_batch;
    int64_t begin = B * dp_rank / dp, end = B * (dp_rank + 1) / dp;
    Net net;
    net.sizes = sizes_;
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      net.w.push_back(state->View<double>("w" + std::to_string(l)).data());
      net.b.push_back(state->View<double>("b" + std::to_string(l)).data());
    }
    Net teacher;
    teacher.sizes = sizes_;
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      teacher.w.push_back(teacher_w_[l].data());
      teacher.b.push_back(teacher_b_[l].data());
    }
    // grads: per layer w then b, then the loss sum at the end.
    std::vector<double> grad(ParamCount() + 1, 0.0);
    std::vector<std::vector<double>> acts, tacts;
    std::vector<double> x(kInputs), delta, next;
    for (int64_t s = cursor + begin; s < cursor + end; ++s) {
      int64_t index = s % flags_.dataset_size;
      MakeInput(flags_.seed, index, x.data());
      Forward(teacher, x.data(), &tacts);
      Forward(net, x.data(), &acts);
      size_t n = sizes_.size();
      delta.assign(kOutputs, 0.0);
      for (int o = 0; o < kOutputs; ++o) {
        double d = acts[n - 1][o] - tacts[n - 1][o];
        delta[o] = d;
        grad.back() += 0.5 * d * d;
      }
      // Backward, accumulating into grad.
      size_t offset = ParamCount();
      for (size_t l = n - 1; l-- > 0;) {
        int in = sizes_[l], out = sizes_[l + 1];
        offset -= static_cast<size_t>(out) * (in + 1);
        double* gw = grad.data() + offset;
        double* gb = gw + static_cast<size_t>(out) * in;
        for (int o = 0; o < out; ++o) {
          for (int i = 0; i < in; ++i) gw[static_cast<size_t>(o) * in + i] += delta[o] * acts[l][i];
          gb[o] += delta[o];
        }
        if (l == 0) break;
        next.assign(in, 0.0);
        for (int o = 0; o < out; ++o) {
          const double* row = net.w[l] + static_cast<size_t>(o) * in;
          for (int i = 0; i < in; ++i) next[i] += row[i] * delta[o];
        }
        for (int i = 0; i < in; ++i) next[i] *= 1.0 - acts[l][i] * acts[l][i];
        delta.swap(next);
      }
    }
    if (comm != nullptr) {
      Status st = comm->Allreduce(grad.data(), grad.size(), DataType::kFloat64, ReduceOp::kSum);
      if (!st.ok()) return st;
    }
    for (double& g : grad) g /= static_cast<double>(B);
    *loss = grad.back();
    ApplyAdam(state, grad, step + 1);
    state->SetScalar("cursor", cursor + B);
    return Status();
  }

 private:
  void ApplyAdam(TensorCollection* state, const std::vector<double>& grad, int64_t t) {
    const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
    double c1 = 1.0 - std::pow(b1, static_cast<double>(t));
    double c2 = 1.0 - std::pow(b2, static_cast<double>(t));
    size_t offset = 0;
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      for (const char* kind : {"w", "b"}) {
        std::string name = kind + std::to_string(l);
        auto p = state->View<double>(name);
        auto m = state->View<double>("m_" + name);
        auto v = state->View<double>("v_" + name);
        for (size_t k = 0; k < p.size(); ++k) {
          double g = grad[offset + k];
          m[k] = b1 * m[k] + (1 - b1) * g;
          v[k] = b2 * v[k] + (1 - b2) * g * g;
          p[k] -= flags_.lr * (m[k] / c1) / (std::sqrt(v[k] / c2) + eps);
        }
        offset += p.size();
      }
    }
  }

  Flags flags_;
  std::vector<int> sizes_;
  std::vector<std::vector<double>> teacher_w_, teacher_b_;
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
  if (!state.AddScalar(elastra::kStepScalarName, 0).ok() || !model.Register(&state).ok()) return 1;
  StepLog log(flags.log);
  double loss = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    int64_t begin = state.GetScalar("cursor");
    Status s = model.Step(&state, nullptr, 0, 1, &loss);
    if (!s.ok()) return 1;
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
    Status s = model.Step(&worker->state(), &worker->world(), worker->rank() / (layout.pp * layout.tp),
                          layout.dp, &loss);
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
