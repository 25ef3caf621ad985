// GenerationBuilder: how this worker enters a generation the coordinator announced
// (NewGeneration), and where it stands once it has. Apply() runs the phases in order: build the
// generation's communicators, check that every worker registered the same state, roll back to the
// common commit where needed, move the state to where the new layout wants it (from the memory of
// its holders, or from the newest checkpoint when a shard died with its only holder), take the
// scalars from a holder, commit the new layout, and report GenerationReady. A worker that a shrink
// takes out hands off the shards only it holds (HandOff). docs/design-notes.md tells why each
// phase is as it is.
//
// Thread-safety: the training thread's. What the I/O thread may touch meanwhile (the
// communicators, the generation number) lives in GroupManager and ControlChannel, which guard it.
#pragma once

#include <cstdint>

#include "protocol/messages.h"
#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"
#include "elastra/worker_options.h"
#include "worker/commit_store.h"
#include "worker/control_channel.h"
#include "worker/disk_checkpoints.h"
#include "worker/group_building.h"
#include "worker/group_manager.h"
#include "worker/state_move.h"

namespace elastra {

class GenerationBuilder {
 public:
  // The parts it drives; all outlive it. `options` is read at each use (Start() settles
  // options.device).
  GenerationBuilder(const WorkerOptions& options, TensorCollection* state, ControlChannel* channel,
                    GroupManager* groups, CommitStore* commits, DiskCheckpoints* checkpoints)
      : options_(options),
        state_(state),
        channel_(channel),
        groups_(groups),
        commits_(commits),
        checkpoints_(checkpoints) {}
  GenerationBuilder(const GenerationBuilder&) = delete;
  GenerationBuilder& operator=(const GenerationBuilder&) = delete;

  // The training communicators' backend, resolved by Worker::Start() before any generation.
  void set_backend(Backend backend) { backend_ = backend; }
  Backend backend() const { return backend_; }

  // Builds generation `gen`, of which this worker is a member, makes it the current one and
  // reports GenerationReady. kInvalidArgument when this worker is not a member or the workers
  // registered different states; kFailedPrecondition when it cannot take part (no commit of
  // gen.restore_step to roll back to, a shard lost with no checkpoint to load it from); the error
  // of a communicator, the state move or a checkpoint load otherwise. The caller reports a failure
  // and waits for the coordinator's next decision.
  Status Apply(const proto::NewGeneration& gen);

  // For a worker that `gen` takes out: releases its communicators and sends the shards only it
  // holds to their new owners, then frees its commits. The error of the move.
  Status HandOff(const proto::NewGeneration& gen);

  // For a worker that holds no rank now (parked as standby): makes what its next build needs
  // first on another thread (GroupManager::WarmUp).
  void WarmUp();

  // Where this worker stands in the generation it runs (set by Apply()).
  const Layout& layout() const { return layout_; }
  int rank() const { return rank_; }
  const Coordinates& coords() const { return coords_; }

 private:
  int64_t step() const { return state_->GetScalar(kStepScalarName); }
  // Replaces the communicators by the generation's; "building generation N" errors.
  Status RebuildGroups(const proto::NewGeneration& gen, int my_rank);
  // kInvalidArgument unless every member registered the same state.
  Status CheckSignature();
  // Restores the commit of gen.restore_step on a worker that held the state and moved on since.
  Status RollBackIfNeeded(const proto::NewGeneration& gen);
  // Moves this worker's state to where `gen` wants it. `my_rank` is the worker's rank in `gen`,
  // or -1 for a worker that leaves (it only sends). Returns the bytes received.
  StatusOr<int64_t> MoveState(const proto::NewGeneration& gen, int my_rank);
  StatusOr<int64_t> LoadCheckpoint(const proto::NewGeneration& gen, int my_rank);
  // Gives every member the scalars of the lowest rank that held the state.
  Status BroadcastScalars(const proto::NewGeneration& gen);
  // Commits the new layout, unless the commit made at the pause is the state already.
  Status CommitNewLayout(int64_t bytes_received);
  // The options of generation `gen`'s communicators; `rank`, this worker's in `gen` (-1: none,
  // or a group whose keys are no world records), decides the rendezvous store
  // (ControlChannel::StoreFor).
  GroupOptions GroupOptionsFor(const proto::NewGeneration& gen, int rank = -1) const;
  bool DeviceToDevice() const;

  const WorkerOptions& options_;
  TensorCollection* state_;
  ControlChannel* channel_;
  GroupManager* groups_;
  CommitStore* commits_;
  DiskCheckpoints* checkpoints_;
  Backend backend_ = Backend::kGloo;
  Layout layout_;
  int rank_ = -1;
  Coordinates coords_;
  // The host state moves' staging memory, kept from one generation to the next: fresh pages
  // would be faulted in inside the downtime of each.
  ReshardArena reshard_arena_;
};

}  // namespace elastra
