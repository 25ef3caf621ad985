// MlpOps: the arithmetic of train_mlp behind one small interface, so that the model above it (the
// pipeline schedule, which collectives run when, the data cursor, logging) is one piece of code
// for the CPU and for a CUDA device. CpuOps runs the loops train_mlp always had, on host memory;
// CudaOps (mlp_ops_cuda.cu, built with CUDA) runs cuBLAS DGEMMs and small kernels on device
// memory, in order on one CUDA stream of its own.
//
// Every Span handed to an MlpOps lives in that ops' memory (host for CpuOps, device for CudaOps):
// an Array it allocated, a TensorCollection::View (CPU) or DeviceView (CUDA), never a mix.
// Matrices are row-major, [rows x cols], float64. Calls only queue work: results are visible to
// the host after CopyToHost or Synchronize, and to other CUDA streams (NCCL) after Synchronize.
//
// Errors: the calls return nothing; a CUDA or cuBLAS call that fails puts the ops in a failed
// state (status() says which call and why) and every later call returns at once without doing
// anything, so a step runs to its end and reports the first error there. CpuOps never fails.
//
// OpsCollectives carries the model's collectives: a Communicator of the "nccl" backend takes
// device buffers, the others (gloo, mpi) host buffers, so device memory goes through a host copy
// for them.
//
// Thread-compatible: one MlpOps per training thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "elastra/communicator.h"
#include "elastra/status.h"

namespace elastra::examples {

// `size` doubles at `data` in one MlpOps' memory. Not owned.
struct Span {
  double* data = nullptr;
  size_t size = 0;

  bool empty() const { return size == 0; }
  Span sub(size_t offset, size_t count) const { return Span{data + offset, count}; }
};

class MlpOps;

// Memory from MlpOps::Allocate, returned to it on destruction; the MlpOps must outlive it.
class Array {
 public:
  Array() = default;
  ~Array();
  Array(Array&& other) noexcept { *this = std::move(other); }
  Array& operator=(Array&& other) noexcept;
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  Span span() const { return Span{data_, size_}; }
  size_t size() const { return size_; }

 private:
  friend class MlpOps;
  Array(MlpOps* ops, double* data, size_t size) : ops_(ops), data_(data), size_(size) {}

  MlpOps* ops_ = nullptr;
  double* data_ = nullptr;
  size_t size_ = 0;
};

// Adam's constants for one step t: c1 = 1 - b1^t, c2 = 1 - b2^t.
struct AdamStep {
  double lr = 0, b1 = 0, b2 = 0, eps = 0, c1 = 1, c2 = 1;
};

class MlpOps {
 public:
  virtual ~MlpOps() = default;

  // True when Spans are CUDA device memory.
  virtual bool on_device() const = 0;

  // `n` zeros. On the CPU a failed allocation aborts (like operator new); on a device it fails
  // the ops (status()) and the Array holds no memory.
  Array Allocate(size_t n);

  // OK, or the first failed CUDA or cuBLAS call (kResourceExhausted for out of memory, kInternal
  // otherwise), named with CUDA's message. It stays: the device's work of the step is lost, and a
  // CUDA error can leave the context unusable, so the program gives up this process.
  const Status& status() const { return status_; }
  // Test hook (train_mlp's ELASTRA_TEST_FAIL_OPS): fails the ops with `s` as a CUDA error would.
  // CpuOps go on computing, but OpsCollectives refuse to run, as for a failed device.
  void FailForTest(Status s) { Fail(std::move(s)); }

  // Gives memory the ops keep for reuse back: waits for the queue, then returns the device pool's
  // unused memory and the cuBLAS workspace to the device (a parked worker). The ops stay usable;
  // later calls take memory from the device again. Returns the pool bytes given back (0 on the
  // CPU).
  virtual size_t ReleaseMemory() { return 0; }

