// Group building: the communicators of a generation (world plus its dp, pp and tp groups, and
// with NCCL the Gloo control world beside them), connected over the rendezvous store, and the
// reuse of the previous generation's NCCL world. Free functions and plain structs; a GroupSet is
// thread-compatible except where its methods say otherwise (GroupManager owns the worker's).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/kv_store.h"
#include "protocol/messages.h"
#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "worker/group_gate.h"

namespace elastra {

// The communicators of one generation. Groups of the same ranks share one communicator (with
// pp = tp = 1 the dp group is the world). `world`, `dp`, `pp` and `tp` are the training
// communicators the program uses; `control` is the worker's own (step agreement, checks, scalars,
// state moves on host buffers): a Gloo world, the same object as `world` with the Gloo backend.
struct GroupSet {
  // The rendezvous store its communicators were built over, kept while they live (the pairs
  // they connect on demand use it). First: destroyed after them.
  std::shared_ptr<KeyValueStore> store;
  std::shared_ptr<Communicator> world, dp, pp, tp;
  std::shared_ptr<Communicator> control;
  // By proto::GroupKind: the dp, pp and tp groups that are not the world, each behind the gate
  // that tells whether it may be kept (the same objects as dp, pp and tp); null for a group that
  // is the world.
  std::array<std::shared_ptr<GroupGate>, 3> gates;
  uint64_t generation = 0;  // the generation it was built for (GroupOptions::generation)
  // The generation's groups: what a worker reports of them at a pause.
  std::vector<proto::GroupHealth> Health() const;
  // Breaks every call in flight on every communicator and releases them.
  void Abort();
  // Breaks every call in flight without ever waiting on the device, for the worker's I/O thread:
  // an NCCL world is only interrupted (NcclCommunicator::Interrupt: revoked, NCCL 2.28.7+, and
  // kept, so that the next generation can shrink it instead of starting NCCL afresh), the gated
  // groups stopped (GroupGate::Stop: broken only when a call is inside one, so that an idle group
  // can be kept), the Gloo control world aborted.
  void Interrupt();
  // Breaks every call in flight and releases the communicators, the NCCL ones later on the
  // training thread (as Interrupt() does for the groups).
  void RequestAbort();
};

struct GroupOptions {
  KeyValueStore* store = nullptr;
  // Who owns `store`, when the options do (a generation's PeerRecordStore): BuildGroups hands it
  // to the GroupSet, which keeps it as long as its communicators.
  std::shared_ptr<KeyValueStore> store_owner;
  std::string prefix;  // the generation's kv prefix
  std::string bind_host = "127.0.0.1";
  std::chrono::milliseconds timeout{5000};
  std::chrono::milliseconds connect_timeout{10000};
  // kGloo: every communicator is Gloo. kNccl: the training communicators are NCCL
  // communicators on CUDA device `device`: one NCCL world (unique id through `store`) and its
  // groups made by ncclCommSplit; `control` is a Gloo world beside them.
  Backend backend = Backend::kGloo;
  int device = -1;
  // The generation built (GroupSet::generation), and what the coordinator says of making its
  // NCCL world from an earlier one (NewGeneration::nccl).
  uint64_t generation = 0;
  proto::NcclReuse nccl_reuse;
  // NCCL: the previous generation's communicators (not owned; may be null). When every rank
  // still holds that NCCL world (built for nccl_reuse.from_generation) and the new members are
  // among its ranks, the new world is made from it (ncclCommShrink without the ranks that left,
  // ncclCommSplit when the order changes) instead of a fresh init; the ranks agree on that over
  // the Gloo control world first.
  GroupSet* previous = nullptr;
  // By proto::GroupKind: the previous generation's groups this generation keeps
  // (NewGeneration::keep_groups), used as they are instead of built; null: build it. With NCCL
  // the rank still takes part in the world's ncclCommSplit of that kind, with no color.
  std::array<std::shared_ptr<GroupGate>, 3> keep;
};

// How a generation's NCCL world can be made from the previous generation's (BuildGroups with
// backend "nccl"): possible when every new member was a rank of the old world and the old world
// is still held (not released) and either healthy or has ranks to exclude (a broken world can
// only be shrunk). `excluded`: how many old ranks' workers are not members any more; `exclude`:
// those old ranks, ascending (from the coordinator on the new rank 0 only; on every rank after
// AgreeNcclReuse). `renumber`: the survivors' old order is not the new rank order (one
// ncclCommSplit fixes it).
struct NcclReusePlan {
  bool possible = false;
  int excluded = 0;
  std::vector<int> exclude;
  bool renumber = false;
};
// From the coordinator's part (`reuse`: every new member was an old rank, which to exclude, a
// new order) and the old world's health, which only the worker knows.
NcclReusePlan PlanNcclReuse(const proto::NcclReuse& reuse, const Status& old_world_health);
// The same from the worker ids of both worlds, by rank (proto::NcclReuseOf).
NcclReusePlan PlanNcclReuse(const std::vector<std::string>& old_member_ids,
                            const std::vector<std::string>& new_member_ids,
                            const Status& old_world_health);

// Every rank of the new generation calls this with its plan, over the control world (new ranks):
// afterwards every rank holds the same plan. Possible only when every rank's plan was and all
// agree on `excluded`; then `exclude` is the new rank 0's list, broadcast, on every rank. Rank 0's
// list must hold `excluded` ascending ranks below `old_world`, else no rank reuses the world (a
// fresh init instead). A failure of the control world itself is returned (kPeerLost, kTimedOut).
Status AgreeNcclReuse(NcclReusePlan* plan, int rank, int old_world, Communicator& control,
                      std::chrono::milliseconds timeout);

// Connects the ranks of one group under `options.prefix` + name + "/".
StatusOr<std::unique_ptr<Communicator>> ConnectGroup(const GroupOptions& options,
                                                     const std::string& name, int rank, int size);

// Builds the world and then each group that differs from it, one after another (see
// docs/design-notes.md). The first failure is returned; kUnavailable for backend "nccl" in a
// build without NCCL.
StatusOr<GroupSet> BuildGroups(const GroupOptions& options, const Layout& layout, int rank);

// What a standby worker makes before it is needed (GroupManager::WarmUp), so that its first
// generation's build does not: the gloo device its communicators on options.bind_host share (an
// I/O thread), and with the NCCL backend on a device a one-rank NCCL communicator there (the
// CUDA context, and NCCL's init and kernels loaded). Held while it lives; it holds no peer.
struct WarmGroups {
  std::shared_ptr<void> gloo_device;
  std::unique_ptr<Communicator> nccl;
};

// Makes them: the first failure (kUnavailable when gloo cannot bind options.bind_host; NCCL's
// error on the device). Only options.bind_host, backend, device and connect_timeout are read.
StatusOr<WarmGroups> WarmUpGroups(const GroupOptions& options);

}  // namespace elastra
