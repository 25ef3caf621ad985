// The NCCL backend: GPU collectives on DEVICE buffers, one non-blocking NCCL communicator
// (config.blocking = 0) per generation or group, on its own CUDA stream.
//
// Every call is polled against a deadline (ncclCommGetAsyncError + cudaStreamQuery), so no call
// blocks forever: an asynchronous NCCL error gives kPeerLost, a passed deadline gives kTimedOut,
// Abort() from any thread gives kAborted. After such an error the communicator is broken (later
// calls fail fast with the same code) and is Interrupt()ed at once, so that no kernel of the
// failed call still runs when the caller frees its buffers: NCCL 2.28.7+ revokes it (the hung
// kernel stops; the handle is kept, so that the survivors can Quiesce() it and Shrink() it with
// NCCL_SHRINK_ABORT), or, when NCCL already reports an error (it then refuses every shrink), it is
// released. Without ncclCommRevoke only the handle is kept (the kernel stops at the shrink or the
// release). The destructor releases it with ncclCommAbort.
//
// Growth: NCCL has no grow. A larger world is a fresh CreateNcclCommunicator() with a new key
// prefix (hence a new unique id) on every member, old and new.
//
// This header includes no CUDA or NCCL header. Thread-compatible, except Abort(), which any thread
// may call at any time.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/kv_store.h"
#include "elastra/communicator.h"

// cudaStream_t is CUstream_st*; declared here so that this header needs no CUDA include.
struct CUstream_st;

namespace elastra {

struct NcclOptions {
  KeyValueStore* store = nullptr;  // not owned; must outlive Create()
  std::string prefix;              // unique per generation and group, e.g. "g3/world/"
  int rank = 0;                    // 0 <= rank < size
  int size = 1;                    // ranks in the communicator
  int device = 0;                  // CUDA device ordinal this rank uses; one rank per device
  std::chrono::milliseconds timeout{5000};           // default per-call timeout
  std::chrono::milliseconds connect_timeout{30000};  // rendezvous, init, split and shrink
  // When set, rank 0's unique id reaches the other ranks by a Broadcast over this communicator
  // (host memory; the same ranks in the same order: the generation's Gloo control world), not
  // through `store`, which then carries none of the init. Not owned.
  Communicator* id_world = nullptr;
};

class NcclCommunicator : public Communicator {
 public:
  struct Impl;  // NCCL/CUDA state; defined in nccl_communicator_impl.h

  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  // Healthy: ncclCommFinalize (bounded by timeout) then ncclCommDestroy. Broken, aborted or a
  // finalize that does not finish in time: ncclCommAbort. Never blocks on peers without a bound.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  Backend backend() const override { return Backend::kNccl; }
  // The overloads with default_timeout().
  using Communicator::Allreduce;
  using Communicator::Barrier;
  using Communicator::Broadcast;
  Timeout default_timeout() const override;

