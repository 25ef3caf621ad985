// CudaOps: train_mlp's arithmetic on one CUDA device. The matrix products are cuBLAS DGEMMs (cuBLAS
// is column-major: a row-major [rows x cols] matrix is its column-major transpose, so each product
// below is written for the transposes); the elementwise parts and the small reductions are the
// kernels in this file. Everything runs in order on one stream that CudaOps creates
// (cudaStreamCreate: a blocking stream, so the legacy default stream that the Worker's synchronous
// copies use waits for it and it waits for them). Scratch memory comes from the device's
// stream-ordered pool (cudaMallocAsync), which keeps freed memory for the next step.
//
// Sums on the device are grouped differently from CpuOps' loops (cuBLAS blocking, fused
// multiply-adds), so a run differs from the CPU reference by rounding: ~1e-15 relative in the loss.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "examples/mlp_ops.h"

namespace elastra::examples {
namespace {

// A failed CUDA or cuBLAS call after setup: the device or the program is broken, the step cannot
// be completed or undone here, so the worker dies with the reason and the job recovers without it.
void CheckCuda(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "train_mlp: %s:%d: %s: %s (%s)\n", file, line, call, cudaGetErrorName(e),
               cudaGetErrorString(e));
  std::abort();
}
void CheckCublas(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "train_mlp: %s:%d: %s: %s\n", file, line, call, cublasGetStatusString(s));
  std::abort();
}
#define OPS_CUDA(call) CheckCuda((call), #call, __FILE__, __LINE__)
#define OPS_CUBLAS(call) CheckCublas((call), #call, __FILE__, __LINE__)
#define OPS_LAUNCHED() CheckCuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;  // grid-stride loops cover the rest

unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreads - 1) / kThreads));
}

__global__ void BroadcastRowsKernel(const double* b, size_t n, int cols, double* y) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    y[k] = b[k % cols];
  }
}

// gb[c] += sum_r dy[r][c], one thread per column, rows in order.
__global__ void ColumnSumsKernel(const double* dy, int64_t rows, int cols, double* gb) {
  for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += dy[r * cols + c];
    gb[c] += s;
  }
}

__global__ void TanhKernel(double* x, size_t n) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    x[k] = tanh(x[k]);
  }
}

__global__ void TanhBackwardKernel(const double* y, double* grad, size_t n) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    grad[k] *= 1.0 - y[k] * y[k];
  }
}

__global__ void AddResidualKernel(const double* x, const double* b, size_t n, int cols, double* y) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    y[k] = x[k] + (y[k] + b[k % cols]);
  }
}

__global__ void AddKernel(const double* x, double* y, size_t n) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    y[k] += x[k];
  }
}

// One block: out -= target, loss[0] += 0.5 * sum out^2 (a fixed tree, so the same every run).
__global__ void SquaredErrorKernel(const double* target, double* out, size_t n, double* loss) {
  __shared__ double partial[kThreads];
  double s = 0;
  for (size_t k = threadIdx.x; k < n; k += blockDim.x) {
    double d = out[k] - target[k];
    out[k] = d;
    s += 0.5 * d * d;
  }
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) loss[0] += partial[0];
}

__global__ void DivideKernel(double* x, size_t n, double divisor) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    x[k] /= divisor;
  }
}

__global__ void AdamKernel(const double* g, AdamStep s, double* p, double* m, double* v, size_t n) {
  for (size_t k = blockIdx.x * size_t{blockDim.x} + threadIdx.x; k < n;
       k += size_t{gridDim.x} * blockDim.x) {
    double gk = g[k];
    double mk = s.b1 * m[k] + (1 - s.b1) * gk;
    double vk = s.b2 * v[k] + (1 - s.b2) * gk * gk;
    m[k] = mk;
    v[k] = vk;
    p[k] -= s.lr * (mk / s.c1) / (sqrt(vk / s.c2) + s.eps);
  }
}

class CudaOps : public MlpOps {
 public:
  CudaOps(cudaStream_t stream, cublasHandle_t cublas) : stream_(stream), cublas_(cublas) {}
  ~CudaOps() override {
    cudaStreamSynchronize(stream_);  // teardown: nothing to report an error to
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  bool on_device() const override { return true; }

  void CopyFromHost(const double* src, Span dst) override {
    if (dst.empty()) return;
    OPS_CUDA(
        cudaMemcpyAsync(dst.data, src, dst.size * sizeof(double), cudaMemcpyHostToDevice, stream_));
    OPS_CUDA(cudaStreamSynchronize(stream_));
  }
  void CopyToHost(Span src, double* dst) override {
    if (src.empty()) return;
    OPS_CUDA(
        cudaMemcpyAsync(dst, src.data, src.size * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    OPS_CUDA(cudaStreamSynchronize(stream_));
  }
  void Synchronize() override { OPS_CUDA(cudaStreamSynchronize(stream_)); }

  // Row-major y [rows x out] = x [rows x in] w^T is column-major y^T = w x^T: with w seen as the
  // column-major [in x out] matrix w^T, that is op(A) = A^T (m = out, k = in) times x^T (k x n,
  // n = rows).
  void Linear(Span x, Span w, Span b, int64_t rows, int in, int out, Span y) override {
    if (rows == 0 || out == 0) return;
    double beta = 0;
    if (!b.empty()) {
      BroadcastRowsKernel<<<Blocks(y.size), kThreads, 0, stream_>>>(b.data, y.size, out, y.data);
      OPS_LAUNCHED();
      beta = 1;
    }
    const double one = 1;
    OPS_CUBLAS(cublasDgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(rows), in, &one,
                           w.data, in, x.data, in, &beta, y.data, out));
  }

  // gw^T [in x out] += x^T [in x rows] dy [rows x out]: column-major A = x (in x rows, lda in),
  // B = dy^T stored as [out x rows] (ldb out), transposed. dx^T [in x rows] = w^T [in x out]
  // dy^T [out x rows].
  void LinearBackward(Span dy, Span x, Span w, int64_t rows, int in, int out, Span dx, Span gw,
                      Span gb) override {
    if (rows == 0) return;
    const double one = 1, zero = 0;
    const int n = static_cast<int>(rows);
    OPS_CUBLAS(cublasDgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x.data, in, dy.data,
                           out, &one, gw.data, in));
    if (!gb.empty()) {
      ColumnSumsKernel<<<Blocks(out), kThreads, 0, stream_>>>(dy.data, rows, out, gb.data);
      OPS_LAUNCHED();
    }
    if (!dx.empty()) {
      OPS_CUBLAS(cublasDgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w.data, in,
                             dy.data, out, &zero, dx.data, in));
    }
  }

