// train_gpt's command line: see train_gpt_options.h.
#include "examples/gpt/train_gpt_options.h"

#include <cstdio>
#include <cstdlib>

namespace gpt {
namespace {

[[noreturn]] void Usage(const std::string& msg) {
  std::fprintf(stderr,
               "train_gpt: %s\n"
               "usage: train_gpt [--steps N] [--global-batch B] [--seed S] [--log FILE]\n"
               "                 [--reference] [--step-time-ms T] [--commit-every K]\n"
               "                 [--checkpoint-dir DIR --checkpoint-every M] [--stop-file FILE]\n"
               "                 [--hold-file FILE]\n"
               "                 [--layers L] [--hidden H] [--heads A] [--seq-len T] [--ffn F]\n"
               "                 [--micro-batches M] [--lr X] [--data TEXT_FILE]\n"
               "                 [--device-memory-mb N]\n",
               msg.c_str());
  std::exit(2);
}

bool ParseInt(const char* s, int64_t* out) {
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0') return false;
  *out = v;
  return true;
}

}  // namespace

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) Usage("missing value for " + a);
      return argv[++i];
    };
    auto int_value = [&](int64_t lo, int64_t hi) {
      int64_t v = 0;
      const char* s = value();
      if (!ParseInt(s, &v) || v < lo || v > hi) Usage("bad value for " + a + ": " + s);
      return v;
    };
    ModelConfig& m = f.model;
    if (a == "--steps")
      f.steps = int_value(0, INT64_MAX);
    else if (a == "--global-batch")
      m.global_batch = int_value(1, 1 << 20);
    else if (a == "--seed")
      m.seed = static_cast<uint64_t>(int_value(0, INT64_MAX));
    else if (a == "--log")
      f.log = value();
    else if (a == "--reference")
      f.reference = true;
    else if (a == "--step-time-ms")
      f.step_time_ms = static_cast<double>(int_value(0, 1 << 20));
    else if (a == "--commit-every")
      f.commit_every = static_cast<int>(int_value(1, 1 << 20));
    else if (a == "--checkpoint-dir")
      f.checkpoint_dir = value();
    else if (a == "--checkpoint-every")
      f.checkpoint_every = static_cast<int>(int_value(1, 1 << 20));
    else if (a == "--stop-file")
      f.stop_file = value();
    else if (a == "--hold-file")
      f.hold_file = value();
    else if (a == "--device-memory-mb")
      f.device_memory_mb = int_value(1, int64_t{1} << 30);
    else if (a == "--layers")
      m.layers = static_cast<int>(int_value(1, 64));
    else if (a == "--hidden")
      m.hidden = static_cast<int>(int_value(1, 4096));
    else if (a == "--heads")
      m.heads = static_cast<int>(int_value(1, 256));
    else if (a == "--seq-len")
      m.seq_len = static_cast<int>(int_value(1, 4096));
    else if (a == "--ffn")
      m.ffn = static_cast<int>(int_value(1, 16384));
    else if (a == "--micro-batches")
      m.micro_batches = static_cast<int>(int_value(1, 1024));
    else if (a == "--lr") {
      char* end = nullptr;
      const char* s = value();
      m.lr = std::strtod(s, &end);
      if (end == s || *end != '\0' || !(m.lr > 0)) Usage("bad value for --lr: " + std::string(s));
    } else if (a == "--data")
      f.data = value();
    else
      Usage("unknown flag " + a);
  }
  if (f.model.hidden % f.model.heads != 0) Usage("--hidden must be a multiple of --heads");
  return f;
}

}  // namespace gpt
