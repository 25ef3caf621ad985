// The reshard executor's transfer phase: one group's messages to and from the other workers, by
// one of three schedules (batched in one Exchange or ExchangeV, one thread per peer and
// direction, or pairwise rounds). Private to state/ (reshard_executor.cc drives it, once per
// group; reshard_transfer.cc implements it for host and device shards). Not thread-safe: one
// reshard at a time.
#pragma once

#include <cstdint>
#include <map>
#include <type_traits>
#include <string>
#include <vector>

#include "state/plan/reshard_plan.h"
#include "elastra/communicator.h"
#include "elastra/status.h"
#include "state/reshard_executor.h"
#include "state/reshard_memory.h"
#include "state/reshard_schedule.h"

namespace elastra::reshard_internal {

template <class Memory>
class ReshardTransfer {
 public:
  using Shards = std::map<std::string, typename Memory::Buffer>;

  // `shards` are the old shards (read by the sends); `kept_arena` is the batched schedule's
  // staging arena kept by the caller across reshards, or nullptr for one of its own. Every
  // reference must outlive this object.
  ReshardTransfer(const ReshardPlan& plan, Communicator& comm, Shards* shards, Memory& memory,
                  const ReshardExecutorOptions& options, ReshardExecutorStats* stats,
                  const WorkerRegions& regions, Staging<Memory>* kept_arena);

  // Whether the batched schedule runs over ExchangeV (host shards only).
  bool Vectored() const {
    return std::is_same_v<Memory, HostMemory> && options_.batched && options_.vectored &&
           comm_.has_exchange() && comm_.has_vectored_exchange();
  }

  // Works out, from the plan alone, what the schedule needs: the geometries that cut the staged
  // messages and the partners that order the serial rounds (ExchangeV needs neither). Identical
  // on every worker, which is how both sides of a pair agree on the messages between them.
  void Plan();

  // The group's transfers to and from the other workers, received into `fresh` (the group's new
  // shards), by the schedule the options and the communicator allow. Adds to the stats' bytes,
  // messages and transfer seconds. Returns the communicator's error when a peer fails.
  Status Move(const GroupWork& group, Shards& fresh);

 private:
  using Stream = RectStream<Memory>;

  // One message of its own (a RunMessage) bound to this worker's buffers: straight from or into
  // the shard at `direct`, or, where null, packed or unpacked through a staging buffer.
  struct BoundRun {
    uint8_t* direct = nullptr;
    int64_t bytes = 0;
    std::vector<typename Stream::Item> items;  // when not direct
  };

  // One direction of one pair, bound to this worker's buffers: the staged transfers as a stream
  // (cut into chunk-sized messages, or one message when batched), then each run as one message.
  struct Direction {
    std::vector<typename Stream::Item> staged;
    std::vector<BoundRun> runs;
    // Bytes that pass through staging buffers on this side: the stream and the runs not direct.
    int64_t StagingBytes() const {
      int64_t n = 0;
      for (const auto& it : staged) n += it.transfer->bytes;
      for (const BoundRun& r : runs) n += r.direct == nullptr ? r.bytes : 0;
      return n;
    }
  };

  // The batched schedule's messages of one group in the order both sides post them: per peer
  // (ascending) its sends, then its receives; each direction's staged stream as one message,
  // then its runs. Every staged byte has its place in one arena (arena_, reused by the next
  // group), so a group allocates nothing when the arena is large enough already.
  struct Batch {
    struct Unpack {
      std::vector<typename Stream::Item> items;
      int64_t at;  // in the arena
      int64_t bytes;
    };
    std::vector<PointToPoint> ops;
    std::vector<Unpack> unpacks;  // the receives' staged bytes, for after the exchange
  };

  Direction Bind(const std::vector<const Transfer*>& list, bool sending, Shards& fresh);
  static const std::vector<const Transfer*>& ListOf(
      const std::map<int, std::vector<const Transfer*>>& by_peer, int peer);

  Status ExchangeBatched(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                         Counters* received);
  Status ExchangeVectored(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                          Counters* received);
  StatusOr<uint8_t*> PackBatch(const GroupWork& group, Shards& fresh, Batch* batch);
  Status MoveOnPeerThreads(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                           Counters* received);
  Status MoveInPairwiseRounds(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                              Counters* received);
  Status SendTo(int peer, Direction d, uint32_t tag, Staging<Memory>& staging, Counters* c);
  Status RecvFrom(int peer, Direction d, uint32_t tag, Staging<Memory>& staging, Counters* c);

  const ReshardPlan& plan_;
  const std::vector<TensorSpec>& tensors_;
  Communicator& comm_;
  Shards* shards_;
  Memory& memory_;
  const ReshardExecutorOptions& options_;
  ReshardExecutorStats* stats_;
  const int me_;
  const int n_;
  const WorkerRegions& regions_;
  std::vector<TransferGeometry> geometry_;
  std::vector<int> partners_;
  Staging<Memory> send_buf_, recv_buf_;  // the serial schedule's
  Staging<Memory> own_arena_;            // the batched schedule's, one group at a time,
  Staging<Memory>* arena_;               // unless the caller keeps one (options.arena)
};

extern template class ReshardTransfer<HostMemory>;
extern template class ReshardTransfer<DeviceMemory>;

}  // namespace elastra::reshard_internal
