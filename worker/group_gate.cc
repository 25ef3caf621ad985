#include "worker/group_gate.h"

#include <algorithm>

namespace elastra {

Status GroupGate::Enter() {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopped_) return AbortedError("the group stopped for a change of generation");
  ++in_flight_;
  return OkStatus();
}

Status GroupGate::Leave(Status status, bool collective, const Messages& messages) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  // A failed call leaves the communicator broken (elastra/communicator.h), bytes of it perhaps
  // in flight; a refused argument sent nothing.
  if (!status.ok() && status.code() != StatusCode::kInvalidArgument) intact_ = false;
  if (status.ok()) {
    if (collective) ++calls_;
    for (const auto& [peer, send] : messages) {
      auto& [sent, received] = messages_[peer];
      ++(send ? sent : received);
    }
  }
  return status;
}

void GroupGate::Stop() {
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    busy = in_flight_ > 0;
    if (busy) intact_ = false;
  }
  // A call inside the group may wait on a peer that will never come: break it (and so the
  // group, which is built again). Never a wait on the device.
  if (busy) inner_->AbortWithoutWaiting();
}

void GroupGate::Reopen(uint64_t generation) {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = false;
  generation_ = generation;
}

proto::GroupHealth GroupGate::Health() const {
  std::lock_guard<std::mutex> lock(mu_);
  proto::GroupHealth h;
  h.kind = kind_;
  h.generation = generation_;
  h.intact = intact_ && in_flight_ == 0;
  h.calls = calls_;
  for (const auto& [peer, counts] : messages_) {
    h.peers.push_back(peer);
    h.sent.push_back(counts.first);
    h.received.push_back(counts.second);
  }
  return h;
}

void GroupGate::Abort() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    intact_ = false;
  }
  inner_->Abort();
}

void GroupGate::AbortWithoutWaiting() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    intact_ = false;
  }
  inner_->AbortWithoutWaiting();
}

Status GroupGate::Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                            Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Allreduce(data, count, type, op, timeout), true, {});
}

Status GroupGate::Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Broadcast(data, count, type, root, timeout), true, {});
}

Status GroupGate::Allgather(const void* send, void* recv, size_t count, DataType type,
                            Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Allgather(send, recv, count, type, timeout), true, {});
}

Status GroupGate::ReduceScatter(const void* send, void* recv, size_t count, DataType type,
                                ReduceOp op, Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->ReduceScatter(send, recv, count, type, op, timeout), true, {});
}

Status GroupGate::Barrier(Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Barrier(timeout), true, {});
}

Status GroupGate::Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Send(data, bytes, peer, tag, timeout), false, {{peer, true}});
}

Status GroupGate::Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  return Leave(inner_->Recv(data, bytes, peer, tag, timeout), false, {{peer, false}});
}

Status GroupGate::Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  Messages messages;
  messages.reserve(ops.size());
  for (const auto& op : ops) messages.emplace_back(op.peer, op.send);
  return Leave(inner_->Exchange(ops, tag, timeout), false, messages);
}

Status GroupGate::ExchangeV(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                            Timeout timeout) {
  ELASTRA_RETURN_IF_ERROR(Enter());
  // The transfers to (from) one peer form one stream, however many each side lists: one
  // message per peer and direction.
  Messages messages;
  for (const auto& op : ops) {
    const std::pair<int, bool> m{op.peer, op.send};
    if (std::find(messages.begin(), messages.end(), m) == messages.end()) messages.push_back(m);
  }
  return Leave(inner_->ExchangeV(ops, tag, timeout), false, messages);
}

}  // namespace elastra
