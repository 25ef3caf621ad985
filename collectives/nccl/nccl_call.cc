// Checking and waiting on NCCL and CUDA calls: see nccl_call.h.
#include "collectives/nccl/nccl_call.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>

namespace elastra::nccl_internal {
namespace {

std::string NcclMessage(ncclResult_t r, ncclComm_t comm, const char* what) {
  std::string msg = std::string(what) + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
  return msg;
}

}  // namespace

Status CudaStatus(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return OkStatus();
  std::string msg = std::string(what) + ": " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      return UnavailableError(std::move(msg));
    case cudaErrorInvalidDevice:
      return InvalidArgumentError(std::move(msg));
    case cudaErrorMemoryAllocation:
      return ResourceExhaustedError(std::move(msg));
    default:
      return InternalError(std::move(msg));
  }
}

Status NcclStatus(ncclResult_t r, ncclComm_t comm, const char* what) {
  switch (r) {
    case ncclSuccess:
    case ncclInProgress:
      return OkStatus();
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgumentError(NcclMessage(r, comm, what));
    case ncclRemoteError:
    case ncclSystemError:
      return PeerLostError(NcclMessage(r, comm, what));
    default:
      return InternalError(NcclMessage(r, comm, what));
  }
}

Status Poll(ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline,
            const std::atomic<bool>* abort, const char* what,
            const std::atomic<bool>* interrupt) {
  const Clock::time_point start = Clock::now();
  std::chrono::microseconds nap(20);
  while (true) {
    if (abort != nullptr && abort->load(std::memory_order_acquire)) {
      return AbortedError(std::string(what) + ": communicator aborted");
    }
    if (interrupt != nullptr && interrupt->load(std::memory_order_acquire)) {
      return PeerLostError(std::string(what) + ": interrupted (the job is recovering)");
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) return NcclStatus(r, comm, "ncclCommGetAsyncError").WithContext(what);
    bool done = false;
    if (async == ncclSuccess) {
      if (stream == nullptr) {
        done = true;
      } else {
        cudaError_t q = cudaStreamQuery(stream);
        if (q == cudaSuccess) {
          done = true;
        } else if (q != cudaErrorNotReady) {
          return CudaStatus(q, "cudaStreamQuery").WithContext(what);
        }
      }
    } else if (async != ncclInProgress) {
      return PeerLostError(NcclMessage(async, comm, what));
    }
    if (done) return OkStatus();
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return TimedOutError(std::string(what) + ": not done after " +
                           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              now - start).count()) +
                           " ms");
    }
    // Spin (yielding) for the first millisecond: short collectives finish there. Then back off
    // to at most 1 ms between polls so that a hung call costs no CPU.
    if (now - start < std::chrono::milliseconds(1)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
}

}  // namespace elastra::nccl_internal
