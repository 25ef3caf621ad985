// CudaOps: train_mlp's arithmetic on one CUDA device. The matrix products are cuBLAS DGEMMs (cuBLAS
// is column-major: a row-major [rows x cols] matrix is its column-major transpose, so each product
// below is written for the transposes); the elementwise parts and the small reductions are the
// kernels in this file. Everything runs in order on one stream that CudaOps creates
// (cudaStreamCreate: a blocking stream, so the legacy default stream that the Worker's synchronous
// copies use waits for it and it waits for them). Scratch memory comes from the device's
// stream-ordered pool (cudaMallocAsync), which keeps freed memory for the next step until
// ReleaseMemory() trims it.
//
// A failed CUDA or cuBLAS call is recorded as the ops' status (the first one wins) and turns every
// later call into a no-op; asynchronous errors of kernels surface at the next call that reports
// them (usually a synchronization or a copy), named as that call.
//
// Sums on the device are grouped differently from CpuOps' loops (cuBLAS blocking, fused
// multiply-adds), so a run differs from the CPU reference by rounding: ~1e-15 relative in the loss.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "examples/mlp_ops.h"

namespace elastra::examples {
namespace {

std::string CudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

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
  CudaOps(int device, cudaStream_t stream, cudaMemPool_t pool, cublasHandle_t cublas)
      : device_(device), stream_(stream), pool_(pool), cublas_(cublas) {}
  ~CudaOps() override {
    // Teardown: nothing to report an error to.
    cudaStreamSynchronize(stream_);
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  bool on_device() const override { return true; }

  void CopyFromHost(const double* src, Span dst) override {
    if (failed() || dst.empty()) return;
    if (Cuda(cudaMemcpyAsync(dst.data, src, dst.size * sizeof(double), cudaMemcpyHostToDevice,
                             stream_),
             "cudaMemcpyAsync (host to device)")) {
      Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
  }
  // On a failure `dst` is left as it was.
  void CopyToHost(Span src, double* dst) override {
    if (failed() || src.empty()) return;
    if (Cuda(cudaMemcpyAsync(dst, src.data, src.size * sizeof(double), cudaMemcpyDeviceToHost,
                             stream_),
             "cudaMemcpyAsync (device to host)")) {
      Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    }
  }
  void Synchronize() override {
    if (failed()) return;
    Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }

  // Row-major y [rows x out] = x [rows x in] w^T is column-major y^T = w x^T: with w seen as the
  // column-major [in x out] matrix w^T, that is op(A) = A^T (m = out, k = in) times x^T (k x n,
  // n = rows).
  void Linear(Span x, Span w, Span b, int64_t rows, int in, int out, Span y) override {
    if (failed() || rows == 0 || out == 0) return;
    double beta = 0;
    if (!b.empty()) {
      if (!Launch("BroadcastRowsKernel", BroadcastRowsKernel, Blocks(y.size), b.data, y.size, out,
                  y.data)) {
        return;
      }
      beta = 1;
    }
    cublasHandle_t h = Cublas();
    if (h == nullptr) return;
    const double one = 1;
    // Leading dimensions of at least 1, as cuBLAS demands even of an empty (in = 0) operand; with
    // k = 0 it computes y = beta y, the bias or zeros as on the CPU.
    const int ldi = std::max(in, 1), ldo = std::max(out, 1);
    Blas(cublasDgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(rows), in, &one, w.data,
                     ldi, x.data, ldi, &beta, y.data, ldo),
         "cublasDgemm (Linear)");
  }

  // gw^T [in x out] += x^T [in x rows] dy [rows x out]: column-major A = x (in x rows, lda in),
  // B = dy^T stored as [out x rows] (ldb out), transposed. dx^T [in x rows] = w^T [in x out]
  // dy^T [out x rows].
  void LinearBackward(Span dy, Span x, Span w, int64_t rows, int in, int out, Span dx, Span gw,
                      Span gb) override {
    if (failed() || rows == 0) return;
    cublasHandle_t h = Cublas();
    if (h == nullptr) return;
    const double one = 1, zero = 0;
    const int n = static_cast<int>(rows);
    const int ldi = std::max(in, 1), ldo = std::max(out, 1);  // see Linear
    if (!Blas(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x.data, ldi, dy.data, ldo,
                          &one, gw.data, ldi),
              "cublasDgemm (LinearBackward, weight gradient)")) {
      return;
    }
    if (!gb.empty()) {
      if (!Launch("ColumnSumsKernel", ColumnSumsKernel, Blocks(out), dy.data, rows, out,
                  gb.data)) {
        return;
      }
    }
    if (!dx.empty()) {
      Blas(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w.data, ldi, dy.data, ldo,
                       &zero, dx.data, ldi),
           "cublasDgemm (LinearBackward, input gradient)");
    }
  }

  void Tanh(Span x) override {
    if (failed() || x.empty()) return;
    Launch("TanhKernel", TanhKernel, Blocks(x.size), x.data, x.size);
  }

  void TanhBackward(Span y, Span grad) override {
    if (failed() || grad.empty()) return;
    Launch("TanhBackwardKernel", TanhBackwardKernel, Blocks(grad.size), y.data, grad.data,
           grad.size);
  }

  void AddResidual(Span x, Span b, int64_t rows, int cols, Span y) override {
    const size_t n = static_cast<size_t>(rows) * cols;
    if (failed() || n == 0) return;
    Launch("AddResidualKernel", AddResidualKernel, Blocks(n), x.data, b.data, n, cols, y.data);
  }

