// The Gloo backend: a GlooCommunicator owns one gloo context (a pair per peer) on the process's
// shared tcp device, and runs every call through Run().
//
// Calls. Every collective and point-to-point call is a schedule of gloo::transport::UnboundBuffer
// transfers (gloo_algorithms.h) driven by a Call (gloo_call.h): its buffers are registered with
// the communicator's WaitSet and its waits are bounded by the call's deadline. gloo's own
// algorithms are not used: they wait on buffers created inside them, which nothing can wake.
//
// Abort and failure, through gloo's public surface only. Abort(), or the first error of a call,
// marks the communicator broken and interrupts the WaitSet: every wait of every call in flight
// returns at once (gloo's UnboundBuffer::abortWaitRecv/abortWaitSend), the calls leave, and
// later calls fail fast without entering the context. When the last call has left, the
// communicator closes its context's pairs (gloo::Context::closeConnections: a hard close, so each
// peer reads a reset and its pending buffers fail with gloo::IoException: kPeerLost there). If no
// call is in flight, Abort() closes them itself. Only this context's own pairs are closed: no fd
// is looked up, dup()ed or shut down behind gloo's back, so a communicator sharing the device (the
// next generation) is never touched. The destructor waits until no call is in the context.
//
// Errors are classified by exception type (gloo_errors.h), with the call's deadline telling a
// gloo timeout from a lost peer (both are gloo::IoException in this gloo).
#include "collectives/gloo/gloo_communicator.h"

#include <signal.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include <gloo/types.h>

#include "collectives/gloo/gloo_algorithms.h"
#include "collectives/gloo/gloo_call.h"
#include "collectives/gloo/gloo_device.h"
#include "collectives/gloo/gloo_errors.h"
#include "collectives/gloo/gloo_mesh.h"
#include "collectives/gloo/stream_mesh.h"
#include "collectives/half_precision.h"
#include "common/logging.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;

// Slot prefixes (gloo's own collectives use 0x01..0x08). Point-to-point: slot (0x40, tag).
// Collectives: slot (0x41, n) for the n-th collective call; all ranks call them in one order.
constexpr uint8_t kPointToPointSlotPrefix = 0x40;
constexpr uint8_t kCollectiveSlotPrefix = 0x41;
// Allreduces of at most this many bytes per rank are latency-bound: RecursiveDoublingAllreduce
// (ceil(log2 n) rounds over build pairs, one partner at a time), at every size. Larger ones take
// the ring (bandwidth-optimal). The one-round all-to-all this used up to 5 ranks cost more: each
// rank posted 2(n-1) transfers at once while n-1 peers' arrived, and each post holds a pair's
// mutex that gloo's loop thread polls for (see CreateDevice). At 4 processes on 2 cores, loop
// threads SCHED_BATCH in both runs: 540-1070 us of CPU per agreement per rank and a median of
// 0.5-4 ms, against 100-170 us and 0.37-0.39 ms for recursive doubling.
constexpr size_t kSmallAllreduceBytes = 64u << 10;
// Pairs closed at once when a broken communicator closes its connections (see ClosePairs).
constexpr int kClosingThreads = 16;

// gloo writes to its sockets with writev(2), without MSG_NOSIGNAL: a write to a peer that just
// died raises SIGPIPE, whose default action kills this process (seen in the SIGKILL test). The
// whole point of this backend is to turn that into kPeerLost, so SIGPIPE is ignored process-wide
// (write then fails with EPIPE) unless the program already installed its own disposition.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      ::sigemptyset(&ignore.sa_mask);
      ::sigaction(SIGPIPE, &ignore, nullptr);
    }
  });
}

bool ValidType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
    case DataType::kFloat64:
    case DataType::kInt64:
    case DataType::kUint8:
    case DataType::kBFloat16:
    case DataType::kFloat16:
    case DataType::kInt32: return true;
  }
  return false;
}

bool ValidOp(ReduceOp op) {
  return op == ReduceOp::kSum || op == ReduceOp::kMax || op == ReduceOp::kMin;
}

