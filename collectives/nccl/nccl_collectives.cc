// The NCCL communicator's collectives and point-to-point calls, each enqueued on the
// communicator's stream and polled to completion by Impl::Run. The lifecycle (init, split,
// shrink, interrupt, abort) is in nccl_communicator.cc.
#include "collectives/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <utility>
#include <vector>

#include "collectives/nccl/nccl_call.h"
#include "collectives/nccl/nccl_communicator_impl.h"

namespace elastra {
namespace {

using nccl_internal::Clock;
using nccl_internal::NcclStatus;
using nccl_internal::Poll;

ncclDataType_t ToNccl(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint8: return ncclUint8;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kInt32: return ncclInt32;
  }
  return ncclUint8;
}

bool ValidType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUint8:
    case DataType::kBFloat16:
    case DataType::kFloat16:
    case DataType::kInt32:
      return true;
  }
  return false;
}

StatusOr<ncclRedOp_t> ToNccl(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return InvalidArgumentError("unknown reduce op " + std::to_string(static_cast<int>(op)));
}

// Device or managed memory on `device`; host pointers are a caller's mistake.
Status CheckDevicePointer(const void* p, size_t bytes, int device, const char* what) {
  if (bytes == 0) return OkStatus();
  if (p == nullptr) return InvalidArgumentError(std::string(what) + ": null buffer");
  cudaPointerAttributes attr{};
  cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky error
    return InvalidArgumentError(std::string(what) + ": not a CUDA pointer (" +
                                cudaGetErrorString(e) + ")");
  }
  if (attr.type == cudaMemoryTypeManaged) return OkStatus();
  if (attr.type != cudaMemoryTypeDevice) {
    return InvalidArgumentError(std::string(what) + ": buffer is not device memory");
  }
  if (attr.device != device) {
    return InvalidArgumentError(std::string(what) + ": buffer is on device " +
                                std::to_string(attr.device) + ", communicator on " +
                                std::to_string(device));
  }
  return OkStatus();
}

}  // namespace

template <typename F>
Status NcclCommunicator::Impl::Run(const char* what, Communicator::Timeout t, F&& enqueue) {
  if (t.count() <= 0) return InvalidArgumentError(std::string(what) + ": timeout must be > 0");
  const Clock::time_point deadline = Clock::now() + t;
  ELASTRA_RETURN_IF_ERROR(BeginCall(/*allow_broken=*/false));
  Status s = [&]() -> Status {
    ELASTRA_CUDA_RETURN(cudaSetDevice(device));
    ELASTRA_RETURN_IF_ERROR(enqueue(comm, stream));
    return Poll(comm, stream, deadline, &abort_requested, what, &interrupt_requested);
  }();
  return EndCall(std::move(s));
}

Status NcclCommunicator::Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                                   Timeout timeout) {
  if (!ValidType(type)) return InvalidArgumentError("Allreduce: unknown data type");
  ELASTRA_ASSIGN_OR_RETURN(ncclRedOp_t nop, ToNccl(op));
  ELASTRA_RETURN_IF_ERROR(
      CheckDevicePointer(data, count * DataTypeSize(type), impl_->device, "Allreduce"));
  return impl_->Run("ncclAllReduce", timeout, [&](ncclComm_t c, cudaStream_t s) {
    return NcclStatus(ncclAllReduce(data, data, count, ToNccl(type), nop, c, s), c,
                      "ncclAllReduce");
  });
}

Status NcclCommunicator::Broadcast(void* data, size_t count, DataType type, int root,
                                   Timeout timeout) {
  if (!ValidType(type)) return InvalidArgumentError("Broadcast: unknown data type");
  if (root < 0 || root >= size()) {
    return InvalidArgumentError("Broadcast: root " + std::to_string(root) + " out of range");
  }
  ELASTRA_RETURN_IF_ERROR(
      CheckDevicePointer(data, count * DataTypeSize(type), impl_->device, "Broadcast"));
  return impl_->Run("ncclBroadcast", timeout, [&](ncclComm_t c, cudaStream_t s) {
    return NcclStatus(ncclBroadcast(data, data, count, ToNccl(type), root, c, s), c,
                      "ncclBroadcast");
  });
}

Status NcclCommunicator::Allgather(const void* send, void* recv, size_t count, DataType type,
                                   Timeout timeout) {
  if (!ValidType(type)) return InvalidArgumentError("Allgather: unknown data type");
  const size_t bytes = count * DataTypeSize(type);
  ELASTRA_RETURN_IF_ERROR(CheckDevicePointer(send, bytes, impl_->device, "Allgather send"));
  ELASTRA_RETURN_IF_ERROR(
      CheckDevicePointer(recv, bytes * size(), impl_->device, "Allgather recv"));
  return impl_->Run("ncclAllGather", timeout, [&](ncclComm_t c, cudaStream_t s) {
    return NcclStatus(ncclAllGather(send, recv, count, ToNccl(type), c, s), c, "ncclAllGather");
  });
}

