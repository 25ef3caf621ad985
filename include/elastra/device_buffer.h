// DeviceBuffer: CUDA device memory owned by one object (cudaMalloc, never managed memory), for the
// shards of a TensorCollection that lives on a GPU and for programs that stage data through it.
// Copies are synchronous (they return once the bytes have arrived). Includes no CUDA header.
//
// In a build without CUDA (ELASTRA_HAVE_CUDA == 0) every call that needs a device returns
// kUnavailable ("this build of Elastra has no CUDA support"); CudaDeviceCount() returns 0.
// Thread-compatible; the free functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "elastra/status.h"

namespace elastra {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Allocates `bytes` bytes on CUDA device `device`, zero-filled. kInvalidArgument for a negative
  // device, kUnavailable when the build has no CUDA or the device does not exist,
  // kResourceExhausted when the device is out of memory. 0 bytes gives an empty buffer on `device`.
  static StatusOr<DeviceBuffer> Allocate(int device, size_t bytes);

  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }

  // Frees the memory (cudaFree); the buffer is empty afterwards.
  void Reset();

  // Copies `bytes` bytes between host memory and [offset, offset + bytes) of this buffer.
  // kInvalidArgument when the range exceeds size(); kInternal with CUDA's message on a CUDA error.
  Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  int device_ = -1;
};

// The number of CUDA devices this process sees; 0 without CUDA, driver or device.
int CudaDeviceCount();
// The total memory of CUDA device `device` in bytes; 0 without CUDA or when it cannot be read.
int64_t CudaDeviceTotalMemory(int device);

// Copies `bytes` bytes from device memory at `device_src` (on CUDA device `device`) to host
// memory at `dst`, synchronously. kInternal with CUDA's message on a CUDA error.
Status CopyDeviceToHost(void* dst, const void* device_src, size_t bytes, int device);

// Page-locks `bytes` of existing host memory at `p` (cudaHostRegister), so that device copies
// to and from it run at full speed and may be asynchronous. kUnavailable without CUDA.
Status PinHostMemory(void* p, size_t bytes);
// Undoes PinHostMemory. No-op for memory that was not pinned.
void UnpinHostMemory(void* p);

}  // namespace elastra
