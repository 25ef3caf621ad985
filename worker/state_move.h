// State moves of a generation change: this worker's part of running the reshard plan (planned by
// the coordinator, rebuilt from NewGeneration by StateMoveOf: state/plan/state_move_plan.h) over a
// communicator, through host memory or device to device. Free functions; thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "state/plan/reshard_plan.h"
#include "state/plan/state_move_plan.h"
#include "state/reshard_executor.h"
#include "elastra/communicator.h"
#include "elastra/tensor_collection.h"

namespace elastra {

// Runs this worker's part of `move` over `comm` (whose rank is this worker's plan index),
// replacing `state`'s local shards with those of the new layout (`coords` in it; a leaving worker
// passes nullptr and ends holding nothing). Returns the bytes received. The shards move in host
// memory (device shards are staged there first) over a communicator that takes host buffers.
// `arena` (may be nullptr) is the worker's staging memory, kept from one move to the next.
StatusOr<int64_t> ExecuteStateMove(const StateMove& move, Communicator& comm,
                                   const Coordinates* coords, TensorCollection* state,
                                   std::chrono::milliseconds timeout,
                                   ReshardArena* arena = nullptr);

// The same device to device, for a state on a CUDA device: shards still in host memory go to the
// device first, then the move runs over `comm` with device pointers (an NCCL communicator) and
// leaves every shard on the device. kInvalidArgument for a state without a device.
StatusOr<int64_t> ExecuteDeviceStateMove(const StateMove& move, Communicator& comm,
                                         const Coordinates* coords, TensorCollection* state,
                                         std::chrono::milliseconds timeout);

}  // namespace elastra
