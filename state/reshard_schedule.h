// The reshard executor's pure phases: what one worker does in a ReshardPlan, worked out from the
// plan alone, before any byte moves. Every worker derives the same tensor groups and, for each
// pair of workers, the same message sequence; that is how the two sides of a pair agree on what
// each message holds without telling each other (NCCL carries no tags, and a batched exchange
// posts every message of a group at once). Internal to elastra_state (see reshard_executor.h).
// Pure computation: thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "elastra/sharding.h"
#include "state/plan/reshard_plan.h"

namespace elastra {

// The largest shard of `t` that a rank of `layout` holds, in bytes: the tensor, cut over TP
// and over DP (ZeRO) where its rule says so, rounded up.
int64_t LargestShardBytes(const TensorSpec& t, const Layout& layout);

// Group boundaries: group g is tensors [bounds[g], bounds[g + 1]). Consecutive tensors whose
// largest shards in layout `to` (LargestShardBytes) add up to at most `group_bytes` on every
// pipeline stage (a layer's tensors count on the stage that holds the layer only); a tensor whose
// shard is larger than that is a group of its own. So no worker allocates more than
// `group_bytes` of new shards for one group (or one tensor's shard), and every worker derives the
// same groups. Always starts with 0 and ends with the number of tensors (no tensor: one empty
// group).
std::vector<size_t> GroupTensors(const StateSpec& state, const Layout& to, int64_t group_bytes);

// What `worker` moves in one group, in plan order.
struct GroupWork {
  size_t index = 0;         // the group's number (its messages' tag)
  size_t tensor_begin = 0;  // the group's tensors [tensor_begin, tensor_end)
  size_t tensor_end = 0;
  // Local copies into this worker's new shards.
  std::vector<const Transfer*> copies;
  std::map<int, std::vector<const Transfer*>> sends;  // by receiving peer
  std::map<int, std::vector<const Transfer*>> recvs;  // by sending peer
};

// `worker`'s copies and transfers sorted into the groups of GroupTensors(plan.state,
// plan.to.layout, group_bytes). The pointers point into `plan`, which must outlive the result.
std::vector<GroupWork> WorkerGroups(const ReshardPlan& plan, int worker, int64_t group_bytes);

// This worker's region of every tensor in the old and the new layout (empty where it holds
// nothing), and whether it stays the same (such a shard is kept as it is, not copied).
struct WorkerRegions {
  std::vector<Region> old_region;
  std::vector<Region> new_region;
  std::vector<char> same;
};
WorkerRegions RegionsOfWorker(const ReshardPlan& plan, int worker);

// Where one transfer lies in the sender's and the receiver's shard.
struct TransferGeometry {
  // One run of bytes in the sender's (receiver's) shard: a single row, or whole rows of the
  // region's box.
  bool src_contiguous = false;
  bool dst_contiguous = false;
  bool both_contiguous = false;  // both of the above
  int64_t src_offset = 0;  // byte offset of its first element in the sender's shard
  int64_t dst_offset = 0;  // the same in the receiver's shard
};

// The geometry of every transfer `worker` sends or receives, indexed like plan.transfers (the
// others are left default).
std::vector<TransferGeometry> TransferGeometries(const ReshardPlan& plan, int worker);

// A run of transfers of one tensor sent as a message of its own. Where the run is one piece of
// this worker's shard (`direct`) it goes straight from (or into) the shard at `offset`; else this
// side packs (unpacks) `transfers` row by row through a staging buffer of its own. The two sides
// of a pair agree on the runs and their sizes; each decides `direct` for its own shard.
struct RunMessage {
  int tensor = 0;
  int64_t bytes = 0;
  bool direct = false;
  int64_t offset = 0;  // when direct: in the old shard when sending, the new one receiving
  std::vector<const Transfer*> transfers;  // the run's transfers, in plan order
};

// The messages between this worker and one peer in one direction, in the order both sides
// post them: first the staged transfers packed row by row into one stream (cut into chunks or
// sent whole, by the schedule), then each run as a message of its own.
struct PeerMessages {
  std::vector<const Transfer*> staged;
  int64_t staged_bytes = 0;  // sum of the staged transfers' bytes
  std::vector<RunMessage> runs;
};

// Splits `transfers` (one peer, one direction, plan order; pointers into plan.transfers) into
// the staged stream and runs. Consecutive transfers of one tensor that are contiguous in both
// shards and follow each other in both merge into one run; a run of at least `direct_min_bytes`
// that is contiguous in at least one of the two shards is a message of its own (so that side
// moves it without a copy); everything else is staged. `sending`: this worker is the sender.
PeerMessages LayoutPeerMessages(const ReshardPlan& plan,
                                const std::vector<TransferGeometry>& geometry,
                                const std::vector<const Transfer*>& transfers, bool sending,
                                int64_t direct_min_bytes);

// The serial schedule's partners of `worker` among `n`, round by round: worker XOR k for
// k = 1 .. 2^ceil(log2 n) - 1, skipping partners >= n. In each round both workers of a pair name
// each other, so blocking sends and receives meet.
std::vector<int> PairwisePartners(int worker, int n);

}  // namespace elastra
