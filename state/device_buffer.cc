// DeviceBuffer over the CUDA runtime; see include/elastra/device_buffer.h.
#include "elastra/device_buffer.h"

#include <string>
#include <utility>

#include "elastra/config.h"
#include "state/device_copy.h"

#if ELASTRA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace elastra {

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

#if ELASTRA_HAVE_CUDA

namespace {

Status CudaError(cudaError_t e, const std::string& what) {
  return InternalError(what + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

Status SelectDevice(int device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error for later calls
    return UnavailableError(std::string("no CUDA device: ") + cudaGetErrorString(e));
  }
  if (device >= count) {
    return UnavailableError("CUDA device " + std::to_string(device) + " does not exist (" +
                            std::to_string(count) + " visible)");
  }
  e = cudaSetDevice(device);
  if (e != cudaSuccess) return CudaError(e, "cudaSetDevice(" + std::to_string(device) + ")");
  return OkStatus();
}

// kInvalidArgument unless [offset, offset + bytes) lies in a buffer of `size` bytes; `where` is
// "into" or "out of".
Status CheckCopyRange(size_t bytes, size_t offset, size_t size, const char* where) {
  if (offset <= size && bytes <= size - offset) return OkStatus();
  return InvalidArgumentError("copy of " + std::to_string(bytes) + " bytes at " +
                              std::to_string(offset) + " " + where + " a device buffer of " +
                              std::to_string(size));
}

}  // namespace

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int device, size_t bytes) {
  if (device < 0) return InvalidArgumentError("device " + std::to_string(device) + " is negative");
  ELASTRA_RETURN_IF_ERROR(SelectDevice(device));
  DeviceBuffer b;
  b.device_ = device;
  if (bytes == 0) return b;
  cudaError_t e = cudaMalloc(&b.data_, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    b.data_ = nullptr;
    return ResourceExhaustedError("device " + std::to_string(device) + " is out of memory for " +
                                  std::to_string(bytes) + " bytes");
  }
  if (e != cudaSuccess) {
    b.data_ = nullptr;
    return CudaError(e, "cudaMalloc(" + std::to_string(bytes) + ")");
  }
  b.size_ = bytes;
  // cudaMemset returns before the memset ran, on the default stream, which the non-blocking
  // streams of the copier and of NCCL do not wait for: a later copy into the buffer could be
  // overwritten with zeros. Wait for it here.
  e = cudaMemset(b.data_, 0, bytes);
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) return CudaError(e, "cudaMemset");
  return b;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) {
    cudaSetDevice(device_);
    cudaFree(data_);  // an error here (a dead context) leaves nothing we could do
  }
  data_ = nullptr;
  size_ = 0;
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  ELASTRA_RETURN_IF_ERROR(CheckCopyRange(bytes, offset, size_, "into"));
  if (bytes == 0) return OkStatus();
  ELASTRA_RETURN_IF_ERROR(SelectDevice(device_));
  cudaError_t e =
      cudaMemcpy(static_cast<char*>(data_) + offset, src, bytes, cudaMemcpyHostToDevice);
  // From pageable memory cudaMemcpy returns once the bytes are staged, before the DMA into the
  // buffer is done; work on other (non-blocking) streams is not ordered after it.
  if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy host to device");
  return OkStatus();
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  ELASTRA_RETURN_IF_ERROR(CheckCopyRange(bytes, offset, size_, "out of"));
  if (bytes == 0) return OkStatus();
  ELASTRA_RETURN_IF_ERROR(SelectDevice(device_));
  cudaError_t e =
      cudaMemcpy(dst, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy device to host");
  return OkStatus();
}

Status CopyDeviceToHost(void* dst, const void* device_src, size_t bytes, int device) {
  if (bytes == 0) return OkStatus();
  ELASTRA_RETURN_IF_ERROR(SelectDevice(device));
  cudaError_t e = cudaMemcpy(dst, device_src, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpy device to host");
  return OkStatus();
}

int64_t CudaDeviceTotalMemory(int device) {
  cudaDeviceProp prop{};
  if (device < 0 || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return static_cast<int64_t>(prop.totalGlobalMem);
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Status PinHostMemory(void* p, size_t bytes) {
  if (p == nullptr || bytes == 0) return OkStatus();
  if (CudaDeviceCount() == 0) return UnavailableError("no CUDA device to pin host memory for");
  cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return CudaError(e, "cudaHostRegister(" + std::to_string(bytes) + ")");
  }
  return OkStatus();
}

void UnpinHostMemory(void* p) {
  if (p == nullptr) return;
  if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();  // was not pinned
}

StatusOr<std::unique_ptr<DeviceCopier>> DeviceCopier::Create(int device) {
  if (device < 0) return InvalidArgumentError("device " + std::to_string(device) + " is negative");
  ELASTRA_RETURN_IF_ERROR(SelectDevice(device));
  cudaStream_t stream = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaError(e, "cudaStreamCreate");
  return std::unique_ptr<DeviceCopier>(new DeviceCopier(device, stream));
}

DeviceCopier::~DeviceCopier() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Status DeviceCopier::Copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return OkStatus();
  cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) return CudaError(e, "cudaMemcpyAsync device to device");
  return OkStatus();
}

Status DeviceCopier::Wait() {
  cudaError_t e = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (e != cudaSuccess) return CudaError(e, "waiting for device copies");
  return OkStatus();
}

#else  // !ELASTRA_HAVE_CUDA

namespace {
Status NoCuda() { return UnavailableError("this build of Elastra has no CUDA support"); }
}  // namespace

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int device, size_t) {
  if (device < 0) return InvalidArgumentError("device " + std::to_string(device) + " is negative");
  return NoCuda();
}
void DeviceBuffer::Reset() {
  data_ = nullptr;
  size_ = 0;
}
Status DeviceBuffer::CopyFromHost(const void*, size_t, size_t) { return NoCuda(); }
Status DeviceBuffer::CopyToHost(void*, size_t, size_t) const { return NoCuda(); }
Status CopyDeviceToHost(void*, const void*, size_t, int) { return NoCuda(); }
int CudaDeviceCount() { return 0; }
int64_t CudaDeviceTotalMemory(int) { return 0; }
Status PinHostMemory(void*, size_t) { return NoCuda(); }
void UnpinHostMemory(void*) {}
StatusOr<std::unique_ptr<DeviceCopier>> DeviceCopier::Create(int) { return NoCuda(); }
DeviceCopier::~DeviceCopier() = default;
Status DeviceCopier::Copy(void*, const void*, size_t) { return NoCuda(); }
Status DeviceCopier::Wait() { return NoCuda(); }

#endif  // ELASTRA_HAVE_CUDA

}  // namespace elastra
