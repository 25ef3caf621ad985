#include "worker/generation_builder.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/logging.h"
#include "state/tensor_collection_access.h"
#include "worker/worker_internals.h"

namespace elastra {
namespace {

using proto::MessageType;

// The bytes of each tensor's shard at coordinates `coords` of `layout`.
std::vector<size_t> ShardSizesIn(const TensorCollection& state, const Layout& layout,
                                 const Coordinates& coords) {
  std::vector<size_t> sizes;
  for (const auto& t : state.tensors()) {
    const Region r = LocalRegion(t.spec, state.num_layers(), layout, coords);
    sizes.push_back(static_cast<size_t>(r.elements()) * t.spec.element_size);
  }
  return sizes;
}

}  // namespace

Status GenerationBuilder::Apply(const proto::NewGeneration& gen) {
  const auto t0 = std::chrono::steady_clock::now();
  // The table is sparse: this worker's own entry and those of the members it sends state to.
  int my_rank = -1;
  for (const auto& m : gen.members) {
    if (m.worker_id == options_.worker_id) my_rank = m.rank;
  }
  if (my_rank < 0 || my_rank >= gen.layout.world()) {
    return InvalidArgumentError("this worker is not a member of the generation");
  }
  const Coordinates my_coords = CoordinatesOf(gen.layout, my_rank);
  // The coordinator's NewGeneration says where this worker stands: a fence from before is over
  // (docs/hosts.md). Should the lease run out again while the generation is built, the next
  // StepEnd asks the coordinator again before any step counts.
  channel_->client().Unfence();
  // The commit made once the state has moved needs an image of the new shards: one is faulted in
  // meanwhile, unless the worker holds enough (see CommitStore::TakeImage).
  commits_->Prefault(ShardSizesIn(*state_, gen.layout, my_coords));
  if (InternalsOf(options_).test_apply_delay.count() > 0) {
    // Test hook (ELASTRA_TEST_APPLY_DELAY_MS): widens the window in which a test kills a worker
    // during a reconfiguration.
    std::this_thread::sleep_for(InternalsOf(options_).test_apply_delay);
  }
  ELASTRA_RETURN_IF_ERROR(RebuildGroups(gen, my_rank));
  const double rebuild_ms = MillisSince(t0);
  const auto t1 = std::chrono::steady_clock::now();
  // The pause commit was copied on another thread while the coordinator gathered the workers and
  // the groups were rebuilt; the state moves only once that copy is done.
  commits_->Settle();

  ELASTRA_RETURN_IF_ERROR(CheckSignature());
  ELASTRA_RETURN_IF_ERROR(RollBackIfNeeded(gen));
  int64_t bytes = 0;
  ELASTRA_ASSIGN_OR_RETURN(bytes, MoveState(gen, my_rank));
  ELASTRA_RETURN_IF_ERROR(BroadcastScalars(gen));
  channel_->client().SetHeartbeatStep(step());
  const double transfer_ms = MillisSince(t1);
  if (!InternalsOf(options_).test_fail_after_move.empty() &&
      InternalsOf(options_).test_fail_after_move == options_.worker_id + ":" + std::to_string(gen.generation)) {
    return InternalError("injected by ELASTRA_TEST_FAIL_AFTER_MOVE after the state move");
  }

  channel_->set_generation(gen.generation);
  layout_ = gen.layout;
  rank_ = my_rank;
  coords_ = my_coords;
  channel_->inbox().ClearPending();
  const auto t2 = std::chrono::steady_clock::now();
  ELASTRA_RETURN_IF_ERROR(CommitNewLayout(bytes));
  const double commit_ms = MillisSince(t2);
  commits_->Prefault(commits_->ShardSizes());  // for the next commit, while training
  ELASTRA_RETURN_IF_ERROR(state_->MoveToDevice());
  checkpoints_->Restart(*state_, layout_, rank_, &channel_->client());
  logging::SetTag("worker " + options_.worker_id + " g" + std::to_string(gen.generation) + " r" +
                  std::to_string(my_rank));
  LOG(INFO) << "generation " << gen.generation << " (" << proto::ToString(gen.reason)
            << "): " << gen.layout.ToString() << ", step " << step() << ", rebuild " << rebuild_ms
            << " ms, transfer " << transfer_ms << " ms (" << bytes << " bytes in, after "
            << commits_->last_settle_wait_ms() << " ms waiting for the pause commit), commit "
            << commit_ms << " ms";
  proto::GenerationReady ready{gen.generation, rebuild_ms, transfer_ms, bytes};
  return channel_->client().Send(MessageType::kGenerationReady, proto::EncodePayload(ready),
                                 gen.generation);
}

Status GenerationBuilder::RebuildGroups(const proto::NewGeneration& gen, int my_rank) {
  // A recovery announced for a later generation dooms this one: stop waiting for its peers.
  channel_->CancelOnRecovery(gen.generation);
  GroupOptions group_options = GroupOptionsFor(gen, my_rank);
  group_options.generation = gen.generation;
  group_options.nccl_reuse = gen.nccl;
  Status built =
      groups_->Rebuild(std::move(group_options), gen.layout, my_rank, gen.keep_groups);
  if (!built.ok()) {
    return built.WithContext("building generation " + std::to_string(gen.generation));
  }
  return OkStatus();
}

Status GenerationBuilder::CheckSignature() {
  // Every worker must have registered the same state: one check before any byte moves.
  int64_t sig[2] = {static_cast<int64_t>(state_->Signature() >> 1),
                    -static_cast<int64_t>(state_->Signature() >> 1)};
  ELASTRA_RETURN_IF_ERROR(groups_->control().Allreduce(sig, 2, DataType::kInt64, ReduceOp::kMax));
  if (sig[0] != -sig[1]) {
    return InvalidArgumentError(
        "workers registered different tensors (signature mismatch): every worker must "
        "register the same state before Start()");
  }
  return OkStatus();
}

Status GenerationBuilder::RollBackIfNeeded(const proto::NewGeneration& gen) {
  bool held = false;
  for (const auto& m : gen.prev_members) held |= m.worker_id == options_.worker_id && m.has_state;
  // A generation that failed after its state move started (a timeout in the move, a failed
  // broadcast) left the shards in its own layout, partly moved, while the step is still that of
  // the commit: roll back to the commit then too (CommitStore::MustRollBack).
  if (held && commits_->MustRollBack(gen.restore_step)) {
    ELASTRA_RETURN_IF_ERROR(commits_->Restore(gen.restore_step));
    channel_->client().SetHeartbeatStep(step());
    LOG(INFO) << "rolled back to the commit of step " << gen.restore_step;
  }
  return OkStatus();
}

Status GenerationBuilder::BroadcastScalars(const proto::NewGeneration& gen) {
  // The scalars (step, data cursor, ...) come from the lowest rank that held the state (any rank
  // after a load from disk: they all read the same); the coordinator names it.
  const int source = gen.scalars_source;
  if (source < 0 || source >= gen.layout.world()) {
    return InvalidArgumentError("the scalars' source rank " + std::to_string(source) +
                                " is not a rank of the generation");
  }
  std::vector<int64_t> scalars;
  for (const auto& [name, value] : state_->scalars()) scalars.push_back(value);
  ELASTRA_RETURN_IF_ERROR(
      groups_->control().Broadcast(scalars.data(), scalars.size(), DataType::kInt64, source));
  auto& mine = TensorCollectionAccess::Scalars(*state_);
  for (size_t i = 0; i < mine.size(); ++i) mine[i].second = scalars[i];
  return OkStatus();
}

Status GenerationBuilder::CommitNewLayout(int64_t bytes_received) {
  // Every member holds a commit of the step it continues from, in the new layout, so a failure
  // right after this rolls back here, not further. A member whose shards did not change (it
  // received nothing and holds the same regions) keeps the commit it made when it paused: the
  // state is that commit, and copying it again would only add to the downtime. Either way the
  // commits are this generation's from now on (PausedReport::commits_layout).
  commits_->set_place(layout_, rank_);
  if (bytes_received != 0 || !commits_->MatchesState()) {
    commits_->Forget();
    return commits_->Commit();
  }
  commits_->KeepNewestOnly();
  return OkStatus();
}

void GenerationBuilder::WarmUp() {
  GroupOptions o;
  o.bind_host = options_.bind_host;
  o.connect_timeout = options_.collective_timeout * 2;
  o.backend = backend_;
  o.device = options_.device;
  groups_->WarmUp(std::move(o));
}

GroupOptions GenerationBuilder::GroupOptionsFor(const proto::NewGeneration& gen, int rank) const {
  GroupOptions o;
  o.store_owner = channel_->StoreFor(gen, rank);
  o.store = o.store_owner.get();
  o.prefix = gen.kv_prefix;
  o.bind_host = options_.bind_host;
  o.timeout = options_.collective_timeout;
  o.connect_timeout = options_.collective_timeout * 2;
  o.backend = backend_;
  o.device = options_.device;
  return o;
}

// Whether state moves among the members run device to device over NCCL: a state on a device,
// NCCL training communicators, and not turned off with ELASTRA_DEVICE_RESHARD=0 (then they are
// staged through host memory over Gloo). Decided alike on every worker of a job.
bool GenerationBuilder::DeviceToDevice() const {
  const char* reshard = std::getenv("ELASTRA_DEVICE_RESHARD");
  return backend_ == Backend::kNccl && state_->device() >= 0 &&
         (reshard == nullptr || std::string(reshard) != "0");
}

StatusOr<int64_t> GenerationBuilder::MoveState(const proto::NewGeneration& gen, int my_rank) {
  if (gen.reason == proto::GenerationReason::kResume) return LoadCheckpoint(gen, my_rank);
  auto planned = StateMoveOf(gen, state_->Spec(), options_.worker_id);
  if (!planned.ok() && planned.status().code() == StatusCode::kFailedPrecondition &&
      !gen.checkpoint_dir.empty()) {
    // Some shard died with its only holder: every worker sees the same and loads from disk.
    LOG(WARNING) << "cannot rebuild the state from memory (" << planned.status().message()
                 << "); loading the newest checkpoint";
    return LoadCheckpoint(gen, my_rank);
  }
  ELASTRA_ASSIGN_OR_RETURN(StateMove move, std::move(planned));
  const int me = move.WorkerIndex(options_.worker_id);
  const Coordinates my_coords = CoordinatesOf(gen.layout, std::max(my_rank, 0));
  const Coordinates* coords = my_rank >= 0 ? &my_coords : nullptr;
  const auto timeout = options_.collective_timeout * 4;
  if (!move.needs_leavers) {
    if (my_rank < 0) return int64_t{0};  // nothing of ours is needed: just go
    if (DeviceToDevice()) {
      // Device shards straight between GPUs over the new NCCL world (its ranks are the plan's
      // workers), no host staging.
      return ExecuteDeviceStateMove(move, groups_->world(), coords, state_, timeout);
    }
    return ExecuteStateMove(move, groups_->control(), coords, state_, timeout, &reshard_arena_);
  }
  // Some shards live only on leaving workers: everyone of the plan meets once more.
  ELASTRA_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> handoff,
      ConnectGroup(GroupOptionsFor(gen), "handoff", me, static_cast<int>(move.workers.size())));
  groups_->SetHandoff(handoff.get());
  auto bytes = ExecuteStateMove(move, *handoff, coords, state_, timeout, &reshard_arena_);
  Status done = bytes.ok() ? handoff->Barrier() : bytes.status();
  groups_->SetHandoff(nullptr);
  if (!done.ok()) return done;
  return bytes;
}

// Loads this worker's shards for generation `gen` from disk (LoadNewestCheckpoint); the commits
// held belong to another timeline then.
StatusOr<int64_t> GenerationBuilder::LoadCheckpoint(const proto::NewGeneration& gen, int my_rank) {
  if (my_rank < 0) return int64_t{0};
  ELASTRA_ASSIGN_OR_RETURN(int64_t bytes,
                           LoadNewestCheckpoint(gen, CoordinatesOf(gen.layout, my_rank),
                                                options_.job, groups_->control(), state_));
  commits_->Forget();
  return bytes;
}

Status GenerationBuilder::HandOff(const proto::NewGeneration& gen) {
  commits_->Settle();  // the pause commit's copy reads the shards that move now
  groups_->Release();
  channel_->CancelOnRecovery(gen.generation);
  auto bytes = MoveState(gen, -1);
  if (!bytes.ok()) return bytes.status();
  commits_->Release();
  return OkStatus();
}

}  // namespace elastra
