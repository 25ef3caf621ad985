// train_gpt: a small GPT in LibTorch (gpt_model.h) trained under Elastra with data, pipeline and
// tensor parallelism, bf16 parameters with fp32 master weights and AdamW state, on an English
// text as bytes (gpt_data.h). The global batch is fixed and the data cursor is in the worker's
// state, so a run that is resized, changes layout or loses a worker follows --reference up to
// float32 reduction order, and sees every window of the text exactly once per epoch.
//
//   elastra run --nproc 2 -- train_gpt --steps 200 --log run.jsonl
//   elastra resize --workers 4 --layout dp=1,pp=2,tp=2 --wait
//   train_gpt --reference --steps 200 --log ref.jsonl
//
// The --log lines are train_mlp's (examples/train_mlp_log.h), with sample positions counted in
// windows of --seq-len + 1 bytes; compare_logs checks a run against its reference.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "elastra/worker.h"
#include "examples/gpt/gpt_data.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/train_gpt_options.h"
#include "examples/train_mlp_log.h"

namespace gpt {
namespace {

using elastra::Status;

int Fail(const Status& s, int code = 1) {
  std::fprintf(stderr, "train_gpt: %s\n", s.ToString().c_str());
  return code;
}

void PadStep(std::chrono::steady_clock::time_point start, double step_time_ms) {
  if (step_time_ms <= 0) return;
  std::this_thread::sleep_until(
      start + std::chrono::microseconds(static_cast<int64_t>(step_time_ms * 1000)));
}

int64_t Exists(const std::string& path) {
  return !path.empty() && access(path.c_str(), F_OK) == 0 ? 1 : 0;
}

// --hold-file: waits between two steps while `path` exists; `acknowledge` (rank 0) says so.
void Hold(const std::string& path, bool acknowledge) {
  if (acknowledge) std::ofstream(path + ".held").put('\n');
  while (Exists(path) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

int RunReference(const Flags& flags, Corpus* corpus) {
  elastra::TensorCollection state;
  if (Status s = state.AddScalar(elastra::kStepScalarName, 0); !s.ok()) return Fail(s);
  auto trainer = GptTrainer::Create(flags.model, corpus, &state);
  if (!trainer.ok()) return Fail(trainer.status(), 2);
  if (Status s = (*trainer)->Bind(0); !s.ok()) return Fail(s);
  train_mlp::StepLog log(flags.log);
  Placement at;
  double loss = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    const int64_t begin = (*trainer)->cursor();
    if (Status s = (*trainer)->Step(at, &loss); !s.ok()) return Fail(s);
    state.SetScalar(elastra::kStepScalarName, step + 1);
    log.Write(step, 0, elastra::Layout{}, loss, begin, begin + flags.model.global_batch);
  }
  std::printf("reference: %lld steps, final loss %.6g, %lld parameters, unigram entropy %.4f\n",
              static_cast<long long>(flags.steps), loss,
              static_cast<long long>((*trainer)->parameters()), corpus->UnigramEntropy());
  return 0;
}

int RunElastic(const Flags& flags, Corpus* corpus) {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) return Fail(options.status(), 2);
  if (flags.commit_every > 0) options->commit_every = flags.commit_every;
  if (flags.device_memory_mb > 0) options->device_memory_bytes = flags.device_memory_mb << 20;
  if (!flags.checkpoint_dir.empty()) {
    options->checkpoint_dir = flags.checkpoint_dir;
    options->checkpoint_every = flags.checkpoint_every > 0 ? flags.checkpoint_every : 50;
  }
  auto worker_or = elastra::Worker::Create(*options);
  if (!worker_or.ok()) return Fail(worker_or.status());
  auto worker = std::move(worker_or).value();
  auto trainer_or = GptTrainer::Create(flags.model, corpus, &worker->state());
  if (!trainer_or.ok()) return Fail(trainer_or.status(), 2);
  GptTrainer& trainer = **trainer_or;
  if (Status s = worker->Start(); !s.ok()) {
    if (!worker->dismissed()) return Fail(s);
    std::printf("train_gpt: %s\n", s.message().c_str());  // a standby the job did not need
    std::fflush(stdout);
    return 0;
  }
  if (worker->world().backend() == elastra::Backend::kNccl) {
    return Fail(elastra::InvalidArgumentError("train_gpt trains on the CPU: ELASTRA_BACKEND=gloo"),
                2);
  }
  // The views over the shards: now, and after every reconfiguration.
  if (Status s = trainer.Bind(worker->step()); !s.ok()) return Fail(s);
  train_mlp::StepLog log(flags.log);
  double loss = 0;
  int64_t stopped_at = -1;
  auto end_step = [&](const Status& s) -> int {  // 0: go on, 1: leave, -1: error
    auto action = worker->StepEnd(s);
    if (!action.ok()) {
      Fail(action.status());
      return -1;
    }
    if (*action == elastra::StepAction::kLeave) return 1;
    if (*action == elastra::StepAction::kReconfigured) {
      if (Status b = trainer.Bind(worker->step()); !b.ok()) {
        Fail(b);
        return -1;
      }
    }
    return 0;
  };
  while (worker->step() < flags.steps) {
    if (!flags.stop_file.empty() || !flags.hold_file.empty()) {
      // As train_mlp: every member asks at the same point of the same step, so all stop (or
      // hold) together.
      int64_t seen[2] = {Exists(flags.stop_file), Exists(flags.hold_file)};
      Status agreed =
          worker->world().Allreduce(seen, 2, elastra::DataType::kInt64, elastra::ReduceOp::kMax);
      if (!agreed.ok()) {
        const int r = end_step(agreed);
        if (r != 0) return r < 0 ? 1 : 0;
        continue;
      }
      if (seen[0] != 0) {
        stopped_at = worker->step();
        break;
      }
      if (seen[1] != 0) {
        Hold(flags.hold_file, worker->rank() == 0);
        continue;  // asked again: a member may have failed meanwhile
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const int64_t step = worker->step();
    const uint64_t generation = worker->generation();
    const elastra::Layout layout = worker->layout();
    const bool logs = worker->rank() == 0;
    const int64_t begin = trainer.cursor();
    Placement at;
    at.layout = layout;
    at.coords = worker->coordinates();
    at.dp = &worker->dp_group();
    at.pp = &worker->pp_group();
    at.tp = &worker->tp_group();
    at.world = &worker->world();
    Status s = trainer.Step(at, &loss);
    if (s.code() == elastra::StatusCode::kInvalidArgument) return Fail(s, 2);  // a bad layout
    if (s.ok()) PadStep(start, flags.step_time_ms);
    const int r = end_step(s);
    if (r < 0) return 1;
    // StepEnd advances step() only when this step was applied.
    if (logs && worker->step() == step + 1) {
      log.Write(step, generation, layout, loss, begin, begin + flags.model.global_batch);
    }
    if (r == 1) return 0;
  }
  if (worker->rank() == 0) {
    std::printf("train_gpt: %lld steps%s, final loss %.6g, generation %llu, %s\n",
                static_cast<long long>(stopped_at >= 0 ? stopped_at : flags.steps),
                stopped_at >= 0 ? " (stopped by --stop-file)" : "", loss,
                static_cast<unsigned long long>(worker->generation()),
                worker->layout().ToString().c_str());
  }
  worker->Finish();
  return 0;
}

}  // namespace
}  // namespace gpt

int main(int argc, char** argv) {
  gpt::Flags flags = gpt::ParseFlags(argc, argv);
  auto corpus = gpt::Corpus::Load(flags.data, flags.model.seq_len, flags.model.seed);
  if (!corpus.ok()) return gpt::Fail(corpus.status(), 2);
  return flags.reference ? gpt::RunReference(flags, &*corpus) : gpt::RunElastic(flags, &*corpus);
}