class GlooCommunicator : public Communicator {
 public:
  GlooCommunicator(const GlooOptions& options, std::shared_ptr<MeshContext> context,
                   std::shared_ptr<gloo::transport::Device> device)
      : rank_(options.rank),
        size_(options.size),
        timeout_(options.timeout),
        prefix_(options.prefix),
        device_(std::move(device)),
        context_(std::move(context)),
        streams_(std::make_unique<StreamMesh>(options.rank, options.size, options.hostname,
                                              options.store, options.prefix,
                                              options.local_streams)) {}

  ~GlooCommunicator() override {
    // Thread-compatible, but the documented pattern "Abort() on one thread, then destroy" must be
    // safe while a call on another thread is still unwinding: wait for it to leave the context.
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [&] { return in_flight_ == 0; });
    lock.unlock();
    streams_.reset();  // in order: a peer still reading this rank's last bytes gets them
    context_.reset();
    device_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Backend backend() const override { return Backend::kGloo; }
  Timeout default_timeout() const override { return timeout_; }

  Status Allreduce(void* data, size_t count, DataType type, ReduceOp op, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Allreduce", data, count, type, timeout));
    if (!ValidOp(op)) return InvalidArgumentError("Allreduce: unknown reduce op");
    if (count == 0) return OkStatus();
    if (IsHalfType(type)) {  // collectives/half_precision.h
      return ReduceInFloat32(type, data, count, data, count, [&](const float*, float* wide) {
        return Allreduce(wide, count, DataType::kFloat32, op, timeout);
      });
    }
    const size_t elem = DataTypeSize(type);
    if (count * elem <= kSmallAllreduceBytes) {
      return RunCollective("Allreduce", timeout, [&](Call& call, uint64_t slot) {
        RecursiveDoublingAllreduce(call, slot, data, count, type, op);
      });
    }
    // Blocks of count / n elements (some empty when count < n: empty messages).
    std::vector<size_t> begin(size_ + 1), begin_bytes(size_ + 1);
    for (int b = 0; b <= size_; ++b) {
      begin[b] = count * b / size_;
      begin_bytes[b] = begin[b] * elem;
    }
    return RunCollective("Allreduce", timeout, [&](Call& call, uint64_t slot) {
      RingReduceScatter(call, slot, data, begin, type, op);
      RingAllgather(call, slot + 1, data, begin_bytes);
    });
  }

  Status Broadcast(void* data, size_t count, DataType type, int root, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Broadcast", data, count, type, timeout));
    if (root < 0 || root >= size_) {
      return InvalidArgumentError("Broadcast: root " + std::to_string(root) + " out of [0, " +
                                  std::to_string(size_) + ")");
    }
    if (count == 0) return OkStatus();
    return RunCollective("Broadcast", timeout, [&](Call& call, uint64_t slot) {
      TreeBroadcast(call, slot, data, count * DataTypeSize(type), root);
    });
  }