  // Copies between host memory and `span`. Both return once `src` may be reused; CopyToHost
  // waits for the work queued before it.
  virtual void CopyFromHost(const double* src, Span dst) = 0;
  virtual void CopyToHost(Span src, double* dst) = 0;
  // Waits until everything queued so far is done.
  virtual void Synchronize() = 0;

  // y[r][o] = b[o] + sum_i w[o][i] x[r][i]: x [rows x in], w [out x in], b [out] or empty (0),
  // y [rows x out].
  virtual void Linear(Span x, Span w, Span b, int64_t rows, int in, int out, Span y) = 0;
  // The backward of Linear for dy [rows x out]: gw += dy^T x, gb[o] += sum_r dy[r][o] (unless gb
  // is empty), dx = dy w [rows x in] (unless dx is empty).
  virtual void LinearBackward(Span dy, Span x, Span w, int64_t rows, int in, int out, Span dx,
                              Span gw, Span gb) = 0;
  // x = tanh(x).
  virtual void Tanh(Span x) = 0;
  // grad *= 1 - y^2, where y = tanh(z) and grad = d loss / d y: afterwards d loss / d z.
  virtual void TanhBackward(Span y, Span grad) = 0;
  // y[r][c] = x[r][c] + (y[r][c] + b[c]): a residual block's output, x [rows x cols], b [cols].
  virtual void AddResidual(Span x, Span b, int64_t rows, int cols, Span y) = 0;
  // y += x.
  virtual void Add(Span x, Span y) = 0;
  // out -= target, then loss[0] += sum 0.5 * out^2 (in element order on the CPU).
  virtual void SquaredError(Span target, Span out, Span loss) = 0;
  // x /= divisor.
  virtual void Divide(Span x, double divisor) = 0;
  // One Adam update of the parameters p with gradient g and moments m, v.
  virtual void Adam(Span g, const AdamStep& step, Span p, Span m, Span v) = 0;

 protected:
  friend class Array;
  // `n` > 0 zero-filled elements; Free takes back what Allocate gave.
  virtual double* AllocateRaw(size_t n) = 0;
  virtual void Free(double* p) = 0;

  // Records `s` as status() unless a failure is recorded already.
  void Fail(Status s) {
    if (status_.ok()) status_ = std::move(s);
  }

 private:
  Status status_;
};

// The CPU arithmetic: loops over host memory, results independent of the build.
std::unique_ptr<MlpOps> MakeCpuOps();

// The CUDA arithmetic on device `device` (mlp_ops_cuda.cu; only in a build with
// ELASTRA_TRAIN_MLP_CUDA). Selects the device for the calling thread. kUnavailable when CUDA has
// no such device, kInternal when cuBLAS or the stream cannot be set up. Errors after that fail
// the ops (MlpOps::status()).
StatusOr<std::unique_ptr<MlpOps>> MakeCudaOps(int device);

// The model's collectives on `ops`' memory. With a device buffer and a host backend each call is
// a synchronous round trip through host memory; with the nccl backend the ops' queue is drained
// first (NCCL runs on its own stream) and the buffer is passed as it is. kFailedPrecondition for a
// host buffer on the nccl backend; the ops' status when they have failed (nothing is sent: a
// failed device's buffers hold no trustworthy values); otherwise the communicator's status.
class OpsCollectives {
 public:
  explicit OpsCollectives(MlpOps* ops) : ops_(ops) {}

  Status AllreduceSum(Communicator& comm, Span x);
  Status Send(Communicator& comm, Span x, int peer, uint32_t tag);
  Status Recv(Communicator& comm, Span x, int peer, uint32_t tag);

  // Frees the host copy (a parked worker).
  void ReleaseMemory();

 private:
  // The buffer to hand to `comm` for `x`: x itself or the host copy (filled from x when
  // `copy_in`), or null with *status set.
  double* Stage(const Communicator& comm, Span x, bool copy_in, Status* status);
  // Copies the host copy back into x when Stage made one.
  void Unstage(const double* staged, Span x);

  MlpOps* ops_;
  std::vector<double> host_;
};

}  // namespace elastra::examples
