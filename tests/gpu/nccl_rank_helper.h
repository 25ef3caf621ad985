// The pieces nccl_rank_helper's two files share (nccl_rank_helper.cc: main and the collectives
// and split scenarios; nccl_rank_helper_failures.cc: hang, kill, interrupt and leak): the
// arguments, the check macros, a device buffer.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/nccl/nccl_communicator.h"

namespace elastra {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

struct Args {
  std::string scenario;
  int rank = 0;
  int size = 0;
  std::string dir;
  std::string prefix;
  Ms timeout{3000};
};

// Failed checks so far, and this process's rank (for the messages).
inline int g_failures = 0;
inline int g_rank = -1;

#define EXPECT_TRUE_H(cond, ...)                                                \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "FAIL rank %d %s:%d: %s: ", g_rank, __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                        \
      std::fprintf(stderr, "\n");                                               \
      ++g_failures;                                                             \
    }                                                                           \
  } while (0)

#define REQUIRE_OK(expr)                                                                    \
  do {                                                                                      \
    Status _s = (expr);                                                                     \
    if (!_s.ok()) {                                                                         \
      std::fprintf(stderr, "FAIL rank %d %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #expr, \
                   _s.ToString().c_str());                                                  \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

inline void CudaCheck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "FAIL rank %d: %s: %s\n", g_rank, what, cudaGetErrorString(e));
    std::exit(20);
  }
}
#define CUDA_CHECK(expr) CudaCheck((expr), #expr)

// A device buffer of T, filled and read through host copies.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)));
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return p_; }
  size_t size() const { return n_; }
  void Upload(const std::vector<T>& v) {
    CUDA_CHECK(cudaMemcpy(p_, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    // From pageable memory the copy may still be in flight when cudaMemcpy returns, and the
    // communicator's non-blocking stream is not ordered after the default stream.
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  std::vector<T> Download() const {
    std::vector<T> v(n_);
    CUDA_CHECK(cudaMemcpy(v.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

template <typename T>
constexpr DataType TypeOf() {
  if constexpr (std::is_same_v<T, float>) return DataType::kFloat32;
  if constexpr (std::is_same_v<T, double>) return DataType::kFloat64;
  if constexpr (std::is_same_v<T, int64_t>) return DataType::kInt64;
  return DataType::kUint8;
}

// Sum over the ranks of `value` on `comm`, as int64.
StatusOr<int64_t> SumOf(NcclCommunicator& comm, int64_t value);

// The scenarios of nccl_rank_helper_failures.cc; each returns the process's exit code.
int ScenarioHang(const Args& a, KeyValueStore& store);
int ScenarioKill(const Args& a, KeyValueStore& store);
int ScenarioInterrupt(const Args& a, KeyValueStore& store);
int ScenarioLeak(const Args& a, KeyValueStore& store);

}  // namespace elastra
