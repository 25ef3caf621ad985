// The state move of a generation change: the reshard plan that takes the training state from
// where it is (the previous layout, its ranks' holders) to where the new layout wants it. The
// coordinator plans it once from the full member tables (PlanStateMove) and addresses each
// recipient its part (MoveAddresser: its own entries, the entries of the workers it trades with,
// the transfers it sends or receives); each worker rebuilds from that part the plan restricted to
// itself (StateMoveOf), which the executor runs exactly as it would the whole plan: the same
// copies and the same transfers in the same order, so both sides of a pair agree on every
// message. Pure computation: thread-safe, but for a MoveAddresser's Address (thread-compatible: it
// reuses scratch vectors).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "common/id_index.h"
#include "protocol/messages.h"
#include "state/plan/reshard_plan.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra {

// The reshard plan of a generation change, numbered for execution: workers 0..n-1 are the new
// members by new rank, n.. the previous members that leave alive and still hold state (they
// hand their shards off before they go). A worker's plan (StateMoveOf) holds only its own copies
// and transfers; `workers` then names only itself and its peers (the others are empty).
struct StateMove {
  ReshardPlan plan;
  std::vector<std::string> workers;  // plan worker id -> worker id
  int new_members = 0;
  bool needs_leavers = false;  // some transfer is sent by a leaving worker
  int WorkerIndex(const std::string& id) const;
};

// From the full tables: `members` by new rank, `prev_members` by old rank (has_state false for a
// rank whose part is lost). First without the leaving workers: when the staying ones hold
// everything (replicas), the leavers go at once and the move runs on the new world alone.
// kFailedPrecondition when some part of the state has no live holder. `options` go to
// BuildReshardPlan (the coordinator lists no copies: each worker lists its own).
StatusOr<StateMove> PlanStateMove(const StateSpec& state, const Layout& layout,
                                  const std::vector<proto::Member>& members,
                                  const Layout& prev_layout,
                                  const std::vector<proto::Member>& prev_members,
                                  const ReshardPlanOptions& options = {});

// The coordinator's side: addresses each recipient its part of one generation change. O(N) to
// set up; each Address costs O(1) plus the recipient's transfers.
class MoveAddresser {
 public:
  // `members` and `prev_members`: the full tables as for PlanStateMove (Member::rank is set
  // here). `planned`: PlanStateMove's answer; `plan_kind` kNone when nothing was planned (a job
  // resumed from disk), else kMove and the answer's status decides.
  MoveAddresser(const StateSpec& state, Layout layout, std::vector<proto::Member> members,
                Layout prev_layout, std::vector<proto::Member> prev_members,
                StatusOr<StateMove> planned, proto::MovePlan plan_kind);
  // Not copyable or movable: the indexes point into this object's lists.
  MoveAddresser(const MoveAddresser&) = delete;
  MoveAddresser& operator=(const MoveAddresser&) = delete;

  // Fills gen->members, gen->prev_members and gen->move for the recipient `id` (a member or a
  // leaving worker), reusing their capacity. Not thread-safe: it reuses scratch of this object.
  // `rank`: the recipient's new rank when the caller knows it (-1 otherwise), tried first so the
  // lookup by id costs a comparison instead of a hash; a wrong one only costs the hash.
  void Address(const std::string& id, proto::NewGeneration* gen, int rank = -1) const;

  // The lowest new rank whose worker held the state (0 when none did).
  int32_t ScalarsSource() const;
  const StatusOr<StateMove>& planned() const { return planned_; }

 private:
  const StateSpec& state_;
  Layout layout_, prev_layout_;
  std::vector<proto::Member> members_, prev_members_;
  StatusOr<StateMove> planned_;
  proto::MovePlan plan_kind_;
  // Each worker's new rank, old rank and plan index (-1 when none): one lookup per recipient.
  struct Ranks {
    int new_rank = -1;
    int old_rank = -1;
    int plan_index = -1;
    bool held = false;  // a previous member that holds state
  };
  // Where `id`'s Ranks are in ranks_: a new member's at its position in member_ids_, a previous
  // member's that is not a new one after them; -1 for any other id. Flat indexes, not a hash
  // node per worker (docs/scale.md).
  int Slot(const std::string& id, int rank = -1) const;
  std::vector<std::string> member_ids_;  // members_' ids, by new rank
  std::vector<std::string> other_ids_;   // prev_members_' ids that are not members, by old rank
  IdIndex member_index_, other_index_;
  std::vector<Ranks> ranks_;  // member_ids_, then other_ids_
  std::vector<int> old_rank_of_worker_;                 // by plan worker, -1 when none
  std::vector<std::vector<int>> transfers_of_worker_;  // indices into plan.transfers, in order
  mutable std::vector<int> new_ranks_, old_ranks_;     // Address's scratch, reused
};

// The worker's side: the state move this worker (`worker_id`) takes part in, from the
// NewGeneration addressed to it. kFailedPrecondition when the coordinator found some shard
// without a live holder (then the checkpoint is loaded), kInvalidArgument when it refused the
// plan, planned nothing, or planned for another number of tensors than `state` has.
StatusOr<StateMove> StateMoveOf(const proto::NewGeneration& gen, const StateSpec& state,
                                const std::string& worker_id);

// The copies worker `worker` makes from its old shards (at `from_coords` of `from`, null when it
// held nothing) into its new ones (`to_coords` of `to`), in the order BuildReshardPlan lists them.
std::vector<Transfer> LocalCopies(const StateSpec& state, const Layout& from,
                                  const Coordinates* from_coords, const Layout& to,
                                  const Coordinates& to_coords, int worker);

// Whether rank `a_rank` of layout `a` and rank `b_rank` of layout `b` hold the same part of
// `state`: the same region of every tensor (true for any two ranks of a data-parallel change of
// replicated state; ZeRO-1 parts differ by dp rank). False when `state` has no tensors, or for a
// layout or rank that is not valid for it (e.g. read from a frame).
bool SamePart(const StateSpec& state, const Layout& a, int a_rank, const Layout& b, int b_rank);

}  // namespace elastra
