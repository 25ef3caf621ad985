// State moves of a generation change: the reshard plan that takes the training state from where
// it is (the previous layout, as NewGeneration describes it) to where the new layout wants it,
// computed identically by every worker of both layouts, and this worker's part of running it over
// a communicator, through host memory or device to device. Free functions; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/messages.h"
#include "elastra/communicator.h"
#include "elastra/tensor_collection.h"
#include "state/reshard_plan.h"

namespace elastra {

// The reshard plan of a generation change, numbered for execution: workers 0..n-1 are the new
// members by new rank, n.. the previous members that leave alive and still hold state (they
// hand their shards off before they go).
struct StateMove {
  ReshardPlan plan;
  std::vector<std::string> workers;  // plan worker id -> worker id
  int new_members = 0;
  bool needs_leavers = false;  // some transfer is sent by a leaving worker
  int WorkerIndex(const std::string& id) const;
};

// kFailedPrecondition when some part of the state has no live holder (it is lost with a failed
// worker: only a checkpoint can bring it back).
StatusOr<StateMove> PlanStateMove(const proto::NewGeneration& generation, const StateSpec& state);

// Runs this worker's part of `move` over `comm` (whose rank is this worker's plan index),
// replacing `state`'s local shards with those of the new layout (`coords` in it; a leaving worker
// passes nullptr and ends holding nothing). Returns the bytes received. The shards move in host
// memory (device shards are staged there first) over a communicator that takes host buffers.
StatusOr<int64_t> ExecuteStateMove(const StateMove& move, Communicator& comm,
                                   const Coordinates* coords, TensorCollection* state,
                                   std::chrono::milliseconds timeout);

// The same device to device, for a state on a CUDA device: shards still in host memory go to the
// device first, then the move runs over `comm` with device pointers (an NCCL communicator) and
// leaves every shard on the device. kInvalidArgument for a state without a device.
StatusOr<int64_t> ExecuteDeviceStateMove(const StateMove& move, Communicator& comm,
                                         const Coordinates* coords, TensorCollection* state,
                                         std::chrono::milliseconds timeout);

}  // namespace elastra
