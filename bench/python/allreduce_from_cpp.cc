// bench_python's C++ side of `allreduce_vs_cpp`: started by `elastra run --nproc 2`, each worker
// joins with no state, then times `--reps` in-place float32 sum allreduces of `--mib` MiB over
// Worker::world(), after `--warmup` untimed ones. Rank 0 prints one JSON line with the median,
// the same figure that bench_python's Python child prints for w.world.allreduce on a torch tensor.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "elastra/worker.h"

namespace {

struct Flags {
  int mib = 64;
  int reps = 10;
  int warmup = 2;
};

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (value < 0) return false;
    if (name == "--mib") {
      flags->mib = value;
    } else if (name == "--reps") {
      flags->reps = value;
    } else if (name == "--warmup") {
      flags->warmup = value;
    } else {
      return false;
    }
  }
  return argc % 2 == 1 && flags->mib > 0 && flags->reps > 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr, "usage: allreduce_from_cpp [--mib N] [--reps N] [--warmup N]\n");
    return 2;
  }
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "allreduce_from_cpp: %s\n", options.status().ToString().c_str());
    return 1;
  }
  auto worker = elastra::Worker::Create(*options);
  if (!worker.ok()) {
    std::fprintf(stderr, "allreduce_from_cpp: %s\n", worker.status().ToString().c_str());
    return 1;
  }
  if (elastra::Status s = (*worker)->Start(); !s.ok()) {
    std::fprintf(stderr, "allreduce_from_cpp: %s\n", s.ToString().c_str());
    return 1;
  }
  const size_t count = static_cast<size_t>(flags.mib) * (1 << 20) / sizeof(float);
  std::vector<float> data(count, 1.0f);
  elastra::Communicator& world = (*worker)->world();
  std::vector<double> ms;
  for (int i = 0; i < flags.warmup + flags.reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    elastra::Status s = world.Allreduce(data.data(), count, elastra::DataType::kFloat32,
                                        elastra::ReduceOp::kSum);
    const auto end = std::chrono::steady_clock::now();
    if (!s.ok()) {
      std::fprintf(stderr, "allreduce_from_cpp: %s\n", s.ToString().c_str());
      return 1;
    }
    std::fill(data.begin(), data.end(), 1.0f);  // the sums stay finite, as the Python side's
    if (i >= flags.warmup) ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
  }
  std::sort(ms.begin(), ms.end());
  if ((*worker)->rank() == 0) {
    std::printf("{\"allreduce_ms\": %.3f, \"world\": %d, \"mib\": %d}\n", ms[ms.size() / 2],
                world.size(), flags.mib);
    std::fflush(stdout);
  }
  (*worker)->Finish();
  return 0;
}