  void Add(Span x, Span y) override {
    if (failed() || y.empty()) return;
    Launch("AddKernel", AddKernel, Blocks(y.size), x.data, y.data, y.size);
  }

  void SquaredError(Span target, Span out, Span loss) override {
    if (failed() || out.empty()) return;
    // One block: its fixed reduction tree makes the loss the same every run.
    Launch("SquaredErrorKernel", SquaredErrorKernel, 1, target.data, out.data, out.size, loss.data);
  }

  void Divide(Span x, double divisor) override {
    if (failed() || x.empty()) return;
    Launch("DivideKernel", DivideKernel, Blocks(x.size), x.data, x.size, divisor);
  }

  void Adam(Span g, const AdamStep& step, Span p, Span m, Span v) override {
    if (failed() || p.empty()) return;
    Launch("AdamKernel", AdamKernel, Blocks(p.size), g.data, step, p.data, m.data, v.data, p.size);
  }

  // Waits for the stream (the frees queued on it must be done before the pool can give their
  // memory back), drops the cuBLAS handle with its workspace (Cublas() makes a new one when a
  // product is next needed), and trims the pool to nothing.
  size_t ReleaseMemory() override {
    if (failed()) return 0;
    if (!Cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize")) return 0;
    if (cublas_ != nullptr) {
      cublasHandle_t h = std::exchange(cublas_, nullptr);
      if (!Blas(cublasDestroy(h), "cublasDestroy")) return 0;
    }
    uint64_t before = 0, after = 0;
    if (!Cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &before),
              "cudaMemPoolGetAttribute") ||
        !Cuda(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo") ||
        !Cuda(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &after),
              "cudaMemPoolGetAttribute")) {
      return 0;
    }
    return before > after ? static_cast<size_t>(before - after) : 0;
  }

 protected:
  double* AllocateRaw(size_t n) override {
    if (failed()) return nullptr;
    void* p = nullptr;
    if (!Cuda(cudaMallocAsync(&p, n * sizeof(double), stream_),
              ("cudaMallocAsync(" + std::to_string(n * sizeof(double)) + " bytes)").c_str())) {
      return nullptr;
    }
    if (!Cuda(cudaMemsetAsync(p, 0, n * sizeof(double), stream_), "cudaMemsetAsync")) {
      cudaFreeAsync(p, stream_);
      return nullptr;
    }
    return static_cast<double*>(p);
  }
  // Also after a failure: the pool takes its memory back (an error here is not reported again).
  void Free(double* p) override {
    cudaError_t e = cudaFreeAsync(p, stream_);
    if (!failed()) Cuda(e, "cudaFreeAsync");
  }

 private:
  bool failed() const { return !status().ok(); }

  // True when `e` is cudaSuccess; otherwise records the first failure, naming `call`.
  bool Cuda(cudaError_t e, const char* call) {
    if (e == cudaSuccess) return true;
    if (!failed()) {
      std::string msg = std::string(call) + " on CUDA device " + std::to_string(device_) +
                        ": " + CudaMessage(e);
      Fail(e == cudaErrorMemoryAllocation ? ResourceExhaustedError(std::move(msg))
                                          : InternalError(std::move(msg)));
    }
    return false;
  }
  bool Blas(cublasStatus_t s, const char* call) {
    if (s == CUBLAS_STATUS_SUCCESS) return true;
    if (!failed()) {
      std::string msg = std::string(call) + " on CUDA device " + std::to_string(device_) + ": " +
                        cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")";
      Fail(s == CUBLAS_STATUS_ALLOC_FAILED ? ResourceExhaustedError(std::move(msg))
                                           : InternalError(std::move(msg)));
    }
    return false;
  }
  // Launches `kernel` with `blocks` blocks (> 0) of kThreads on our stream; false (and failed) on
  // a bad configuration or an earlier sticky error. A stale error of some other call on this
  // thread is cleared first, so that it is not taken for this launch's.
  template <typename... Params, typename... Args>
  bool Launch(const char* name, void (*kernel)(Params...), unsigned blocks, Args... args) {
    cudaGetLastError();
    kernel<<<blocks, kThreads, 0, stream_>>>(args...);
    return Cuda(cudaGetLastError(), (std::string("launch of ") + name).c_str());
  }

  // The cuBLAS handle on our stream, made again after ReleaseMemory(); null (and failed) when it
  // cannot be.
  cublasHandle_t Cublas() {
    if (cublas_ != nullptr) return cublas_;
    cublasHandle_t h = nullptr;
    if (!Blas(cublasCreate(&h), "cublasCreate")) return nullptr;
    if (!Blas(cublasSetStream(h, stream_), "cublasSetStream")) {
      cublasDestroy(h);
      return nullptr;
    }
    cublas_ = h;
    return cublas_;
  }

  const int device_;
  cudaStream_t stream_;
  cudaMemPool_t pool_;
  cublasHandle_t cublas_;  // null after ReleaseMemory() until the next product
};

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
  // Keep freed scratch memory in the pool that cudaMallocAsync draws from across the
  // synchronizations of a step (ReleaseMemory() gives it back).
  cudaMemPool_t pool;
  if ((e = cudaDeviceGetMemPool(&pool, device)) != cudaSuccess) {
    return InternalError("cudaDeviceGetMemPool: " + CudaMessage(e));
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
  std::unique_ptr<MlpOps> ops = std::make_unique<CudaOps>(device, stream, pool, cublas);
  return ops;
}

}  // namespace elastra::examples
