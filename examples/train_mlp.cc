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
//
// This file holds the two training loops (--reference, and elastic under a Worker); the model is
// train_mlp_model.h, the flags and environment train_mlp_options.h, the --log file
// train_mlp_log.h.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "elastra/worker.h"
#include "examples/mlp_ops.h"
#include "examples/train_mlp_log.h"
#include "examples/train_mlp_model.h"
#include "examples/train_mlp_options.h"

namespace train_mlp {
namespace {

using elastra::Status;
using elastra::TensorCollection;
using elastra::examples::MlpOps;

// 1 when `path` names a file that exists, else 0 (also for an empty path).
int64_t Exists(const std::string& path) {
  return !path.empty() && access(path.c_str(), F_OK) == 0 ? 1 : 0;
}

void PadStep(std::chrono::steady_clock::time_point start, double step_time_ms) {
  if (step_time_ms <= 0) return;
  std::this_thread::sleep_until(start + std::chrono::microseconds(
                                            static_cast<int64_t>(step_time_ms * 1000)));
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

// The model as the planner sees it (docs/resharding.md): each block is a "layer" whose fc1 and
// fc2 are the MLP of a transformer layer; heads = hidden lets tp be any divisor.
std::string PlannerModelJson(const Flags& flags) {
  char model[512];
  std::snprintf(model, sizeof(model),
                "{\"model\":{\"layers\":%d,\"hidden\":%d,\"heads\":%d,\"ffn_hidden\":%d,"
                "\"vocab\":%d,\"seq_len\":1,\"global_batch\":%lld,\"micro_batch\":1,"
                "\"dtype\":\"fp32\",\"optimizer\":\"adam\",\"zero\":0,"
                "\"device_memory_gib\":16},\"pins\":{\"tp\":%d,\"pp\":%d,\"only_dp\":%s}}",
                flags.layers, flags.hidden, flags.hidden, flags.ffn, kInputs,
                static_cast<long long>(flags.global_batch), flags.pin_tp, flags.pin_pp,
                flags.only_dp ? "true" : "false");
  return model;
}

// The worker's options: those of the environment (elastra run, mpirun), and what the flags add.
elastra::StatusOr<elastra::WorkerOptions> ElasticOptions(const Flags& flags) {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) return options;
  if (flags.commit_every > 0) options->commit_every = flags.commit_every;
  if (flags.plan) options->model_json = PlannerModelJson(flags);
  if (flags.device_memory_mb > 0) options->device_memory_bytes = flags.device_memory_mb << 20;
  if (!flags.checkpoint_dir.empty()) {
    options->checkpoint_dir = flags.checkpoint_dir;
    options->checkpoint_every = flags.checkpoint_every > 0 ? flags.checkpoint_every : 50;
  }
  return options;
}

// Registers the model's state with the worker and joins the job. Returns the exit status when
// it cannot (0 when the coordinator dismissed it before it held a rank), nullopt when training can
// begin.
std::optional<int> StartWorker(const Flags& flags, int device, Model& model,
                               elastra::Worker& worker) {
  // The parameters are initialized whole in host memory; with a device, Start() moves the shards
  // there.
  if (Status s = model.Register(&worker.state()); !s.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (flags.cuda) {
    if (Status s = worker.state().SetDevice(device); !s.ok()) {
      std::fprintf(stderr, "train_mlp: --device cuda: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  if (Status s = worker.Start(); !s.ok()) {
    if (worker.dismissed()) {  // a standby the job did not need: nothing went wrong
      std::printf("train_mlp: %s\n", s.message().c_str());
      std::fflush(stdout);
      return 0;
    }
    std::fprintf(stderr, "train_mlp: %s\n", s.ToString().c_str());
    return 1;
  }
  if (!flags.cuda && worker.world().backend() == elastra::Backend::kNccl) {
    std::fprintf(stderr,
                 "train_mlp: the nccl backend takes device buffers: use --device cuda or "
                 "ELASTRA_BACKEND=gloo\n");
    return 2;
  }
  if ((!flags.stop_file.empty() || !flags.hold_file.empty()) &&
      worker.world().backend() == elastra::Backend::kNccl) {
    std::fprintf(stderr,
                 "train_mlp: --stop-file and --hold-file need host collectives, not the nccl "
                 "backend\n");
    return 2;
  }
  return std::nullopt;
}

// Where the worker sits in `layout` and whom it talks to.
Placement PlacementOf(elastra::Worker& worker, const elastra::Layout& layout) {
  Placement at;
  at.dp = layout.dp;
  at.pp = layout.pp;
  at.tp = layout.tp;
  at.coords = worker.coordinates();
  at.dp_group = &worker.dp_group();
  at.pp_group = &worker.pp_group();
  at.tp_group = &worker.tp_group();
  at.world = &worker.world();
  return at;
}

// Every rank remembers the last steps it counted. Only rank 0 logs, and a step counts on the
// ranks that held their lease when its agreement completed: when rank 0 dies or is fenced right
// after the agreement, the others count the step and rank 0 never logs it. So the worker that
// becomes rank 0 through a change logs again the steps it remembers below the step its state is
// at (the same records, or the ones rank 0 missed; the log's reader keeps the last).
class CountedSteps {
 public:
  CountedSteps(const Flags& flags, int commit_every, StepLog* log)
      : flags_(flags),
        log_(log),
        remember_(2 * static_cast<size_t>(std::max(1, commit_every)) + 2) {}

  void Add(int64_t step, uint64_t generation, const elastra::Layout& layout, double loss,
           int64_t begin) {
    counted_.push_back({step, generation, layout, loss, begin});
    if (counted_.size() > remember_) counted_.pop_front();
  }

  // After StepEnd(): `logged` is whether this worker was rank 0 before it, `before` the
  // generation then.
  void AfterStepEnd(const elastra::Worker& worker, bool logged, uint64_t before) {
    // Steps a rollback undid are forgotten: they are applied (and remembered) again.
    while (!counted_.empty() && counted_.back().step >= worker.step()) counted_.pop_back();
    if (logged || worker.rank() != 0 || worker.generation() == before) return;
    for (const Counted& c : counted_) {
      if (c.step < worker.step()) {
        log_->Write(c.step, c.generation, c.layout, c.loss, c.begin, c.begin + flags_.global_batch);
      }
    }
  }

 private:
  struct Counted {
    int64_t step;
    uint64_t generation;
    elastra::Layout layout;
    double loss;
    int64_t begin;
  };
  const Flags& flags_;
  StepLog* log_;
  const size_t remember_;
  std::deque<Counted> counted_;
};

// The training loop of a started worker: steps until --steps (or --stop-file), each ended with
// StepEnd(), which recovers from a failure or carries out a change. Rank 0 logs each step.
class ElasticLoop {
 public:
  ElasticLoop(const Flags& flags, int device, int commit_every, elastra::Worker& worker,
              Model& model, MlpOps& ops)
      : flags_(flags),
        device_(device),
        worker_(worker),
        model_(model),
        ops_(ops),
        log_(flags.log),
        inject_(InjectedFailureFromEnvironment()),
        counted_(flags, commit_every, &log_) {}

  // Returns the process's exit status.
  int Run() {
    while (worker_.step() < flags_.steps) {
      Next next =
          flags_.stop_file.empty() && flags_.hold_file.empty() ? Next::kTrain : CheckStopFile();
      if (next == Next::kRetry) continue;
      if (next == Next::kTrain) next = TrainStep();
      if (next == Next::kStop) break;
      if (next == Next::kExit) return exit_status_;
    }
    if (worker_.rank() == 0) {
      std::printf("train_mlp: %lld steps%s, final loss %.6g, generation %llu, %s%s\n",
                  static_cast<long long>(stopped_at_ >= 0 ? stopped_at_ : flags_.steps),
                  stopped_at_ >= 0 ? " (stopped by --stop-file)" : "", loss_,
                  static_cast<unsigned long long>(worker_.generation()),
                  worker_.layout().ToString().c_str(), DeviceNote(device_).c_str());
    }
    worker_.Finish();
    return 0;
  }

 private:
  // What the loop does next: train the step, try it again (after a recovery), stop at
  // --stop-file, or end the process with exit_status_.
  enum class Next { kTrain, kRetry, kStop, kExit };

  Next Exit(int status) {
    exit_status_ = status;
    return Next::kExit;
  }

  // Every member asks at the same point of the same step, also right after a reconfiguration
  // (a joiner's first step), so they all stop (or hold) together.
  Next CheckStopFile() {
    int64_t seen[2] = {Exists(flags_.stop_file), Exists(flags_.hold_file)};
    Status agreed =
        worker_.world().Allreduce(seen, 2, elastra::DataType::kInt64, elastra::ReduceOp::kMax);
    if (!agreed.ok()) {
      // A failed collective like any other: the worker recovers and the step is retried.
      const bool logged = worker_.rank() == 0;
      const uint64_t before = worker_.generation();
      auto action = worker_.StepEnd(agreed);
      if (!action.ok()) {
        std::fprintf(stderr, "train_mlp: %s\n", action.status().ToString().c_str());
        return Exit(1);
      }
      if (*action == elastra::StepAction::kLeave) return Exit(0);
      counted_.AfterStepEnd(worker_, logged, before);
      return Next::kRetry;
    }
    if (seen[0] != 0) {
      stopped_at_ = worker_.step();
      return Next::kStop;
    }
    if (seen[1] != 0) {
      if (worker_.rank() == 0) {
        if (std::FILE* f = std::fopen((flags_.hold_file + ".held").c_str(), "w")) std::fclose(f);
      }
      while (Exists(flags_.hold_file) != 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      return Next::kRetry;  // asked again: a member may have failed meanwhile
    }
    return Next::kTrain;
  }

  // One step: the model's, then StepEnd(); logged and reported when it was applied.
  Next TrainStep() {
    auto start = std::chrono::steady_clock::now();
    int64_t step = worker_.step();
    uint64_t generation = worker_.generation();
    elastra::Layout layout = worker_.layout();
    bool logs = worker_.rank() == 0;
    int64_t begin = worker_.state().GetScalar("cursor");
    const Placement at = PlacementOf(worker_, layout);
    if (step == inject_.step && worker_.worker_id() == inject_.worker_id) {
      ops_.FailForTest(elastra::InternalError("injected by ELASTRA_TEST_FAIL_OPS"));
    }
    // Step() looks the shards (DeviceView with --device cuda) up afresh, so the views it uses are
    // always those of the current generation, also after a StepEnd that returned kReconfigured.
    Status s = model_.Step(&worker_.state(), at, &loss_);
    if (model_.device_failed()) {
      // Not handed to StepEnd(): a recovery would bring this process back on the failed device.
      // Returning closes this worker's communicators and coordinator connection (as for the
      // other fatal errors below), so the peers' collectives and the coordinator see it gone and
      // the job recovers without it.
      std::fprintf(stderr, "train_mlp: step %lld failed%s: %s; this worker gives up\n",
                   static_cast<long long>(step), DeviceNote(device_).c_str(), s.ToString().c_str());
      return Exit(1);
    }
    if (s.ok()) PadStep(start, flags_.step_time_ms);
    auto action = worker_.StepEnd(s);
    if (!action.ok()) {
      std::fprintf(stderr, "train_mlp: %s\n", action.status().ToString().c_str());
      return Exit(1);
    }
    // StepEnd advances step() only when this step was applied (also when it then paused for a
    // planned change); after a rollback step() is back at the restored commit.
    if (worker_.step() == step + 1) {
      if (logs) log_.Write(step, generation, layout, loss_, begin, begin + flags_.global_batch);
      counted_.Add(step, generation, layout, loss_, begin);
      Report(at, layout);
    }
    if (*action == elastra::StepAction::kLeave) return Exit(0);
    counted_.AfterStepEnd(worker_, logs, generation);
    return Next::kTrain;
  }

  // The coordinator's status, metrics and dashboard show these (rank 0's loss is the job's; the
  // samples are this replica's share of the global batch).
  void Report(const Placement& at, const elastra::Layout& layout) {
    const int64_t dp_rank = at.coords.dp_rank;
    const int64_t share =
        flags_.global_batch * (dp_rank + 1) / layout.dp - flags_.global_batch * dp_rank / layout.dp;
    Status reported = worker_.Report("loss", loss_);
    if (reported.ok()) reported = worker_.ReportSamples(share);
    if (!reported.ok()) {
      std::fprintf(stderr, "train_mlp: %s\n", reported.ToString().c_str());
    }
  }

  const Flags& flags_;
  const int device_;
  elastra::Worker& worker_;
  Model& model_;
  MlpOps& ops_;
  StepLog log_;
  const InjectedFailure inject_;
  CountedSteps counted_;
  double loss_ = 0;
  int64_t stopped_at_ = -1;
  int exit_status_ = 0;
};

int RunElastic(const Flags& flags) {
  auto options = ElasticOptions(flags);
  if (!options.ok()) {
    std::fprintf(stderr, "train_mlp: %s\n", options.status().ToString().c_str());
    return 2;
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
  if (std::optional<int> failed = StartWorker(flags, device, model, *worker)) return *failed;
  ElasticLoop loop(flags, device, options->commit_every, *worker, model, *ops);
  return loop.Run();
}

}  // namespace
}  // namespace train_mlp

int main(int argc, char** argv) {
  train_mlp::Flags flags = train_mlp::ParseFlags(argc, argv);
  return flags.reference ? train_mlp::RunReference(flags) : train_mlp::RunElastic(flags);
}
