// Communicator: collectives and point-to-point transfers among the ranks of one generation (or one
// group of it). Backends: Gloo (CPU, TCP), NCCL (GPU buffers on a CUDA stream), MPI (fixed worlds).
//
// Every call has a timeout and returns a Status: kPeerLost when a peer process or connection is
// gone, kTimedOut when the deadline passed, kAborted after Abort(), kInvalidArgument for bad
// arguments. After any error other than kInvalidArgument the communicator is broken: later calls
// fail fast with the same code and the owner builds a new one for the next generation.
// Thread-compatible, except Abort(), which any thread may call at any time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "elastra/data_type.h"
#include "elastra/status.h"

namespace elastra {

enum class ReduceOp : int { kSum = 0, kMax = 1, kMin = 2 };

// The collective library behind a Communicator.
enum class Backend : int {
  kGloo = 0,  // CPU buffers over TCP
  kNccl = 1,  // CUDA device buffers
  kMpi = 2,   // a fixed mpirun world
};
// "gloo", "nccl", "mpi"; "unknown" for a value outside the enum.
const char* BackendName(Backend backend);

// One point-to-point transfer of an Exchange().
struct PointToPoint {
  bool send = false;  // send `bytes` from `data` to `peer`, or receive them into `data`
  void* data = nullptr;
  size_t bytes = 0;
  int peer = -1;
};

// A piece of memory of a vectored transfer.
struct IoSegment {
  void* data = nullptr;
  size_t bytes = 0;
};

// One transfer of an ExchangeV(): the bytes of `segments`, in their order, to or from `peer`.
// What matches is the byte stream, not the segments: a send's segments, one after another, are
// the receive's, one after another, however each side cuts its memory (rows of a strided region
// on one side, one run on the other).
struct VectoredTransfer {
  bool send = false;
  int peer = -1;
  std::vector<IoSegment> segments;
};

class Communicator {
 public:
  using Timeout = std::chrono::milliseconds;

  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual Backend backend() const = 0;
  // The timeout used by the overloads without one.
  virtual Timeout default_timeout() const = 0;

  // In place: `data` holds `count` elements on every rank; afterwards the reduction of all.
  // kBFloat16 and kFloat16 are reduced in float32 and rounded to nearest-even: once on Gloo and
  // MPI (the float32 result of the whole reduction), natively by NCCL (which rounds at each step
  // of its algorithm). The same holds for ReduceScatter.
  virtual Status Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                           Timeout timeout) = 0;
  // `data` on `root` is copied to every rank.
  virtual Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) = 0;
  // `recv` holds size() * count elements, rank r's `send` at offset r * count.
  virtual Status Allgather(const void* send, void* recv, size_t count, DataType type,
                           Timeout timeout) = 0;
  // `send` holds size() * count elements; rank r receives the reduction of block r in `recv`.
  virtual Status ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                               ReduceOp op, Timeout timeout) = 0;
  virtual Status Barrier(Timeout timeout) = 0;
  // Point-to-point: `bytes` bytes to or from `peer`; a send matches the recv with the same tag.
  virtual Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) = 0;
  virtual Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) = 0;

  // Posts every transfer of `ops` at once and returns when all are done: the schedule of a state
  // move, without pairing rounds or a thread per peer. Transfers between two ranks match in the
  // order each side lists them (`tag` separates concurrent exchanges where the backend has tags).
  // Only where has_exchange(); otherwise kFailedPrecondition. kInvalidArgument for a bad peer or
  // a null buffer with bytes > 0.
  virtual bool has_exchange() const { return false; }
  virtual Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) {
    (void)ops;
    (void)tag;
    (void)timeout;
    return FailedPreconditionError(std::string(BackendName(backend())) + " has no Exchange()");
  }

  // Exchange() over memory in pieces: each transfer's bytes go straight from (and into) its
  // segments, with no staging copy on either side (a state move's strided rectangles, row by
  // row). Transfers to (from) one peer in one call form one stream, in list order; both sides
  // must list the same total bytes per peer and direction with the same `tag`, else the receiver
  // fails with kInternal (the two sides planned different exchanges). Only where
  // has_vectored_exchange() (host memory: the Gloo backend); otherwise kFailedPrecondition.
  // kInvalidArgument for a bad peer or a null segment with bytes > 0.
  virtual bool has_vectored_exchange() const { return false; }
  virtual Status ExchangeV(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                           Timeout timeout) {
    (void)ops;
    (void)tag;
    (void)timeout;
    return FailedPreconditionError(std::string(BackendName(backend())) + " has no ExchangeV()");
  }

  // Breaks every call in flight (they return kAborted or kPeerLost) and every later one.
  // Thread-safe, never blocks on peers.
  virtual void Abort() = 0;
  // Breaks the calls in flight for a recovery that may make the next communicator from this one:
  // NCCL revokes it and keeps it for a shrink (docs/collectives.md, "Interrupt, revoke and
  // shrink"); the others Abort(). Thread-safe, never blocks on peers or on the device.
  virtual void Interrupt() { Abort(); }
  // Abort() for a thread that must not wait on the device: NCCL releases the communicator later, on
  // its owner's thread (its release frees device memory, which waits for every kernel, a hung one
  // included); the others Abort() now. Thread-safe.
  virtual void AbortWithoutWaiting() { Abort(); }

  // The same calls with default_timeout().
  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op) {
    return Allreduce(data, count, type, op, default_timeout());
  }
  Status Broadcast(void* data, size_t count, DataType type, int root) {
    return Broadcast(data, count, type, root, default_timeout());
  }
  Status Barrier() { return Barrier(default_timeout()); }
};

}  // namespace elastra
