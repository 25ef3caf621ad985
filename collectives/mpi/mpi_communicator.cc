#include "collectives/mpi/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/half_precision.h"

namespace elastra {
namespace {

using SteadyClock = std::chrono::steady_clock;

// A request whose call gave up (deadline or abort) before it completed, with the staging memory
// MPI may still read or write. Kept, and tested now and then, until MPI is done with it.
struct Abandoned {
  MPI_Request request;
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
};

std::mutex g_abandoned_mu;
std::list<Abandoned> g_abandoned;

int ProgressAbandonedLocked() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return static_cast<int>(g_abandoned.size());
  for (auto it = g_abandoned.begin(); it != g_abandoned.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? g_abandoned.erase(it) : std::next(it);
  }
  return static_cast<int>(g_abandoned.size());
}

StatusOr<MPI_Datatype> MpiType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kInt64: return MPI_INT64_T;
    case DataType::kUint8: return MPI_UINT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    // MPI has no 16-bit float: moved as raw 16-bit words; reductions widen to float first.
    case DataType::kBFloat16:
    case DataType::kFloat16: return MPI_UINT16_T;
  }
  return InvalidArgumentError("unknown data type " + std::to_string(static_cast<int>(type)));
}

StatusOr<MPI_Op> MpiOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return InvalidArgumentError("unknown reduce op " + std::to_string(static_cast<int>(op)));
}

std::string ErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

// An MPI error code as a Status: a truncated message means the two sides disagree on sizes
// (kCorrupt); anything else is a transport failure (kPeerLost).
Status FromMpiError(int code, const std::string& what) {
  int cls = 0;
  MPI_Error_class(code, &cls);
  std::string message = what + " failed: " + ErrorString(code);
  return cls == MPI_ERR_TRUNCATE ? CorruptError(message) : PeerLostError(message);
}

// The largest piece of one point-to-point transfer handed to MPI as one message (counts are
// int).
std::atomic<size_t> g_piece_bytes{static_cast<size_t>(INT_MAX)};

Status CheckCount(size_t count) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return InvalidArgumentError("count " + std::to_string(count) +
                                " exceeds what one MPI call takes (" + std::to_string(INT_MAX) +
                                ")");
  }
  return OkStatus();
}

