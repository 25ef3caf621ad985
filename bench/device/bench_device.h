// What bench_device's parts share: the flags, the timing and CUDA-status helpers, and the entry
// point of each measured case (reshard_case.cc, checkpoint_case.cc). bench_device.cc parses the
// flags and prints the JSON line; its top comment says what is measured.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "elastra/status.h"

namespace elastra::bench_device {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;  // keys in the order written: the headline first

constexpr int kNoGpuExit = 77;
constexpr int kWorkers = 2;
constexpr int64_t kCols = 4096;  // every tensor is [rows, 4096] fp32

// The command line (see the top of bench_device.cc).
struct Flags {
  int state_mib = 256;
  int ckpt_mib = 1024;
  int reps = 3;
  std::string dir;
  int rank_timeout_s = 60;
  bool reshard = true;
  bool checkpoint = true;
  // Rank mode.
  int rank = -1;
  int size = kWorkers;
  std::string store;
};

// Seconds since `t`.
inline double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// `bytes` in `seconds` as GB/s (0 when no time passed).
inline double GBps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

// OK, or kInternal with the call and CUDA's message; BENCH_CUDA returns that from the caller.
inline Status CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  return InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

#define BENCH_CUDA(call) ELASTRA_RETURN_IF_ERROR(CudaOk((call), #call))

// The reshard case, from the parent: runs kWorkers ranks of this binary (rank mode) and returns
// rank 0's figures; an error with the ranks' exit codes and messages when one fails.
StatusOr<Json> RunReshard(const Flags& flags);

// Rank mode: one rank of the reshard case. Returns the exit code (kNoGpuExit without a device).
int RankMain(const Flags& flags);

// The checkpoint case in a fresh directory under flags.dir ($TMPDIR or /tmp when empty), removed
// after; its figures.
StatusOr<Json> RunCheckpoint(const Flags& flags);

}  // namespace elastra::bench_device