Status NcclCommunicator::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                       ReduceOp op, Timeout timeout) {
  if (!ValidType(type)) return InvalidArgumentError("ReduceScatter: unknown data type");
  ELASTRA_ASSIGN_OR_RETURN(ncclRedOp_t nop, ToNccl(op));
  const size_t bytes = count * DataTypeSize(type);
  ELASTRA_RETURN_IF_ERROR(
      CheckDevicePointer(send, bytes * size(), impl_->device, "ReduceScatter send"));
  ELASTRA_RETURN_IF_ERROR(CheckDevicePointer(recv, bytes, impl_->device, "ReduceScatter recv"));
  return impl_->Run("ncclReduceScatter", timeout, [&](ncclComm_t c, cudaStream_t s) {
    return NcclStatus(ncclReduceScatter(send, recv, count, ToNccl(type), nop, c, s), c,
                      "ncclReduceScatter");
  });
}

Status NcclCommunicator::Barrier(Timeout timeout) {
  return impl_->Run("barrier (ncclAllReduce)", timeout, [&](ncclComm_t c, cudaStream_t s) {
    return NcclStatus(
        ncclAllReduce(impl_->scratch, impl_->scratch, 1, ncclFloat32, ncclSum, c, s), c,
        "ncclAllReduce");
  });
}

Status NcclCommunicator::SendRecv(const void* send, size_t send_bytes, int send_peer, void* recv,
                                  size_t recv_bytes, int recv_peer, Timeout timeout) {
  auto bad_peer = [&](int peer) { return peer < 0 || peer >= size() || peer == rank(); };
  if (send_bytes > 0 && bad_peer(send_peer)) {
    return InvalidArgumentError("Send: bad peer " + std::to_string(send_peer));
  }
  if (recv_bytes > 0 && bad_peer(recv_peer)) {
    return InvalidArgumentError("Recv: bad peer " + std::to_string(recv_peer));
  }
  ELASTRA_RETURN_IF_ERROR(CheckDevicePointer(send, send_bytes, impl_->device, "Send"));
  ELASTRA_RETURN_IF_ERROR(CheckDevicePointer(recv, recv_bytes, impl_->device, "Recv"));
  if (send_bytes == 0 && recv_bytes == 0) return OkStatus();
  return impl_->Run("ncclSend/ncclRecv", timeout, [&](ncclComm_t c, cudaStream_t s) -> Status {
    ELASTRA_NCCL_RETURN(ncclGroupStart(), c);
    // Every call inside the group is checked, and the group is always closed.
    Status first;
    if (send_bytes > 0) {
      first = NcclStatus(ncclSend(send, send_bytes, ncclUint8, send_peer, c, s), c, "ncclSend");
    }
    if (first.ok() && recv_bytes > 0) {
      first = NcclStatus(ncclRecv(recv, recv_bytes, ncclUint8, recv_peer, c, s), c, "ncclRecv");
    }
    Status end = NcclStatus(ncclGroupEnd(), c, "ncclGroupEnd");
    return first.ok() ? end : first;
  });
}

Status NcclCommunicator::Exchange(const std::vector<PointToPoint>& ops, uint32_t /*tag*/,
                                  Timeout timeout) {
  bool any = false;
  for (const PointToPoint& op : ops) {
    if (op.bytes == 0) continue;
    if (op.peer < 0 || op.peer >= size() || op.peer == rank()) {
      return InvalidArgumentError("Exchange: bad peer " + std::to_string(op.peer));
    }
    ELASTRA_RETURN_IF_ERROR(CheckDevicePointer(op.data, op.bytes, impl_->device, "Exchange"));
    any = true;
  }
  if (!any) return health();
  return impl_->Run("ncclSend/ncclRecv group", timeout,
                    [&](ncclComm_t c, cudaStream_t s) -> Status {
    ELASTRA_NCCL_RETURN(ncclGroupStart(), c);
    // Every call inside the group is checked, and the group is always closed.
    Status first;
    for (size_t i = 0; i < ops.size() && first.ok(); ++i) {
      const PointToPoint& op = ops[i];
      if (op.bytes == 0) continue;
      first = op.send ? NcclStatus(ncclSend(op.data, op.bytes, ncclUint8, op.peer, c, s), c,
                                   "ncclSend")
                      : NcclStatus(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, c, s), c,
                                   "ncclRecv");
    }
    Status end = NcclStatus(ncclGroupEnd(), c, "ncclGroupEnd");
    return first.ok() ? end : first;
  });
}

Status NcclCommunicator::Send(const void* data, size_t bytes, int peer, uint32_t /*tag*/,
                              Timeout timeout) {
  if (bytes > 0 && (peer < 0 || peer >= size() || peer == rank())) {
    return InvalidArgumentError("Send: bad peer " + std::to_string(peer));
  }
  return SendRecv(data, bytes, peer, nullptr, 0, -1, timeout);
}

Status NcclCommunicator::Recv(void* data, size_t bytes, int peer, uint32_t /*tag*/,
                              Timeout timeout) {
  if (bytes > 0 && (peer < 0 || peer >= size() || peer == rank())) {
    return InvalidArgumentError("Recv: bad peer " + std::to_string(peer));
  }
  return SendRecv(nullptr, 0, -1, data, bytes, peer, timeout);
}

}  // namespace elastra
