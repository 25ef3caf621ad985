#include "worker/group_building.h"

#include <algorithm>
#include <map>
#include <set>

#include "collectives/gloo/gloo_communicator.h"
#include "common/logging.h"
#include "elastra/config.h"
#if ELASTRA_HAVE_NCCL
#include "collectives/nccl/nccl_communicator.h"
#endif

namespace elastra {

void GroupSet::Abort() {
  for (auto* c : {world.get(), dp.get(), pp.get(), tp.get(), control.get()}) {
    if (c != nullptr) c->Abort();
  }
}

// The world is interrupted (NCCL keeps it for a shrink), every other group broken without waiting
// on the device; on Gloo and MPI both are Abort().
void GroupSet::Interrupt() {
  if (world == nullptr) return Abort();
  world->Interrupt();
  for (auto& gate : gates) {
    if (gate != nullptr) gate->Stop();
  }
  for (auto* c : {dp.get(), pp.get(), tp.get(), control.get()}) {
    const bool gated = std::any_of(gates.begin(), gates.end(),
                                   [c](const auto& gate) { return gate.get() == c; });
    if (c != nullptr && c != world.get() && !gated) c->AbortWithoutWaiting();
  }
}

std::vector<proto::GroupHealth> GroupSet::Health() const {
  std::vector<proto::GroupHealth> out;
  for (const auto& gate : gates) {
    if (gate != nullptr) out.push_back(gate->Health());
  }
  return out;
}

void GroupSet::RequestAbort() {
  for (auto* c : {world.get(), dp.get(), pp.get(), tp.get(), control.get()}) {
    if (c != nullptr) c->AbortWithoutWaiting();
  }
}

namespace {

// The ranks of `layout` that share every coordinate with `rank` except the one `group` varies.
std::vector<int> GroupRanks(const Layout& layout, int rank, char group) {
  const Coordinates me = CoordinatesOf(layout, rank);
  std::vector<int> ranks;
  for (int r = 0; r < layout.world(); ++r) {
    const Coordinates c = CoordinatesOf(layout, r);
    bool same = (group == 'd' || c.dp_rank == me.dp_rank) &&
                (group == 'p' || c.pp_rank == me.pp_rank) &&
                (group == 't' || c.tp_rank == me.tp_rank);
    if (same) ranks.push_back(r);
  }
  return ranks;
}

// 'd', 'p' or 't': a group kind's letter in GroupRanks and the groups' names.
char GroupLetter(uint8_t kind) {
  return kind == proto::kDpGroup ? 'd' : kind == proto::kPpGroup ? 'p' : 't';
}

// The group of `kind` the options keep, reopened, when it is the rank's group of this layout (at
// `index` among `size` ranks); nullptr when none is kept.
std::shared_ptr<GroupGate> KeptGroup(const GroupOptions& options, uint8_t kind, int index,
                                     size_t size) {
  const std::shared_ptr<GroupGate>& kept = options.keep[kind];
  if (kept == nullptr) return nullptr;
  if (kept->kind() != kind || kept->rank() != index || static_cast<size_t>(kept->size()) != size) {
    // The coordinator keeps only groups of the same members in the same order: a mismatch is a
    // bug; building instead leaves the others waiting for this rank until their timeout.
    LOG(WARNING) << "the kept " << GroupLetter(kind) << "p group is rank " << kept->rank()
                 << " of " << kept->size() << ", not " << index << " of " << size
                 << "; building it";
    return nullptr;
  }
  kept->Reopen(options.generation);
  return kept;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> ConnectGroup(const GroupOptions& o,
                                                     const std::string& name, int rank, int size) {
  GlooOptions go;
  go.store = o.store;
  go.prefix = o.prefix + name + "/";
  go.rank = rank;
  go.size = size;
  go.hostname = o.bind_host;
  go.timeout = o.timeout;
  go.connect_timeout = o.connect_timeout;
  return CreateGlooCommunicator(go);
}

NcclReusePlan PlanNcclReuse(const proto::NcclReuse& reuse, const Status& old_world_health) {
  NcclReusePlan plan;
  plan.excluded = reuse.excluded;
  // Released (aborted) worlds are gone.
  if (old_world_health.code() == StatusCode::kAborted || !reuse.possible) return plan;
  if (!old_world_health.ok() && reuse.excluded == 0) return plan;  // a broken world can only shrink
  plan.possible = true;
  plan.exclude.assign(reuse.exclude.begin(), reuse.exclude.end());
  plan.renumber = reuse.renumber;
  return plan;
}

Status AgreeNcclReuse(NcclReusePlan* plan, int rank, int old_world, Communicator& control,
                      std::chrono::milliseconds timeout) {
  bool able = plan->possible;
  if (able && rank == 0) {
    // The list the others will take: exactly `excluded` old ranks, ascending, in the old world.
    const std::vector<int>& x = plan->exclude;
    able = static_cast<int>(x.size()) == plan->excluded;
    for (size_t i = 0; able && i < x.size(); ++i) {
      able = x[i] >= 0 && x[i] < old_world && (i == 0 || x[i - 1] < x[i]);
    }
    if (!able) LOG(WARNING) << "the nccl ranks to exclude are malformed; starting NCCL afresh";
  }
  // One allreduce (max): whether any rank is unable, and the largest and the least `excluded`.
  int64_t agreed[3] = {able ? 0 : 1, plan->excluded, -static_cast<int64_t>(plan->excluded)};
  ELASTRA_RETURN_IF_ERROR(control.Allreduce(agreed, 3, DataType::kInt64, ReduceOp::kMax, timeout));
  if (agreed[0] != 0 || agreed[1] != -agreed[2]) {
    plan->possible = false;
    plan->exclude.clear();
    return OkStatus();
  }
  if (plan->excluded > 0) {
    std::vector<int32_t> list(plan->exclude.begin(), plan->exclude.end());
    list.resize(plan->excluded);
    ELASTRA_RETURN_IF_ERROR(
        control.Broadcast(list.data(), list.size(), DataType::kInt32, /*root=*/0, timeout));
    plan->exclude.assign(list.begin(), list.end());
  }
  return OkStatus();
}

NcclReusePlan PlanNcclReuse(const std::vector<std::string>& old_member_ids,
                            const std::vector<std::string>& new_member_ids,
                            const Status& old_world_health) {
  return PlanNcclReuse(proto::NcclReuseOf(old_member_ids, new_member_ids), old_world_health);
}

namespace {

#if ELASTRA_HAVE_NCCL
// The new NCCL world made from the previous one, when every rank can (agreed over `control`):
// ncclCommShrink without the ranks whose workers left (NCCL_SHRINK_ABORT: the old world may be
// broken by a failure, and every survivor must use the same mode), then ncclCommSplit with the new
// ranks as keys when the survivors' old order is not the new one. nullptr when a fresh init is
// needed (new workers, nothing to exclude from a broken world, a rank without the old world).
StatusOr<std::shared_ptr<NcclCommunicator>> ReuseNcclWorld(const GroupOptions& options,
                                                           int rank, Communicator& control) {
  GroupSet* previous = options.previous;
  NcclCommunicator* old = nullptr;
  if (previous != nullptr && previous->world != nullptr &&
      previous->world->backend() == Backend::kNccl) {
    old = static_cast<NcclCommunicator*>(previous->world.get());
  }
  const proto::NcclReuse& reuse = options.nccl_reuse;
  NcclReusePlan plan;
  if (old != nullptr && previous->generation == reuse.from_generation &&
      reuse.from_world == old->size()) {
    plan = PlanNcclReuse(reuse, old->health());
    // An interrupted world is being revoked (NCCL 2.28.7+) or was released (NCCL reported an
    // error on it); wait, bounded, until NCCL has settled. On a timeout or a release the check
    // below fails and every rank starts afresh.
    if (plan.possible && !old->health().ok()) {
      Status settled = old->Quiesce(options.timeout);
      if (!settled.ok()) LOG(INFO) << "the previous nccl world did not settle: " << settled;
    }
    // NCCL refuses to shrink or split a world whose own state is an error (after a SIGKILLed
    // peer its proxy has usually seen the connection close; a revoke does not clear that) or in
    // progress; a rank that started a shrink would then wait out connect_timeout for one that
    // could not.
    if (plan.possible && !old->CanMakeChild()) {
      LOG(INFO) << "the previous nccl world cannot be shrunk or split (NCCL reports an error); "
                   "starting NCCL afresh";
      plan.possible = false;
    }
  }
  // A rank may arrive up to one Quiesce() bound (options.timeout) after the others: the agreement
  // waits that long on top of its own timeout, so that a slow revoke means a fresh init, as
  // intended, not a failed generation. It also hands every rank the list to exclude.
  ELASTRA_RETURN_IF_ERROR(
      AgreeNcclReuse(&plan, rank, reuse.from_world, control, options.timeout * 2));
  if (!plan.possible) return std::shared_ptr<NcclCommunicator>();
  const std::vector<int>& exclude = plan.exclude;

  std::shared_ptr<NcclCommunicator> base;
  if (exclude.empty()) {
    base = std::static_pointer_cast<NcclCommunicator>(previous->world);
  } else {
    ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> shrunk,
                             old->Shrink(exclude, /*abort=*/true));
    base = std::move(shrunk);
  }
  // `base` numbers the survivors in their old order.
  if (!plan.renumber) {
    LOG(INFO) << "nccl world of " << reuse.from_world - static_cast<int>(exclude.size())
              << " ranks made from the previous one"
              << (exclude.empty() ? " (reused)" : " by ncclCommShrink");
    return base;
  }
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> ordered, base->Split(0, rank));
  base->Abort();  // only the renumbered one is used
  LOG(INFO) << "nccl world of " << reuse.from_world - static_cast<int>(exclude.size())
            << " ranks made from the previous one"
            << (exclude.empty() ? "" : " by ncclCommShrink") << " and renumbered by ncclCommSplit";
  return std::shared_ptr<NcclCommunicator>(std::move(ordered));
}
#endif

// The NCCL training communicators: a world (made from the previous generation's, or by a fresh
// init over the generation's prefix), then one ncclCommSplit per group that differs from the
// world (every rank makes the same calls in the same order: the layout decides them). Color: the
// group's lowest world rank; key: the rank's place in it.
StatusOr<GroupSet> BuildNcclGroups(const GroupOptions& options, const Layout& layout, int rank,
                                   Communicator& control) {
#if ELASTRA_HAVE_NCCL
  ELASTRA_ASSIGN_OR_RETURN(std::shared_ptr<NcclCommunicator> world,
                           ReuseNcclWorld(options, rank, control));
  if (world == nullptr) {
    NcclOptions no;
    no.store = options.store;
    no.id_world = &control;  // the unique id over the control world: nothing of it at the store
    no.prefix = options.prefix + "nccl/world/";
    no.rank = rank;
    no.size = layout.world();
    no.device = options.device;
    no.timeout = options.timeout;
    no.connect_timeout = options.connect_timeout;
    ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> fresh,
                             CreateNcclCommunicator(no));
    world = std::move(fresh);
  }
  GroupSet set;
  NcclCommunicator* nccl_world = world.get();
  set.world = std::move(world);
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    const char g = GroupLetter(kind);
    std::vector<int> ranks = GroupRanks(layout, rank, g);
    std::shared_ptr<Communicator> comm = set.world;
    if (static_cast<int>(ranks.size()) != layout.world()) {
      const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
      // Every rank of the world takes part in each split; one that keeps its group gives no
      // color (NCCL_SPLIT_NOCOLOR) and gets nothing.
      std::shared_ptr<GroupGate> kept = KeptGroup(options, kind, index, ranks.size());
      auto c = nccl_world->Split(kept != nullptr ? -1 : ranks.front(), index);
      if (!c.ok()) {
        set.Abort();
        if (kept != nullptr) kept->Abort();
        return c.status().WithContext(std::string("nccl split of the ") + g + "p group");
      }
      set.gates[kind] = kept != nullptr ? std::move(kept)
                                        : std::make_shared<GroupGate>(std::move(c).value(), kind,
                                                                      options.generation);
      comm = set.gates[kind];
    }
    (g == 'd' ? set.dp : g == 'p' ? set.pp : set.tp) = comm;
  }
  return set;
#else
  (void)options;
  (void)layout;
  (void)rank;
  (void)control;
  return UnavailableError("this build of Elastra has no NCCL backend (ELASTRA_BACKEND=nccl)");
#endif
}

}  // namespace

