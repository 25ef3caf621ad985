// LayoutPolicy: which (dp, pp, tp) layout a generation gets and which worker takes which rank.
// It learns the job's state (the tensors the workers registered) and the model description for
// the planner from the first join that carries them; after that it answers questions with no
// side effect but log lines: does a layout fit the state, the default layout for a worker count,
// the planner's choice for workers on their hosts, and the rank assignment that keeps the most
// state in place. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "planner/model_description.h"
#include "planner/planner.h"
#include "elastra/layout.h"
#include "elastra/sharding.h"
#include "elastra/status.h"

namespace elastra::coordinator {

class LayoutPolicy {
 public:
  // Takes the state and the model description ({"model": ..., "pins": {...}}) from `join` when
  // none is known yet. A model description that does not parse is logged and ignored.
  // True when it learned the state now (the first joiner with tensors): to be journaled.
  bool Learn(const proto::JoinRequest& join);
  // The state a restarted coordinator read back from its journal.
  void RestoreState(const StateSpec& state) {
    if (state_.tensors.empty()) state_ = state;
    need_.clear();
  }

  const StateSpec& state() const { return state_; }
  bool has_model() const { return model_.has_value(); }

  // kInvalidArgument with the reason when the registered state cannot be laid out as `layout`
  // (always OK before a worker registered its state).
  Status Validate(const Layout& layout) const;

  // The layout for `workers` workers when none was asked for: keeps the pipeline and tensor
  // degrees of `current` when they divide the count and the state allows it, else pure data
  // parallelism.
  Layout Default(size_t workers, const Layout& current) const;

  // The layout for workers on `hosts` (one host name per worker) when none was asked for: the
  // planner's best layout that uses every worker and fits the state, when the workers gave a
  // model description (and did not pin data parallelism); Default() otherwise.
  Layout Choose(const std::vector<std::string>& hosts, const Layout& current) const;

  // ---- Memory (layout_policy_memory.cc; docs/recovery.md) ----

  // The bytes a worker needs at the fullest rank of `layout`: its shards of the registered state
  // by their sharding rules (ZeRO-sharded tensors by the data-parallel rank too), plus the
  // modelled activations and workspace when the workers gave a model description. 0 before a
  // worker registered its state. Memoized per layout.
  int64_t NeedBytes(const Layout& layout) const;
  // OK when a worker with `budget` bytes (0: unlimited) holds its share of `layout`; else
  // kResourceExhausted with the numbers: "layout dp=1,pp=1,tp=1 needs 3.1 GiB a worker, w4 has
  // 2.0 GiB" (`who` names the worker with that budget).
  Status CheckMemory(const Layout& layout, int64_t budget, const std::string& who) const;

  // The layout for up to `hosts.size()` workers (one host name each) whose smallest memory
  // budget is `budget` (0: unlimited), or nullopt when no layout of them fits. With
  // `keep_model_parallel` (a recovery, a regrow) the pipeline and tensor degrees of `current` are
  // kept whenever at least one replica of them fits in the workers (dp = workers / (pp x tp), the
  // rest stay standby); otherwise Choose()'s layout of every worker when it fits; otherwise the
  // fitting layout with the most ranks (ties: the current pp and tp, then fewer model-parallel
  // ranks). A layout that uses fewer workers than it was given leaves the others standby.
  std::optional<Layout> ChooseFitting(const std::vector<std::string>& hosts, int64_t budget,
                                      const Layout& current, bool keep_model_parallel) const;

  // `layout.world()` of `candidates` (on `hosts`, one per candidate) ordered by their rank in
  // `layout`: the assignment that keeps the most of the registered state in place, given that
  // `current_members` hold the ranks of `current`, with tensor-parallel groups inside hosts when
  // the hosts can hold them. Candidates left out leave the job. When nothing can be kept in place
  // (no state registered, no current placement, a current member is not a candidate): the
  // candidates' own order with tp = 1, else host blocks (each TP group on one host when
  // possible). The candidates' own order when the assignment fails (logged); all candidates when
  // there are fewer than the layout's ranks.
  std::vector<std::string> Assign(const Layout& layout, const std::vector<std::string>& candidates,
                                  const std::vector<std::string>& hosts, const Layout& current,
                                  const std::vector<std::string>& current_members) const;

 private:
  StateSpec state_;
  std::string model_json_;
  std::optional<ModelDescription> model_;
  PlannerPins pins_;
  // NeedBytes by layout (dp, pp, tp packed), for the state registered when it was computed.
  mutable std::map<std::tuple<int, int, int>, int64_t> need_;
};

// "3.1 GiB", "512.0 MiB", "4096 B": bytes for a person.
std::string HumanBytes(int64_t bytes);

// The members, by rank, of a layout with the pipeline and tensor degrees of `current` and `dp`
// replicas, made from the workers that survived it so that as little state as possible moves:
// the replicas with the most survivors are kept, each survivor at its pipeline and tensor
// position; a missing position is taken by a survivor of a replica not kept that held the same
// position (it holds the same shards), else by one of `spares` (standby workers: only the lost
// worker's shards move to it; one on the host of the replica's others when there is one, so that
// tensor-parallel groups stay inside hosts). `current_members` are `current`'s members by rank;
// `survivors` those of them still in the job with their state; `host_of` gives a worker's host
// (may be empty: hosts are then not looked at). Empty when there are not enough workers.
std::vector<std::string> KeepReplicas(
    const Layout& current, const std::vector<std::string>& current_members,
    const std::vector<std::string>& survivors, const std::vector<std::string>& spares, int dp,
    const std::function<std::string(const std::string&)>& host_of = {});

// Bounds on a state a worker registers (JoinRequest::state), so that the region math over it
// (volumes, bytes kept, totals) never overflows int64_t.
inline constexpr int64_t kMaxTensorDim = int64_t{1} << 40;
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 48;
inline constexpr size_t kMaxElementSize = 64;
inline constexpr int64_t kMaxStateBytes = int64_t{1} << 56;

// kInvalidArgument naming the tensor when `state` is not one a job can have: a tensor that fails
// ValidateTensor for a single rank, a dimension over kMaxTensorDim, more than kMaxTensorElements
// elements, an element size over kMaxElementSize, or more than kMaxStateBytes in all.
Status CheckState(const StateSpec& state);

// For each host name, the index of that host in order of first appearance: {b, a, b} -> {0, 1, 0}.
std::vector<int> HostIndices(const std::vector<std::string>& hosts);

}  // namespace elastra::coordinator
