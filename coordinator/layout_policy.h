// LayoutPolicy: which (dp, pp, tp) layout a generation gets and which worker takes which rank.
// It learns the job's state (the tensors the workers registered) and the model description for
// the planner from the first join that carries them; after that it answers questions with no
// side effect but log lines: does a layout fit the state, the default layout for a worker count,
// the planner's choice for workers on their hosts, and the rank assignment that keeps the most
// state in place. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstddef>
#include <optional>
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
};

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
