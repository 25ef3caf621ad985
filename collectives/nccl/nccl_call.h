// Checking and waiting on NCCL and CUDA calls, shared by the NCCL backend's files
// (nccl_communicator.cc: the communicator's lifecycle; nccl_collectives.cc: its collectives and
// point-to-point calls). Includes the CUDA and NCCL headers: never include it from a header that
// users of the backend see. Thread-safe.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>

#include "elastra/status.h"

namespace elastra::nccl_internal {

using Clock = std::chrono::steady_clock;

// CUDA failures: a missing device is kUnavailable, no memory kResourceExhausted, the rest kInternal.
Status CudaStatus(cudaError_t err, const char* what);

// The status of an NCCL call's immediate return code (nccl-tests' NCCLCHECK, returning Status).
// ncclInProgress is not an error: the caller polls.
Status NcclStatus(ncclResult_t r, ncclComm_t comm, const char* what);

// Waits, without ever blocking inside NCCL or CUDA, until `comm` is out of ncclInProgress and (when
// `stream` is given) the stream has drained. kPeerLost on an asynchronous NCCL error, kTimedOut at
// `deadline`, kAborted as soon as `*abort` is set.
Status Poll(ncclComm_t comm, cudaStream_t stream, Clock::time_point deadline,
            const std::atomic<bool>* abort, const char* what,
            const std::atomic<bool>* interrupt = nullptr);

}  // namespace elastra::nccl_internal

#define ELASTRA_CUDA_RETURN(expr) \
  ELASTRA_RETURN_IF_ERROR(::elastra::nccl_internal::CudaStatus((expr), #expr))
#define ELASTRA_NCCL_RETURN(expr, comm) \
  ELASTRA_RETURN_IF_ERROR(::elastra::nccl_internal::NcclStatus((expr), (comm), #expr))