  // All buffers are device (or managed) memory on device(). Calls are synchronous: they return
  // once the work on stream() finished. The caller makes sure earlier writes to the buffers on
  // other streams are complete. kInvalidArgument for host pointers, null buffers, bad roots/peers.
  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op, Timeout timeout) override;
  Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) override;
  Status Allgather(const void* send, void* recv, size_t count, DataType type,
                   Timeout timeout) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       Timeout timeout) override;
  // A one-element allreduce on a scratch device buffer (NCCL has no barrier).
  Status Barrier(Timeout timeout) override;
  // NCCL matches point-to-point transfers by their order per peer and carries no tag: `tag` is
  // not transmitted, so issue the sends and recvs between two ranks in the same order on both.
  Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override;
  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override;

  // Both at once (ncclGroupStart/End): `send` to `send_peer` and `recv` from `recv_peer`, so that
  // rings and exchanges do not deadlock. Either side may be skipped with bytes == 0.
  Status SendRecv(const void* send, size_t send_bytes, int send_peer, void* recv,
                  size_t recv_bytes, int recv_peer, Timeout timeout);

  // Every transfer in one ncclGroupStart/End (device buffers; ncclSend/ncclRecv match in order
  // per peer; `tag` is not transmitted).
  bool has_exchange() const override { return true; }
  Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) override;

  void Abort() override;
  // Abort() without releasing now: a call in flight fails at its next poll and releases the
  // handle at its end; otherwise the next call, Abort() or the destructor does, on its thread.
  // For threads that must not wait on the device (the release frees device memory, and cudaFree
  // waits for every kernel on it, e.g. a hung one of another communicator). Thread-safe.
  void RequestAbort();
  void AbortWithoutWaiting() override { RequestAbort(); }

  // ncclCommSplit: collective over this communicator. Ranks with the same `color` (>= 0) form a
  // new communicator, ordered by `key`. A negative color takes no part and gets a null pointer.
  // kTimedOut after connect_timeout (the child is aborted), kPeerLost on an NCCL error; on a
  // broken communicator, the status that broke it.
  StatusOr<std::unique_ptr<NcclCommunicator>> Split(int color, int key);

  // ncclCommShrink: the survivors (every rank not in `exclude_ranks`, ranks of this communicator)
  // call it and get a communicator of size() - |exclude| ranks, renumbered in the old order.
  // Healthy communicator: NCCL_SHRINK_DEFAULT, this one stays usable. Broken one (after
  // kPeerLost/kTimedOut): NCCL_SHRINK_ABORT, which first terminates the hung operations, then this
  // one is released with ncclCommAbort and its calls return kAborted afterwards.
  // With `abort`, NCCL_SHRINK_ABORT and the release of this one even when it is healthy (every
  // survivor must pass the same mode: NCCL requires it).
  // kInvalidArgument for a bad list or when the caller is in it; kTimedOut after connect_timeout;
  // kUnavailable while a revoke is not yet quiescent (Quiesce() first; nothing is changed).
  StatusOr<std::unique_ptr<NcclCommunicator>> Shrink(std::vector<int> exclude_ranks,
                                                     bool abort = false);

  // Breaks the communicator for a recovery that may shrink it: a call in flight returns kPeerLost
  // at its next poll, later calls fail fast (kPeerLost), and, by what NCCL reports on it
  // (docs/collectives.md, "Interrupt, revoke and shrink"):
  //  - ncclSuccess: ncclCommRevoke when this libnccl has it (2.28.7+; looked up at run time):
  //    NCCL's abort flags stop a kernel that spins on a dead peer, NCCL's thread drains the
  //    streams and stops the proxy, and the state is ncclInProgress until it is quiescent, then
  //    ncclSuccess again: Shrink() (NCCL_SHRINK_ABORT) makes the survivors' communicator from it.
  //    Without ncclCommRevoke, the handle is only kept, as before (the shrink stops the kernel).
  //  - an error (e.g. its proxy saw a dead peer's connection close): NCCL refuses every split and
  //    shrink of it for good, so the handle is released (ncclCommAbort) by the next Quiesce() (or
  //    Abort(), or the end of a call in flight), never by Interrupt() itself: the abort frees
  //    device memory, which waits for every kernel on the device.
  //  - ncclInProgress (NCCL's thread still runs a call): nothing yet; Quiesce() takes the step.
  // Abort() when nothing will be made from it. Thread-safe; a call in flight on another thread
  // takes the NCCL part at its end. Never blocks on peers.
  void Interrupt() override;

  // For a broken communicator: Interrupt()s it (if not yet) and waits, at most `timeout`, until it
  // is quiescent. OK: NCCL reports ncclSuccess on it (revoked, or never running anything), so a
  // Shrink() will be accepted; kTimedOut: NCCL still in progress (try CanMakeChild() later or start
  // afresh); the status that broke it (kPeerLost, ...) when it was released. Healthy: OK at once,
  // nothing changes. Polls; never blocks inside NCCL.
  Status Quiesce(Timeout timeout);

  // Whether ncclCommRevoke was called on this communicator (by Interrupt or Quiesce).
  bool revoked() const;

  // Whether NCCL would start a Split() or Shrink() of this communicator now. NCCL 2.28 refuses
  // both, NCCL_SHRINK_ABORT included, while the communicator's NCCL state is an error (e.g. its
  // proxy saw a dead peer's connection close) or still in progress (a call interrupted while NCCL
  // was connecting, or a revoke not yet quiescent). Local, never blocks.
  bool CanMakeChild() const;

  // The stream every call runs on (a cudaStream_t), created with cudaStreamNonBlocking.
  CUstream_st* stream() const;
  int device() const;
  // OK while usable; otherwise the error that broke it.
  Status health() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Rank 0 makes a unique id (ncclGetUniqueId) and publishes it at prefix + "nccl_id"; the others
// read it; then every rank runs ncclCommInitRankConfig (non-blocking) until it completes. Over
// id_world, a world of more than 256 ranks uses one unique id per 256 ranks (made by ranks 0,
// 256, 512, ..., shared in one allreduce) and ncclCommInitRankScalable, where the libnccl has it
// (2.23 and later; looked up at run time), so that no one bootstrap root serves every rank.
// kInvalidArgument for a bad store/rank/size/device, kUnavailable when CUDA has no such device,
// kTimedOut when the id or the peers do not show up within connect_timeout, kPeerLost on an NCCL
// error during init.
StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(const NcclOptions& options);

// Whether this process sees at least one CUDA device (for tests and benchmarks that must skip).
bool NcclDeviceAvailable();

// Whether the libnccl this process runs with has ncclCommRevoke (NCCL 2.28.7 and later).
bool NcclRevokeAvailable();

}  // namespace elastra