  Status Allgather(const void* send, void* recv, size_t count, DataType type,
                   Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("Allgather", send, count, type, timeout));
    if (recv == nullptr && count > 0) return InvalidArgumentError("Allgather: recv is null");
    if (count == 0) return OkStatus();
    const size_t block = count * DataTypeSize(type);
    std::vector<size_t> begin(size_ + 1);
    for (int b = 0; b <= size_; ++b) begin[b] = block * b;
    return RunCollective("Allgather", timeout, [&](Call& call, uint64_t slot) {
      std::memmove(static_cast<char*>(recv) + block * rank_, send, block);
      RingAllgather(call, slot, recv, begin);
    });
  }

  // The ring's reduce-scatter phase on a copy of the input (the input stays untouched).
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType type, ReduceOp op,
                       Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckCommon("ReduceScatter", send, count, type, timeout));
    if (recv == nullptr && count > 0) return InvalidArgumentError("ReduceScatter: recv is null");
    if (!ValidOp(op)) return InvalidArgumentError("ReduceScatter: unknown reduce op");
    if (count == 0) return OkStatus();
    if (IsHalfType(type)) {
      return ReduceInFloat32(type, send, count * size_, recv, count,
                             [&](const float* wide_send, float* wide_recv) {
                               return ReduceScatter(wide_send, wide_recv, count,
                                                    DataType::kFloat32, op, timeout);
                             });
    }
    const size_t elem = DataTypeSize(type);
    std::vector<char> scratch(static_cast<const char*>(send),
                              static_cast<const char*>(send) + elem * count * size_);
    std::vector<size_t> begin(size_ + 1);
    for (int b = 0; b <= size_; ++b) begin[b] = count * b;
    return RunCollective("ReduceScatter", timeout, [&](Call& call, uint64_t slot) {
      RingReduceScatter(call, slot, scratch.data(), begin, type, op);
      std::memcpy(recv, scratch.data() + elem * count * rank_, elem * count);
    });
  }

  Status Barrier(Timeout timeout) override {
    if (timeout.count() <= 0) return InvalidArgumentError("Barrier: timeout must be positive");
    return RunCollective("Barrier", timeout,
                         [&](Call& call, uint64_t slot) { DisseminationBarrier(call, slot); });
  }

  Status Send(const void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckPointToPoint("Send", data, bytes, peer, timeout));
    return Run("Send", timeout, [&](Call& call) {
      context_->EnsurePairs({peer}, call.deadline());
      auto* buf = call.NewBuffer(const_cast<void*>(data), bytes);
      buf->send(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      call.WaitSend(buf);
    });
  }

  Status Recv(void* data, size_t bytes, int peer, uint32_t tag, Timeout timeout) override {
    ELASTRA_RETURN_IF_ERROR(CheckPointToPoint("Recv", data, bytes, peer, timeout));
    return Run("Recv", timeout, [&](Call& call) {
      context_->EnsurePairs({peer}, call.deadline());
      auto* buf = call.NewBuffer(data, bytes);
      buf->recv(peer, gloo::Slot::build(kPointToPointSlotPrefix, tag));
      call.WaitRecv(buf);
    });
  }

  // Every transfer on its own unbound buffer, all posted at once (receives first), then waited
  // on. Messages between two ranks share one slot and match in posting order.
  bool has_exchange() const override { return true; }
  Status Exchange(const std::vector<PointToPoint>& ops, uint32_t tag, Timeout timeout) override {
    bool any = false;
    for (const PointToPoint& op : ops) {
      ELASTRA_RETURN_IF_ERROR(CheckPointToPoint(op.send ? "Exchange (send)" : "Exchange (recv)",
                                                op.data, op.bytes, op.peer, timeout));
      any |= op.bytes > 0;
    }
    if (!any) return BrokenStatus();
    return Run("Exchange", timeout, [&](Call& call) {
      std::vector<int> peers;
      for (const PointToPoint& op : ops) {
        if (op.bytes > 0) peers.push_back(op.peer);
      }
      context_->EnsurePairs(peers, call.deadline());
      PostAll(call, gloo::Slot::build(kPointToPointSlotPrefix, tag), ops);
    });
  }

  // Over the communicator's own sockets (stream_mesh.h): gathered from and scattered into the
  // segments, with no staging copy.
  bool has_vectored_exchange() const override { return true; }
  Status ExchangeV(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                   Timeout timeout) override {
    for (const VectoredTransfer& op : ops) {
      const char* what = op.send ? "ExchangeV (send)" : "ExchangeV (recv)";
      ELASTRA_RETURN_IF_ERROR(CheckPointToPoint(what, nullptr, 0, op.peer, timeout));
      for (const IoSegment& segment : op.segments) {
        if (segment.data == nullptr && segment.bytes > 0) {
          return InvalidArgumentError(std::string(what) + ": a null segment of " +
                                      std::to_string(segment.bytes) + " bytes");
        }
      }
    }
    const Clock::time_point deadline = Clock::now() + timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return broken_;
      ++in_flight_;
    }
    return Settle(streams_->Exchange(ops, tag, deadline));
  }

  void Abort() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      aborted_ = true;
      broken_ = AbortedError("communicator " + prefix_ + " was aborted");
      ++in_flight_;  // inside too while it works: the destructor waits for it
    }
    Interrupt();
    Leave();
  }

  int waits_in_flight() const { return waits_.waits_in_flight() + streams_->exchanges_in_flight(); }
  int local_streams() const { return streams_->local_peers(); }
  int connected_pairs() const { return context_->connected_pairs() + streams_->connected_peers(); }

 private:
  Status BrokenStatus() {
    std::lock_guard<std::mutex> lock(mu_);
    return broken_;
  }

  Status CheckCommon(const char* op, const void* data, size_t count, DataType type,
                     Timeout timeout) {
    if (!ValidType(type)) return InvalidArgumentError(std::string(op) + ": unknown data type");
    if (data == nullptr && count > 0) return InvalidArgumentError(std::string(op) + ": null data");
    if (timeout.count() <= 0) {
      return InvalidArgumentError(std::string(op) + ": timeout must be positive");
    }
    return BrokenStatus();
  }

  Status CheckPointToPoint(const char* op, const void* data, size_t bytes, int peer,
                           Timeout timeout) {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      return InvalidArgumentError(std::string(op) + ": peer " + std::to_string(peer) +
                                  " is not another rank of [0, " + std::to_string(size_) + ")");
    }
    if (data == nullptr && bytes > 0) return InvalidArgumentError(std::string(op) + ": null data");
    if (timeout.count() <= 0) {
      return InvalidArgumentError(std::string(op) + ": timeout must be positive");
    }
    return BrokenStatus();
  }

  // Run() for a collective: the body gets the call's slot, the next in the order every rank
  // calls collectives in.
  Status RunCollective(const char* op, Timeout timeout,
                       const std::function<void(Call&, uint64_t)>& body) {
    uint32_t sequence = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sequence = collective_sequence_++;
    }
    const uint64_t slot = gloo::Slot::build(kCollectiveSlotPrefix, sequence);
    return Run(op, timeout, [&](Call& call) { body(call, slot); });
  }

  // Runs one call on the context, bounded by `timeout` from now. The first error breaks the
  // communicator: the other calls in flight are interrupted, and the last to leave closes the
  // pairs so that peers fail at once instead of waiting out their own timeouts.
  Status Run(const char* op, Timeout timeout, const std::function<void(Call&)>& body) {
    const Clock::time_point deadline = Clock::now() + timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!broken_.ok()) return broken_;
      ++in_flight_;
    }
    Status result;
    try {
      // A failed call closes the pairs before its buffers and scratch memory go (gloo_call.h).
      Call call(*context_, waits_, deadline, [this] { CloseOnce(); });
      body(call);
    } catch (...) {
      result = StatusOfGlooFailure(std::current_exception(), op, Clock::now() >= deadline);
    }
    return Settle(std::move(result));
  }

  // The end of every call that entered the context (in_flight_): its result, unless the
  // communicator broke meanwhile; a first error breaks it.
  Status Settle(Status result) {
    bool first_error = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!result.ok()) {
        if (broken_.ok()) {
          broken_ = result.WithContext("rank " + std::to_string(rank_) + " " + prefix_);
          first_error = true;
        }
        // A call broken by Abort() or by another call's error reports that, not the EOF or
        // interruption it caused.
        result = broken_;
      }
    }
    if (first_error) {
      LOG(WARNING) << "gloo " << prefix_ << " rank " << rank_ << " broken: " << result;
      Interrupt();
    }
    Leave();  // the last touch of `this`: the destructor may run right after
    return result;
  }

  // Wakes every wait of every call in flight: gloo's, a lazy connect's, an ExchangeV's.
  void Interrupt() {
    waits_.Interrupt();
    context_->InterruptConnects();
    streams_->Interrupt();
  }

  // Leaves the context. The last to leave a broken communicator closes its pairs first (a call
  // that failed closed them already, before it returned).
  void Leave() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
      if (broken_.ok() || closed_ || in_flight_ > 0) {
        idle_.notify_all();
        return;
      }
      ++in_flight_;  // holds the context while closing
    }
    CloseOnce();
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
    idle_.notify_all();
  }

  // Closes the pairs (ClosePairs) the first time; a later caller waits until that is done, so
  // that on return gloo touches no buffer of this context any more. The caller is inside the
  // context (in_flight_), which the closing needs.
  void CloseOnce() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (closed_) {
        idle_.wait(lock, [&] { return pairs_closed_; });
        return;
      }
      closed_ = true;
    }
    // No pair is created from here on (EnsurePairs throws), so the pairs listed stay all of them.
    context_->InterruptConnects();
    ClosePairs();
    streams_->Close(/*reset=*/true);
    {
      std::lock_guard<std::mutex> lock(mu_);
      pairs_closed_ = true;
    }
    idle_.notify_all();
  }

  // A hard close (SO_LINGER 0) of every pair of this context, through gloo's Pair::close: each
  // peer reads a reset and fails its pending buffers with gloo::IoException. Never waits on a
  // peer, but each close waits for one tick of the device's epoll loop (Loop::unregisterDescriptor;
  // up to 10 ms when idle). Closes on several threads share the ticks; one after another
  // (gloo::Context::closeConnections) they took up to 10 ms per peer.
  void ClosePairs() {
    // Listed under the context's lock: a lazy connect on another thread may have created one.
    const std::vector<gloo::transport::Pair*> pairs = context_->ExistingPairs();
    const int stride =
        std::max(1, std::min(static_cast<int>(pairs.size()), kClosingThreads));
    std::vector<std::thread> closers;
    for (int first = 1; first < stride; ++first) {
      try {
        closers.emplace_back([&pairs, first, stride] { ClosePairsFrom(pairs, first, stride); });
      } catch (const std::system_error& e) {
        LOG(WARNING) << "gloo " << prefix_ << ": closing the rest on this thread: " << e.what();
        break;
      }
    }
    ClosePairsFrom(pairs, 0, stride);
    for (std::thread& t : closers) t.join();
    context_->closeConnections();  // pairs of threads that did not start; closed ones: no-op
  }

  // Closes pairs[i] for i = first, first + stride, ...
  static void ClosePairsFrom(const std::vector<gloo::transport::Pair*>& pairs, int first,
                             int stride) {
    for (size_t i = first; i < pairs.size(); i += stride) pairs[i]->close();
  }

  const int rank_;
  const int size_;
  const Timeout timeout_;
  const std::string prefix_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<MeshContext> context_;
  std::unique_ptr<StreamMesh> streams_;  // ExchangeV's sockets
  WaitSet waits_;

  std::mutex mu_;
  std::condition_variable idle_;
  int in_flight_ = 0;                 // guarded by mu_: calls (and a closing) inside the context
  bool aborted_ = false;              // guarded by mu_
  bool closed_ = false;               // guarded by mu_: the pairs are being closed or were
  bool pairs_closed_ = false;         // guarded by mu_: the pairs were closed
  uint32_t collective_sequence_ = 0;  // guarded by mu_: slots of collectives, in call order
  Status broken_;                     // guarded by mu_; OK while healthy
};

}  // namespace

