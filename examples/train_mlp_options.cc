// train_mlp's settings: see train_mlp_options.h.
#include "examples/train_mlp_options.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace train_mlp {
namespace {

[[noreturn]] void Usage(const char* msg) {
  std::fprintf(stderr,
               "train_mlp: %s\n"
               "usage: train_mlp [--steps N] [--global-batch B] [--hidden H] [--ffn F]\n"
               "                 [--layers L] [--micro-batches M] [--seed S] [--dataset-size N]\n"
               "                 [--lr X] [--log FILE] [--step-time-ms T] [--commit-every K]\n"
               "                 [--checkpoint-dir DIR --checkpoint-every M]\n"
               "                 [--plan [--pin-tp N] [--pin-pp N] [--only-dp]] [--reference]\n"
               "                 [--device cpu|cuda] [--stop-file FILE] [--hold-file FILE]\n"
               "                 [--device-memory-mb N] [--state-mb N]\n",
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

}  // namespace

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
    else if (a == "--stop-file") f.stop_file = value();
    else if (a == "--hold-file") f.hold_file = value();
    else if (a == "--device-memory-mb") f.device_memory_mb = int_value(1);
    else if (a == "--state-mb") f.state_mb = int_value(0);
    else Usage(("unknown flag " + a).c_str());
  }
  if (f.ffn == 0) f.ffn = 2 * f.hidden;
  if (f.hidden > 4096 || f.ffn > 16384 || f.layers > 64 || f.state_mb > 65536) {
    Usage("model too large for this example");
  }
  if (f.cuda && !ELASTRA_TRAIN_MLP_CUDA) {
    std::fprintf(stderr, "train_mlp: --device cuda: this train_mlp was built without CUDA\n");
    std::exit(2);
  }
  return f;
}

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

}  // namespace train_mlp
