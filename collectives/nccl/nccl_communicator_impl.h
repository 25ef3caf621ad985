// NcclCommunicator::Impl: the NCCL and CUDA state behind a communicator, shared by the backend's
// files (nccl_communicator.cc: init, split, shrink, interrupt, abort and release;
// nccl_collectives.cc: the collectives and point-to-point calls). Includes the CUDA and NCCL
// headers: never include it from a header that users of the backend see.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_interrupt.h"
#include "elastra/status.h"

namespace elastra {

struct NcclCommunicator::Impl {
  int rank = 0;
  int size = 0;
  int device = 0;
  Communicator::Timeout timeout{0};
  Communicator::Timeout connect_timeout{0};
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // 8 bytes of device memory for Barrier

  // Guards `comm` (its lifetime), `in_call` and `broken`. Never held while polling, so that
  // Abort() from another thread only waits for bookkeeping, not for NCCL.
  mutable std::mutex mu;
  ncclComm_t comm = nullptr;
  bool in_call = false;
  Status broken;  // OK while usable
  std::atomic<bool> abort_requested{false};
  std::atomic<bool> interrupt_requested{false};  // Interrupt(): broken, handle kept
  bool revoke_issued = false;  // ncclCommRevoke was called on `comm` (never twice)
  // Where ncclCommSplit/ncclCommShrink store the new handle. On a non-blocking communicator they
  // return ncclInProgress with it still null; NCCL's thread stores it when the collective part is
  // over (before the parent leaves ncclInProgress). It lives here, not on the caller's stack, so
  // that a split abandoned at its deadline writes into memory that still exists; the handle is
  // aborted with this communicator.
  ncclComm_t pending_child = nullptr;

  ~Impl();

  // Takes ownership of an initialized `c`: creates the stream and scratch buffer.
  static StatusOr<std::unique_ptr<Impl>> Wrap(ncclComm_t c, int device, Communicator::Timeout t,
                                               Communicator::Timeout ct);

  // Marks the owner as inside a call. `allow_broken`: Shrink may run on a broken communicator.
  Status BeginCall(bool allow_broken);
  // Leaves the call; records `s` as the reason the communicator is broken (except for
  // kInvalidArgument) and releases the NCCL handle when an abort was asked for.
  Status EndCall(Status s);
  // With `mu` held.
  void AbortLocked(const std::string& why);

  // Validates, enqueues with `enqueue(comm, stream)` and polls until done or `timeout`. Defined in
  // nccl_collectives.cc, whose calls all go through it.
  template <typename F>
  Status Run(const char* what, Communicator::Timeout timeout, F&& enqueue);

  // Split/Shrink, after the call returned `r` into `pending_child`: polls the parent until the
  // new communicator is ready (NCCL reports a failed child init on the parent only), then wraps
  // it. `release_parent` (abortive shrink): this communicator is released afterwards.
  StatusOr<std::unique_ptr<NcclCommunicator>> FinishChild(ncclResult_t r, const char* what,
                                                          bool release_parent);
  // With `mu` held, after `comm` was aborted (which joins NCCL's split thread): aborts a child
  // that an abandoned split/shrink left behind.
  void ReleasePendingChildLocked();
  // With `mu` held and no call in flight: breaks the communicator (kPeerLost) and takes one step
  // of NextInterruptStep (nccl_interrupt.h): revoke it, or release it when NCCL reports an error.
  // Returns kReady once NCCL would shrink it; kRelease once `comm` is gone. Never blocks on peers.
  // Without `may_release` a release is left to a later call (kWait): ncclCommAbort frees device
  // memory, and cudaFree waits for every kernel on the device, e.g. one of another communicator
  // that is still spinning until its own interrupt; Interrupt() runs on the worker's I/O thread,
  // which must keep answering the coordinator, so it only flags and revokes.
  InterruptStep InterruptLocked(bool may_release = true);
};

}  // namespace elastra
