// GroupGate: one of a generation's dp, pp or tp communicators, wrapped so that a change can tell
// whether it may be kept for the next generation (docs/recovery.md, "Rebuild only what changed").
// It forwards every call to the communicator it wraps and counts what went through: collectives
// completed, point-to-point messages sent to and received from each group rank, calls in flight.
// Stop() closes it for a change: a call in flight then is broken (the communicator with it) and
// the group is no longer intact; an idle group is left as it is, and calls made after Stop() fail
// with kAborted without touching the network. Health() is what the worker reports at the pause
// (proto::GroupHealth); Reopen() opens a kept gate in the next generation.
//
// Thread-safe: Stop(), Health() and Abort() may be called from any thread (the worker's I/O
// thread stops the groups when a RecoverRequest lands); calls follow the wrapped communicator's
// rules (Send, Recv and Exchange on several threads at once where it allows them).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "elastra/communicator.h"
#include "protocol/messages.h"

namespace elastra {

class GroupGate : public Communicator {
 public:
  // `inner` is the group's communicator of kind `kind` (proto::GroupKind), built for generation
  // `generation`.
  GroupGate(std::shared_ptr<Communicator> inner, uint8_t kind, uint64_t generation)
      : inner_(std::move(inner)), kind_(kind), generation_(generation) {}

  uint8_t kind() const { return kind_; }
  Communicator& inner() { return *inner_; }

  // Closes the gate for a change; breaks the communicator when a call is inside it.
  void Stop();
  // Opens a stopped gate again: the group was kept for generation `generation`, which it serves
  // from now on (what Health() reports, so that the next change may keep it again).
  void Reopen(uint64_t generation);
  // What the worker reports of this group at a pause.
  proto::GroupHealth Health() const;

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Backend backend() const override { return inner_->backend(); }
  Timeout default_timeout() const override { return inner_->default_timeout(); }

  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op,
                   Timeout timeout) override;
  Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) override;
  Status Allgather(const void* send, void* recv, size_t count, DataType type,
                   Timeout timeout) override;
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       Timeout timeout) override;
  Status Barrier(Timeout timeout) override;
  Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override;
  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override;
  bool has_exchange() const override { return inner_->has_exchange(); }
  Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) override;
  bool has_vectored_exchange() const override { return inner_->has_vectored_exchange(); }
  Status ExchangeV(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                   Timeout timeout) override;

  void Abort() override;
  // Stop(): the calls in flight are broken, an idle group stays intact.
  void Interrupt() override { Stop(); }
  void AbortWithoutWaiting() override;

 private:
  // A call's messages to (sends) and from (receives) group ranks.
  using Messages = std::vector<std::pair<int, bool>>;  // (peer, send)
  // Lets a call in: kAborted once stopped.
  Status Enter();
  // A call left with `status`; `collective`: count it as one; `messages` as point-to-point.
  Status Leave(Status status, bool collective, const Messages& messages);

  const std::shared_ptr<Communicator> inner_;
  const uint8_t kind_;
  mutable std::mutex mu_;  // guards everything below
  uint64_t generation_;    // the generation it serves: built for, or kept into
  bool stopped_ = false;
  bool intact_ = true;
  int in_flight_ = 0;
  int64_t calls_ = 0;
  std::map<int, std::pair<int64_t, int64_t>> messages_;  // peer -> (sent, received)
};

}  // namespace elastra
