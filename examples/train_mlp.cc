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
  if (!flags.stop_file.empty() && worker->world().backend() == elastra::Backend::kNccl) {
    std::fprintf(stderr, "train_mlp: --stop-file needs host collectives, not the nccl backend\n");
    return 2;
  }
  StepLog log(flags.log);
  const InjectedFailure inject = InjectedFailureFromEnvironment();
  double loss = 0;
  int64_t stopped_at = -1;
  // Every rank remembers the last steps it counted. Only rank 0 logs, and a step counts on the
  // ranks that held their lease when its agreement completed: when rank 0 dies or is fenced right
  // after the agreement, the others count the step and rank 0 never logs it. So the worker that
  // becomes rank 0 through a change logs again the steps it remembers below the step its state
  // is at (the same records, or the ones rank 0 missed; the log's reader keeps the last).
  struct Counted {
    int64_t step;
    uint64_t generation;
    elastra::Layout layout;
    double loss;
    int64_t begin;
  };
  std::deque<Counted> counted;
  const size_t remember = 2 * static_cast<size_t>(std::max(1, options->commit_every)) + 2;
  auto became_logger = [&](bool logged, uint64_t before) {
    // Steps a rollback undid are forgotten: they are applied (and remembered) again.
    while (!counted.empty() && counted.back().step >= worker->step()) counted.pop_back();
    if (logged || worker->rank() != 0 || worker->generation() == before) return;
    for (const Counted& c : counted) {
      if (c.step < worker->step()) {
        log.Write(c.step, c.generation, c.layout, c.loss, c.begin, c.begin + flags.global_batch);
      }
    }
  };
  while (worker->step() < flags.steps) {
    if (!flags.stop_file.empty()) {
      // Every member asks at the same point of the same step, also right after a reconfiguration
      // (a joiner's first step), so they all stop together.
      int64_t seen = access(flags.stop_file.c_str(), F_OK) == 0 ? 1 : 0;
      Status agreed = worker->world().Allreduce(&seen, 1, elastra::DataType::kInt64,
                                                elastra::ReduceOp::kMax);
      if (!agreed.ok()) {
        // A failed collective like any other: the worker recovers and the step is retried.
        const bool logged = worker->rank() == 0;
        const uint64_t before = worker->generation();
        auto action = worker->StepEnd(agreed);
        if (!action.ok()) {
          std::fprintf(stderr, "train_mlp: %s\n", action.status().ToString().c_str());
          return 1;
        }
        if (*action == elastra::StepAction::kLeave) return 0;
        became_logger(logged, before);
        continue;
      }
      if (seen != 0) {
        stopped_at = worker->step();
        break;
      }
    }
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
    if (worker->step() == step + 1) {
      if (logs) log.Write(step, generation, layout, loss, begin, begin + flags.global_batch);
      counted.push_back({step, generation, layout, loss, begin});
      if (counted.size() > remember) counted.pop_front();
      // The coordinator's status, metrics and dashboard show these (rank 0's loss is the job's;
      // the samples are this replica's share of the global batch).
      const int64_t dp_rank = at.coords.dp_rank;
      const int64_t share =
          flags.global_batch * (dp_rank + 1) / layout.dp - flags.global_batch * dp_rank / layout.dp;
      Status reported = worker->Report("loss", loss);
      if (reported.ok()) reported = worker->ReportSamples(share);
      if (!reported.ok()) {
        std::fprintf(stderr, "train_mlp: %s\n", reported.ToString().c_str());
      }
    }
    if (*action == elastra::StepAction::kLeave) return 0;
    became_logger(logs, generation);
  }
  if (worker->rank() == 0) {
    std::printf("train_mlp: %lld steps%s, final loss %.6g, generation %llu, %s%s\n",
                static_cast<long long>(stopped_at >= 0 ? stopped_at : flags.steps),
                stopped_at >= 0 ? " (stopped by --stop-file)" : "", loss,
                static_cast<unsigned long long>(worker->generation()),
                worker->layout().ToString().c_str(), DeviceNote(device).c_str());
  }
  worker->Finish();
  return 0;
}

}  // namespace
}  // namespace train_mlp

int main(int argc, char** argv) {
  train_mlp::Flags flags = train_mlp::ParseFlags(argc, argv);
  return flags.reference ? train_mlp::RunReference(flags) : train_mlp::RunElastic(flags);
}
