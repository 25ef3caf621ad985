#include "worker/state_move.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "state/reshard_executor.h"
#include "state/tensor_collection_access.h"

namespace elastra {

namespace {

// After a move: every tensor gets its region in the new layout (none for a leaving worker, which
// ends holding nothing), and a successful move must have left exactly that many bytes.
Status SetNewRegions(const StateMove& move, const Coordinates* coords, const Status& moved,
                     TensorCollection* state) {
  const int num_layers = state->num_layers();
  for (auto& t : TensorCollectionAccess::Tensors(*state)) {
    if (coords != nullptr) {
      t.region = LocalRegion(t.spec, num_layers, move.plan.to.layout, *coords);
    } else {
      t.region = Region{};
      t.data.clear();
      t.device_data.Reset();
    }
  }
  if (!moved.ok()) return moved;
  for (const auto& t : state->tensors()) {
    const size_t want = static_cast<size_t>(t.region.elements()) * t.spec.element_size;
    if (coords != nullptr && t.bytes() != want) {
      return InternalError("tensor '" + t.name() + "' has " + std::to_string(t.bytes()) +
                           " bytes after resharding, its region needs " + std::to_string(want));
    }
  }
  return OkStatus();
}

}  // namespace

StatusOr<int64_t> ExecuteStateMove(const StateMove& move, Communicator& comm,
                                   const Coordinates* coords, TensorCollection* state,
                                   std::chrono::milliseconds timeout, ReshardArena* arena) {
  ELASTRA_RETURN_IF_ERROR(TensorCollectionAccess::MoveToHost(*state));
  auto& tensors = TensorCollectionAccess::Tensors(*state);
  ShardMap shards;
  for (auto& t : tensors) {
    if (!t.data.empty()) shards[t.name()] = std::move(t.data);
    t.data.clear();
  }
  ReshardExecutorOptions options;
  options.timeout = timeout;
  options.arena = arena;
  // Every peer at once: batched through Exchange() (Gloo has it); a communicator without it gets
  // a thread per peer (gloo's Send and Recv may run on several threads), not pairwise rounds.
  options.concurrent_peers = true;
  ReshardExecutorStats stats;
  Status s = ExecuteReshard(move.plan, comm, &shards, options, &stats);
  for (auto& t : tensors) {
    auto it = shards.find(t.name());
    if (it != shards.end()) t.data = std::move(it->second);
  }
  ELASTRA_RETURN_IF_ERROR(SetNewRegions(move, coords, s, state));
  return stats.bytes_received;
}

StatusOr<int64_t> ExecuteDeviceStateMove(const StateMove& move, Communicator& comm,
                                         const Coordinates* coords, TensorCollection* state,
                                         std::chrono::milliseconds timeout) {
  if (state->device() < 0) {
    return InvalidArgumentError("a device state move needs a state on a device (SetDevice)");
  }
  if (move.plan.from.RankOfWorker(comm.rank()) < 0) {
    // Nothing of the old layout is here (a joiner, whose tensors are still whole from before
    // Start()): no source, so the whole tensors are dropped rather than uploaded (a whole model
    // need not fit one GPU), and the executor allocates the new shards.
    for (auto& t : TensorCollectionAccess::Tensors(*state)) {
      if (!t.on_device) HostBytes().swap(t.data);
    }
  }
  ELASTRA_RETURN_IF_ERROR(state->MoveToDevice());
  auto& tensors = TensorCollectionAccess::Tensors(*state);
  DeviceShardMap shards;
  for (auto& t : tensors) {
    if (t.device_data.size() > 0) shards[t.name()] = std::move(t.device_data);
  }
  ReshardExecutorOptions options;
  options.timeout = timeout;
  // Batched: every transfer in one NCCL group (Exchange); never a thread per peer on one NCCL
  // communicator.
  options.concurrent_peers = false;
  ReshardExecutorStats stats;
  Status s = ExecuteDeviceReshard(move.plan, comm, state->device(), &shards, options, &stats);
  for (auto& t : tensors) {
    auto it = shards.find(t.name());
    if (it != shards.end()) {
      t.device_data = std::move(it->second);
    } else {
      t.device_data = DeviceBuffer();  // holds nothing of this tensor now
    }
    t.on_device = true;
  }
  ELASTRA_RETURN_IF_ERROR(SetNewRegions(move, coords, s, state));
  return stats.bytes_received;
}

}  // namespace elastra
