// train_gpt's command line: train_mlp's flags (--steps, --global-batch, --seed, --log,
// --reference, --step-time-ms, --commit-every, --checkpoint-dir, --checkpoint-every, --stop-file),
// --hold-file, and the model's (--layers, --hidden, --heads, --seq-len, --ffn, --micro-batches,
// --lr, --data).
#pragma once

#include <cstdint>
#include <string>

#include "examples/gpt/gpt_data.h"
#include "examples/gpt/gpt_model.h"

namespace gpt {

struct Flags {
  ModelConfig model;
  int64_t steps = 100;
  std::string data = kDefaultText;
  std::string log;
  double step_time_ms = 0;
  bool reference = false;
  int commit_every = 0;  // 0: the worker's default (ELASTRA_COMMIT_EVERY or 10)
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  std::string stop_file;  // as train_mlp's --stop-file
  // While this file exists the members wait between two steps, all before the same one (agreed
  // as --stop-file is), and rank 0 creates <hold_file>.held: a test can then fail a worker while
  // no member is inside a collective of a step. Asked again once the file is gone.
  std::string hold_file;
  int64_t device_memory_mb = 0;  // as train_mlp's --device-memory-mb
};

// The flags, checked; exits with status 2 (after the usage) on a bad flag or value.
Flags ParseFlags(int argc, char** argv);

}  // namespace gpt
