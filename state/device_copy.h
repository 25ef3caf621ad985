// DeviceCopier: copies within one CUDA device's memory, queued in order on a stream of its own,
// and a wait for them. The reshard executor packs and unpacks device shards with it. Internal to
// the worker libraries; includes no CUDA header. Thread-compatible.
#pragma once

#include <cstddef>
#include <memory>

#include "elastra/status.h"

namespace elastra {

class DeviceCopier {
 public:
  // kUnavailable without CUDA or without the device; kInternal when no stream can be created.
  static StatusOr<std::unique_ptr<DeviceCopier>> Create(int device);
  ~DeviceCopier();
  DeviceCopier(const DeviceCopier&) = delete;
  DeviceCopier& operator=(const DeviceCopier&) = delete;

  int device() const { return device_; }
  // Queues a copy of `bytes` bytes between two device buffers of this device.
  Status Copy(void* dst, const void* src, size_t bytes);
  // Waits until every queued copy finished; the error of a failed one.
  Status Wait();

 private:
  DeviceCopier(int device, void* stream) : device_(device), stream_(stream) {}
  int device_;
  void* stream_;  // cudaStream_t
};

}  // namespace elastra