  void Tanh(Span x) override {
    if (x.empty()) return;
    TanhKernel<<<Blocks(x.size), kThreads, 0, stream_>>>(x.data, x.size);
    OPS_LAUNCHED();
  }

  void TanhBackward(Span y, Span grad) override {
    if (grad.empty()) return;
    TanhBackwardKernel<<<Blocks(grad.size), kThreads, 0, stream_>>>(y.data, grad.data, grad.size);
    OPS_LAUNCHED();
  }

  void AddResidual(Span x, Span b, int64_t rows, int cols, Span y) override {
    const size_t n = static_cast<size_t>(rows) * cols;
    if (n == 0) return;
    AddResidualKernel<<<Blocks(n), kThreads, 0, stream_>>>(x.data, b.data, n, cols, y.data);
    OPS_LAUNCHED();
  }

  void Add(Span x, Span y) override {
    if (y.empty()) return;
    AddKernel<<<Blocks(y.size), kThreads, 0, stream_>>>(x.data, y.data, y.size);
    OPS_LAUNCHED();
  }

  void SquaredError(Span target, Span out, Span loss) override {
    if (out.empty()) return;
    SquaredErrorKernel<<<1, kThreads, 0, stream_>>>(target.data, out.data, out.size, loss.data);
    OPS_LAUNCHED();
  }

  void Divide(Span x, double divisor) override {
    if (x.empty()) return;
    DivideKernel<<<Blocks(x.size), kThreads, 0, stream_>>>(x.data, x.size, divisor);
    OPS_LAUNCHED();
  }

  void Adam(Span g, const AdamStep& step, Span p, Span m, Span v) override {
    if (p.empty()) return;
    AdamKernel<<<Blocks(p.size), kThreads, 0, stream_>>>(g.data, step, p.data, m.data, v.data,
                                                         p.size);
    OPS_LAUNCHED();
  }

 protected:
  double* AllocateRaw(size_t n) override {
    void* p = nullptr;
    OPS_CUDA(cudaMallocAsync(&p, n * sizeof(double), stream_));
    OPS_CUDA(cudaMemsetAsync(p, 0, n * sizeof(double), stream_));
    return static_cast<double*>(p);
  }
  void Free(double* p) override { OPS_CUDA(cudaFreeAsync(p, stream_)); }

 private:
  cudaStream_t stream_;
  cublasHandle_t cublas_;
};

std::string CudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace

StatusOr<std::unique_ptr<MlpOps>> MakeCudaOps(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return UnavailableError("no CUDA device: " + CudaMessage(e));
  }
  if (device < 0 || device >= count) {
    return UnavailableError("CUDA device " + std::to_string(device) + " does not exist (" +
                            std::to_string(count) + " visible)");
  }
  if ((e = cudaSetDevice(device)) != cudaSuccess) {
    return InternalError("cudaSetDevice(" + std::to_string(device) + "): " + CudaMessage(e));
  }
  // Keep freed scratch memory in the pool across the synchronizations of a step.
  cudaMemPool_t pool;
  if ((e = cudaDeviceGetDefaultMemPool(&pool, device)) != cudaSuccess) {
    return InternalError("cudaDeviceGetDefaultMemPool: " + CudaMessage(e));
  }
  uint64_t keep = UINT64_MAX;
  if ((e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep)) != cudaSuccess) {
    return InternalError("cudaMemPoolSetAttribute: " + CudaMessage(e));
  }
  cudaStream_t stream = nullptr;
  if ((e = cudaStreamCreate(&stream)) != cudaSuccess) {
    return InternalError("cudaStreamCreate: " + CudaMessage(e));
  }
  cublasHandle_t cublas = nullptr;
  cublasStatus_t s = cublasCreate(&cublas);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(cublas, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    if (cublas != nullptr) cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    return InternalError(std::string("cuBLAS setup: ") + cublasGetStatusString(s));
  }
  std::unique_ptr<MlpOps> ops = std::make_unique<CudaOps>(stream, cublas);
  return ops;
}

}  // namespace elastra::examples