class MpiCommunicatorImpl final : public MpiCommunicator {
 public:
  MpiCommunicatorImpl(MPI_Comm comm, Timeout default_timeout)
      : comm_(comm), default_timeout_(default_timeout) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_ub_ = (flag && ub != nullptr) ? *ub : 32767;
  }

  ~MpiCommunicatorImpl() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // MPI_Comm_free is safe with abandoned requests pending: the communicator is freed once they
    // complete.
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kMpi; }
  Timeout default_timeout() const override { return default_timeout_; }

  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckCount(count));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Datatype dt, MpiType(type));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Op mop, MpiOp(op));
    if (data == nullptr && count > 0) return InvalidArgumentError("Allreduce of a null buffer");
    if (IsHalfType(type)) {  // collectives/half_precision.h
      return ReduceInFloat32(type, data, count, data, count, [&](const float*, float* wide) {
        return Allreduce(wide, count, DataType::kFloat32, op, timeout);
      });
    }
    size_t bytes = count * DataTypeSize(type);
    Abandoned op_state;
    op_state.send.assign(static_cast<std::byte*>(data), static_cast<std::byte*>(data) + bytes);
    op_state.recv.resize(bytes);
    MPI_Iallreduce(op_state.send.data(), op_state.recv.data(), static_cast<int>(count), dt, mop,
                   comm_, &op_state.request);
    ELASTRA_RETURN_IF_ERROR(Wait(std::move(op_state), timeout, "Allreduce", data, bytes));
    return OkStatus();
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckCount(count));
    ELASTRA_RETURN_IF_ERROR(CheckPeer(root, "root"));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Datatype dt, MpiType(type));
    if (data == nullptr && count > 0) return InvalidArgumentError("Broadcast of a null buffer");
    size_t bytes = count * DataTypeSize(type);
    Abandoned op_state;
    op_state.recv.resize(bytes);
    if (rank_ == root) std::memcpy(op_state.recv.data(), data, bytes);
    MPI_Ibcast(op_state.recv.data(), static_cast<int>(count), dt, root, comm_, &op_state.request);
    return Wait(std::move(op_state), timeout, "Broadcast", rank_ == root ? nullptr : data, bytes);
  }

  Status Allgather(const void* send, void* recv, size_t count, DataType type,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckCount(count * static_cast<size_t>(size_)));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Datatype dt, MpiType(type));
    if ((send == nullptr || recv == nullptr) && count > 0) {
      return InvalidArgumentError("Allgather with a null buffer");
    }
    size_t bytes = count * DataTypeSize(type);
    Abandoned op_state;
    op_state.send.assign(static_cast<const std::byte*>(send),
                         static_cast<const std::byte*>(send) + bytes);
    op_state.recv.resize(bytes * size_);
    MPI_Iallgather(op_state.send.data(), static_cast<int>(count), dt, op_state.recv.data(),
                   static_cast<int>(count), dt, comm_, &op_state.request);
    return Wait(std::move(op_state), timeout, "Allgather", recv, bytes * size_);
  }

  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckCount(count * static_cast<size_t>(size_)));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Datatype dt, MpiType(type));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Op mop, MpiOp(op));
    if ((send == nullptr || recv == nullptr) && count > 0) {
      return InvalidArgumentError("ReduceScatter with a null buffer");
    }
    if (IsHalfType(type)) {
      return ReduceInFloat32(type, send, count * size_, recv, count,
                             [&](const float* wide_send, float* wide_recv) {
                               return ReduceScatter(wide_send, wide_recv, count,
                                                    DataType::kFloat32, op, timeout);
                             });
    }
    size_t bytes = count * DataTypeSize(type);
    Abandoned op_state;
    op_state.send.assign(static_cast<const std::byte*>(send),
                         static_cast<const std::byte*>(send) + bytes * size_);
    op_state.recv.resize(bytes);
    MPI_Ireduce_scatter_block(op_state.send.data(), op_state.recv.data(), static_cast<int>(count),
                              dt, mop, comm_, &op_state.request);
    return Wait(std::move(op_state), timeout, "ReduceScatter", recv, bytes);
  }

  Status Barrier(Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    Abandoned op_state;
    MPI_Ibarrier(comm_, &op_state.request);
    return Wait(std::move(op_state), timeout, "Barrier", nullptr, 0);
  }

  Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    return Transfer({{true, const_cast<void*>(data), bytes, peer}}, tag, timeout, "Send");
  }

  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    return Transfer({{false, data, bytes, peer}}, tag, timeout, "Recv");
  }

  bool has_exchange() const override { return true; }
  Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) override {
    return Transfer(ops, tag, timeout, "Exchange");
  }

  void Abort() override { aborted_ = true; }

  StatusOr<std::unique_ptr<MpiCommunicator>> Split(int color, int key, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    // Everyone's (color, key) first, with a deadline: MPI_Comm_split has no non-blocking form,
    // so it only runs once every rank is known to have arrived.
    int64_t mine[2] = {color < 0 ? -1 : color, key};
    std::vector<int64_t> all(2 * static_cast<size_t>(size_));
    ELASTRA_RETURN_IF_ERROR(Allgather(mine, all.data(), 2, DataType::kInt64, timeout));
    MPI_Comm group = MPI_COMM_NULL;
    int rc = MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &group);
    if (rc != MPI_SUCCESS) return Break(PeerLostError("MPI_Comm_split failed: " + ErrorString(rc)));
    if (group == MPI_COMM_NULL) return std::unique_ptr<MpiCommunicator>();
    MPI_Comm_set_errhandler(group, MPI_ERRORS_RETURN);
    return std::unique_ptr<MpiCommunicator>(new MpiCommunicatorImpl(group, default_timeout_));
  }

 private:
  Status CheckUsable(Timeout timeout) {
    if (timeout.count() <= 0) return InvalidArgumentError("timeout must be positive");
    if (!broken_.ok()) return broken_;
    if (aborted_) return Break(AbortedError("the communicator was aborted"));
    return OkStatus();
  }

  Status CheckPeer(int peer, const char* what) const {
    if (peer < 0 || peer >= size_) {
      return InvalidArgumentError(std::string(what) + " " + std::to_string(peer) +
                                  " is outside a communicator of " + std::to_string(size_));
    }
    return OkStatus();
  }

  Status CheckTag(uint32_t tag) const {
    if (tag > static_cast<uint32_t>(tag_ub_)) {
      return InvalidArgumentError("tag " + std::to_string(tag) + " exceeds MPI_TAG_UB " +
                                  std::to_string(tag_ub_));
    }
    return OkStatus();
  }

  // Why a call stopped waiting: Abort() or its deadline.
  Status GaveUp(const char* what, Timeout timeout) const {
    if (aborted_) return AbortedError(std::string(what) + " aborted");
    return TimedOutError(std::string(what) + " on rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_) + " timed out after " +
                         std::to_string(timeout.count()) + " ms");
  }

  Status Break(Status s) {
    if (broken_.ok()) broken_ = s;
    return s;
  }

  // Send, Recv and Exchange: every transfer of `ops` at once, each cut into pieces of at most
  // g_piece_bytes (MPI counts are int), every piece one message with its own staging
  // memory. The sends are posted first, in list order. A receive is not posted ahead: the next
  // message from its peer is matched with MPI_Improbe (in list order per peer, and MPI never
  // overtakes on one communicator, source and tag, so a pair's messages match in the order both
  // sides list them), and received with MPI_Imrecv into staging of the size the sender sent.
  // Sizes that disagree are kCorrupt without a truncated receive: Open MPI 4.1 writes a
  // truncated rendezvous message past the receive buffer (measured, 1 MiB into 512 KiB). Every
  // request is polled until all are done, the deadline passes or Abort() is called; a received
  // piece is copied to the caller's buffer as soon as it completes. The tag is the caller's (the
  // collectives are MPI's own non-blocking collectives, which never match point-to-point
  // messages).
  Status Transfer(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout,
                  const char* what) {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckTag(tag));
    const size_t piece_bytes = g_piece_bytes.load();
    size_t count = 0;
    for (const PointToPoint& op : ops) {
      ELASTRA_RETURN_IF_ERROR(CheckPeer(op.peer, "peer"));
      if (op.data == nullptr && op.bytes > 0) {
        return InvalidArgumentError(std::string(what) + " with a null buffer");
      }
      count += op.bytes == 0 ? 1 : (op.bytes + piece_bytes - 1) / piece_bytes;
    }
    struct Piece {
      Abandoned state;  // the request (MPI_REQUEST_NULL until posted) and its staging memory
      bool send = false;
      int peer = -1;
      std::byte* out = nullptr;  // where a received piece goes
      size_t bytes = 0;
      bool done = false;
    };
    std::vector<Piece> pieces;
    pieces.reserve(count);
    // Per peer, its receive pieces in list order, and how many of them are matched.
    std::vector<std::vector<size_t>> receives(static_cast<size_t>(size_));
    std::vector<size_t> matched(static_cast<size_t>(size_), 0);
    for (const PointToPoint& op : ops) {
      auto* data = static_cast<std::byte*>(op.data);
      size_t offset = 0;
      do {
        Piece& p = pieces.emplace_back();
        p.state.request = MPI_REQUEST_NULL;
        p.send = op.send;
        p.peer = op.peer;
        p.bytes = std::min(piece_bytes, op.bytes - offset);
        if (op.send) {
          p.state.send.assign(data + offset, data + offset + p.bytes);
        } else {
          p.out = data + offset;
          receives[op.peer].push_back(pieces.size() - 1);
        }
        offset += p.bytes;
      } while (offset < op.bytes);
    }
    // Hands every posted, unfinished piece to the abandoned list with its staging memory (all
    // are sends or matched receives, which complete once the peer takes part) and says `s`.
    auto fail = [&](Status s) {
      {
        std::lock_guard<std::mutex> lock(g_abandoned_mu);
        for (Piece& p : pieces) {
          if (!p.done && p.state.request != MPI_REQUEST_NULL) {
            g_abandoned.push_back(std::move(p.state));
          }
        }
        ProgressAbandonedLocked();
      }
      return Break(std::move(s));
    };
    for (Piece& p : pieces) {
      if (!p.send) continue;
      const int rc = MPI_Isend(p.state.send.data(), static_cast<int>(p.bytes), MPI_BYTE, p.peer,
                               static_cast<int>(tag), comm_, &p.state.request);
      if (rc != MPI_SUCCESS) return fail(FromMpiError(rc, what));
    }
    const auto deadline = SteadyClock::now() + timeout;
    size_t left = pieces.size();
    for (int spins = 0; left > 0; ++spins) {
      // Match what has arrived from each peer, in list order.
      for (int peer = 0; peer < size_; ++peer) {
        while (matched[peer] < receives[peer].size()) {
          int arrived = 0;
          MPI_Message message = MPI_MESSAGE_NULL;
          MPI_Status st;
          int rc = MPI_Improbe(peer, static_cast<int>(tag), comm_, &arrived, &message, &st);
          if (rc != MPI_SUCCESS) return fail(FromMpiError(rc, what));
          if (!arrived) break;
          int got = 0;
          MPI_Get_count(&st, MPI_BYTE, &got);
          Piece& p = pieces[receives[peer][matched[peer]++]];
          // Received in full even when the size is wrong, so nothing is truncated.
          p.state.recv.resize(static_cast<size_t>(got));
          rc = MPI_Imrecv(p.state.recv.data(), got, MPI_BYTE, &message, &p.state.request);
          if (rc != MPI_SUCCESS) return fail(FromMpiError(rc, what));
          if (static_cast<size_t>(got) != p.bytes) {
            // The two sides disagree on the message: nothing later here can be trusted.
            return fail(CorruptError(std::string(what) + " expected " + std::to_string(p.bytes) +
                                     " bytes from rank " + std::to_string(peer) + " but got " +
                                     std::to_string(got)));
          }
          spins = 0;
        }
      }
      for (Piece& p : pieces) {
        if (p.done || p.state.request == MPI_REQUEST_NULL) continue;
        int finished = 0;
        const int rc = MPI_Test(&p.state.request, &finished, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) {
          p.done = true;
          return fail(FromMpiError(rc, std::string(what) + " with rank " + std::to_string(p.peer)));
        }
        if (!finished) continue;
        p.done = true;
        --left;
        spins = 0;
        if (!p.send && p.bytes > 0) std::memcpy(p.out, p.state.recv.data(), p.bytes);
        // The staging memory is not needed any more.
        p.state.send = std::vector<std::byte>();
        p.state.recv = std::vector<std::byte>();
      }
      if (left == 0) break;
      if (aborted_ || SteadyClock::now() >= deadline) return fail(GaveUp(what, timeout));
      // As in Wait(): spin briefly for latency, then yield the core.
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return OkStatus();
  }

  // Polls the request until it completes (then copies `out_bytes` of op.recv to `out`), the
  // deadline passes (kTimedOut) or Abort() is called (kAborted). An unfinished request is handed
  // to the abandoned list with its staging memory.
  Status Wait(Abandoned op, Timeout timeout, const char* what, void* out, size_t out_bytes) {
    auto deadline = SteadyClock::now() + timeout;
    int done = 0;
    for (int spins = 0;; ++spins) {
      int rc = MPI_Test(&op.request, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) return Break(FromMpiError(rc, what));
      if (done) break;
      if (aborted_ || SteadyClock::now() >= deadline) break;
      // Spin briefly for latency, then yield the core (ranks often share cores).
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!done) {
      std::lock_guard<std::mutex> lock(g_abandoned_mu);
      g_abandoned.push_back(std::move(op));
      ProgressAbandonedLocked();
      return Break(GaveUp(what, timeout));
    }
    if (out != nullptr && out_bytes > 0) std::memcpy(out, op.recv.data(), out_bytes);
    return OkStatus();
  }

  MPI_Comm comm_;
  Timeout default_timeout_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
  std::atomic<bool> aborted_{false};
  Status broken_;
};

}  // namespace