StatusOr<WarmGroups> WarmUpGroups(const GroupOptions& options) {
  WarmGroups warm;
  ELASTRA_ASSIGN_OR_RETURN(warm.gloo_device, HoldSharedGlooDevice(options.bind_host));
  if (options.backend != Backend::kNccl || options.device < 0) return warm;
#if ELASTRA_HAVE_NCCL
  InMemoryKeyValueStore store;  // one rank: its unique id goes nowhere else
  NcclOptions no;
  no.store = &store;
  no.prefix = "warmup/";
  no.device = options.device;
  no.connect_timeout = options.connect_timeout;
  ELASTRA_ASSIGN_OR_RETURN(warm.nccl, CreateNcclCommunicator(no));
#endif
  return warm;
}

StatusOr<GroupSet> BuildGroups(const GroupOptions& options, const Layout& layout, int rank) {
  // One after the other: gloo contexts connected concurrently in one process sometimes could not
  // be aborted (a blocked call on one waited out its timeout; seen in the kill tests), so the
  // groups are built in sequence. Only 3-D layouts pay for it: with pp = tp = 1 every group is
  // the world.
  if (options.backend == Backend::kNccl) {
    // The Gloo control world first: it carries the step agreement and the state moves, and its
    // rendezvous confirms every rank is here before NCCL's longer init starts.
    ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> control,
                             ConnectGroup(options, "world", rank, layout.world()));
    std::shared_ptr<Communicator> shared_control = std::move(control);
    auto set = BuildNcclGroups(options, layout, rank, *shared_control);
    if (!set.ok()) {
      shared_control->Abort();
      return set.status();
    }
    set->control = std::move(shared_control);
    set->generation = options.generation;
    set->store = options.store_owner;
    return set;
  }
  if (options.backend != Backend::kGloo) {
    return InvalidArgumentError(std::string("the training communicators cannot be ") +
                                BackendName(options.backend) + " (gloo or nccl)");
  }
  GroupSet set;
  ELASTRA_ASSIGN_OR_RETURN(set.world, ConnectGroup(options, "world", rank, layout.world()));
  set.control = set.world;
  set.generation = options.generation;
  set.store = options.store_owner;
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    const char g = GroupLetter(kind);
    std::vector<int> ranks = GroupRanks(layout, rank, g);
    std::shared_ptr<Communicator> comm = set.world;
    // A group spanning the whole world is the world. Groups are named by their lowest member so
    // each group's ranks meet under one prefix.
    if (static_cast<int>(ranks.size()) != layout.world()) {
      const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin());
      std::shared_ptr<GroupGate> gate = KeptGroup(options, kind, index, ranks.size());
      if (gate == nullptr) {
        const std::string name = std::string(1, g) + "p" + std::to_string(ranks.front());
        auto c = ConnectGroup(options, name, index, static_cast<int>(ranks.size()));
        if (!c.ok()) {
          set.Abort();
          for (auto& kept : options.keep) {
            if (kept != nullptr) kept->Abort();
          }
          return c.status().WithContext("group " + name);
        }
        gate = std::make_shared<GroupGate>(std::move(c).value(), kind, options.generation);
      }
      set.gates[kind] = gate;
      comm = std::move(gate);
    }
    (g == 'd' ? set.dp : g == 'p' ? set.pp : set.tp) = comm;
  }
  return set;
}

}  // namespace elastra