int GlooWaitsInFlightForTesting(const Communicator& comm) {
  const auto* gloo = dynamic_cast<const GlooCommunicator*>(&comm);
  return gloo == nullptr ? -1 : gloo->waits_in_flight();
}

int GlooConnectedPairs(const Communicator& comm) {
  const auto* gloo = dynamic_cast<const GlooCommunicator*>(&comm);
  return gloo == nullptr ? -1 : gloo->connected_pairs();
}

int GlooLocalStreams(const Communicator& comm) {
  const auto* gloo = dynamic_cast<const GlooCommunicator*>(&comm);
  return gloo == nullptr ? -1 : gloo->local_streams();
}

StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options) {
  if (options.store == nullptr) return InvalidArgumentError("CreateGlooCommunicator: no store");
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    return InvalidArgumentError("CreateGlooCommunicator: rank " + std::to_string(options.rank) +
                                " size " + std::to_string(options.size));
  }
  if (options.timeout.count() <= 0 || options.connect_timeout.count() <= 0) {
    return InvalidArgumentError("CreateGlooCommunicator: timeouts must be positive");
  }
  IgnoreSigpipeOnce();
  const std::string op = "CreateGlooCommunicator " + options.prefix;
  const Clock::time_point deadline = Clock::now() + options.connect_timeout;
  try {
    std::shared_ptr<gloo::transport::Device> device = OwnOrSharedDevice(options);
    auto context = std::make_shared<MeshContext>(options.rank, options.size, device,
                                                 options.store, options.prefix);
    context->setTimeout(options.timeout);
    context->Build(deadline);
    return std::unique_ptr<Communicator>(
        new GlooCommunicator(options, std::move(context), std::move(device)));
  } catch (...) {
    return StatusOfGlooFailure(std::current_exception(), op, Clock::now() >= deadline);
  }
}

}  // namespace elastra