StatusOr<std::unique_ptr<MpiCommunicator>> CreateMpiWorldCommunicator(
    std::chrono::milliseconds default_timeout) {
  if (default_timeout.count() <= 0) return InvalidArgumentError("timeout must be positive");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return FailedPreconditionError("MPI is not initialized (start the job with mpirun and create "
                                   "the Worker first, or call MPI_Init_thread)");
  }
  int provided = MPI_THREAD_SINGLE;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED) {
    return FailedPreconditionError("MPI was initialized below MPI_THREAD_SERIALIZED");
  }
  MPI_Comm comm = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &comm) != MPI_SUCCESS) {
    return InternalError("MPI_Comm_dup(MPI_COMM_WORLD) failed");
  }
  // Errors come back as codes (turned into Status), never abort the process.
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicatorImpl(comm, default_timeout));
}

size_t SetMpiPieceBytesForTesting(size_t bytes) {
  if (bytes == 0 || bytes > static_cast<size_t>(INT_MAX)) bytes = static_cast<size_t>(INT_MAX);
  return g_piece_bytes.exchange(bytes);
}

int ProgressAbandonedMpiRequests() {
  std::lock_guard<std::mutex> lock(g_abandoned_mu);
  return ProgressAbandonedLocked();
}

}  // namespace elastra
