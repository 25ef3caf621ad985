#include "collectives/mpi/mpi_communicator.h"

#include <mpi.h>

#include <atomic>
#include <climits>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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
  const char* backend() const override { return "mpi"; }
  Timeout default_timeout() const override { return default_timeout_; }

  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckCount(count));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Datatype dt, MpiType(type));
    ELASTRA_ASSIGN_OR_RETURN(MPI_Op mop, MpiOp(op));
    if (data == nullptr && count > 0) return InvalidArgumentError("Allreduce of a null buffer");
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
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckPeer(peer, "peer"));
    ELASTRA_RETURN_IF_ERROR(CheckTag(tag));
    ELASTRA_RETURN_IF_ERROR(CheckCount(bytes));
    if (data == nullptr && bytes > 0) return InvalidArgumentError("Send of a null buffer");
    Abandoned op_state;
    op_state.send.assign(static_cast<const std::byte*>(data),
                         static_cast<const std::byte*>(data) + bytes);
    MPI_Isend(op_state.send.data(), static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag),
              comm_, &op_state.request);
    return Wait(std::move(op_state), timeout, "Send", nullptr, 0);
  }

  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckUsable(timeout));
    ELASTRA_RETURN_IF_ERROR(CheckPeer(peer, "peer"));
    ELASTRA_RETURN_IF_ERROR(CheckTag(tag));
    ELASTRA_RETURN_IF_ERROR(CheckCount(bytes));
    if (data == nullptr && bytes > 0) return InvalidArgumentError("Recv into a null buffer");
    Abandoned op_state;
    op_state.recv.resize(bytes);
    MPI_Irecv(op_state.recv.data(), static_cast<int>(bytes), MPI_BYTE, peer, static_cast<int>(tag),
              comm_, &op_state.request);
    MPI_Status st;
    ELASTRA_RETURN_IF_ERROR(Wait(std::move(op_state), timeout, "Recv", data, bytes, &st));
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    if (static_cast<size_t>(got) != bytes) {
      // The two sides disagree on the message: nothing later on this communicator can be trusted.
      return Break(CorruptError("Recv expected " + std::to_string(bytes) + " bytes from rank " +
                                std::to_string(peer) + " but got " + std::to_string(got)));
    }
    return OkStatus();
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

  Status Break(Status s) {
    if (broken_.ok()) broken_ = s;
    return s;
  }

  // Polls the request until it completes (then copies `out_bytes` of op.recv to `out`), the
  // deadline passes (kTimedOut) or Abort() is called (kAborted). An unfinished request is handed
  // to the abandoned list with its staging memory.
  Status Wait(Abandoned op, Timeout timeout, const char* what, void* out, size_t out_bytes,
              MPI_Status* status = nullptr) {
    auto deadline = SteadyClock::now() + timeout;
    MPI_Status st;
    int done = 0;
    for (int spins = 0;; ++spins) {
      int rc = MPI_Test(&op.request, &done, &st);
      if (rc != MPI_SUCCESS) {
        int cls = 0;
        MPI_Error_class(rc, &cls);
        std::string message = std::string(what) + " failed: " + ErrorString(rc);
        // A truncated message means the two sides disagree on sizes; anything else is a
        // transport failure.
        return Break(cls == MPI_ERR_TRUNCATE ? CorruptError(message) : PeerLostError(message));
      }
      if (done) break;
      if (aborted_ || SteadyClock::now() >= deadline) break;
      // Spin briefly for latency, then yield the core (ranks often share cores).
      if (spins > 100) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (!done) {
      bool is_recv = std::string(what) == "Recv";
      if (is_recv) MPI_Cancel(&op.request);  // point-to-point receives can be cancelled
      {
        std::lock_guard<std::mutex> lock(g_abandoned_mu);
        g_abandoned.push_back(std::move(op));
        ProgressAbandonedLocked();
      }
      if (aborted_) return Break(AbortedError(std::string(what) + " aborted"));
      return Break(TimedOutError(std::string(what) + " on rank " + std::to_string(rank_) + " of " +
                                 std::to_string(size_) + " timed out after " +
                                 std::to_string(timeout.count()) + " ms"));
    }
    if (status != nullptr) *status = st;
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

int ProgressAbandonedMpiRequests() {
  std::lock_guard<std::mutex> lock(g_abandoned_mu);
  return ProgressAbandonedLocked();
}

}  // namespace elastra
