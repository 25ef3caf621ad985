// Planner: picks the (dp, pp, tp) layout with the best modelled step time for a set of workers
// and a model, then assigns workers to the layout's ranks so that as little state as possible
// moves from the current placement. The cost model and the assignment method are described in
// docs/resharding.md. Pure computation: thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/model_description.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra {

// The cost model's constants, in one place. Defaults describe an A100-class cluster.
struct CostConstants {
  double device_flops = 312e12;           // peak dense FLOP/s of one device
  double flops_efficiency = 0.45;         // fraction of peak the compute kernels reach
  double memory_bytes_per_s = 2.0e12;     // device memory (HBM) bandwidth
  double intra_host_bytes_per_s = 150e9;  // per-device bandwidth inside a host (NVLink)
  double inter_host_bytes_per_s = 12.5e9; // per-device bandwidth across hosts (100 Gb/s)
  double collective_latency_s = 20e-6;    // fixed cost of one collective or p2p message
  double memory_reserve_gib = 2.0;        // kept free for the runtime and fragmentation
};

// Activation recomputation (Korthikanti et al. 2022): none keeps every activation; selective
// recomputes the attention core (softmax, its dropout, attention over values) in the backward;
// full keeps only each layer's input and recomputes the whole forward.
enum class Recompute : uint8_t { kNone = 0, kSelective = 1, kFull = 2 };
// "none", "selective", "full".
const char* RecomputeName(Recompute r);

// Optional restrictions on the layout, and on the activation-memory techniques the training
// code supports.
struct PlannerPins {
  int tp = 0;            // 0: free; else the only allowed tp
  int pp = 0;            // 0: free; else the only allowed pp
  bool only_dp = false;  // keep the current tp and pp (needs a current placement)
  std::optional<Recompute> recompute;     // unset: the planner picks none, selective or full
  std::optional<bool> sequence_parallel;  // unset: the planner picks (only with tp > 1)
};

// A layout with its modelled costs (seconds per training step), for the recomputation and
// sequence-parallelism choice that makes it fastest while it fits in memory.
struct LayoutScore {
  Layout layout;
  Recompute recompute = Recompute::kNone;  // activation recomputation chosen for this layout
  bool sequence_parallel = false;  // layer-norm and dropout activations split over TP (tp > 1)
  int64_t micro_batches = 0;  // per pipeline per step: global_batch / (dp * micro_batch)
  int64_t in_flight = 0;      // micro-batches whose activations stage 0 holds (1F1B): min(pp, m)
  double step_time_s = 0;     // the score: compute + tp + bubble + pp + dp
  double compute_s = 0;       // m slots of the slowest stage's compute, recomputation included
  double recompute_s = 0;     // the part of compute_s spent recomputing activations
  double bubble_s = 0;        // pipeline fill and drain: pp - 1 slots of the slowest stage
  double tp_comm_s = 0;       // TP activation collectives on the critical path (m slots)
  double pp_comm_s = 0;       // stage-boundary activation sends
  double dp_comm_s = 0;       // gradient allreduce (reduce-scatter + allgather with ZeRO-1)
  double memory_gib = 0;      // per-device estimate on the fullest stage
  double activation_gib = 0;  // the activations' part of memory_gib
  bool tp_in_host = true;     // every TP group fits inside one host
};

// The score as a JSON object (layout, dp, pp, tp, workers, recompute, sequence_parallel, every
// time and memory figure, micro_batches, in_flight, tp_in_host): the one place that names them.
std::string LayoutScoreJson(const LayoutScore& score);

// The workers, in worker-id order (ids 0..N-1): host_of_worker[w] is worker w's host.
// The current placement: worker_of_rank of the current layout (empty when there is none).
struct CurrentPlacement {
  Layout layout;
  std::vector<int> worker_of_rank;
};

// Bytes worker-at-`from_rank` of the current layout already holds of what `to_rank` of `to`
// needs. The planner's default is an analytic estimate from the model description; callers
// that link the worker's region math pass the exact count (elastra plan does).
using KeptBytesFn = std::function<int64_t(int from_rank, const Layout& to, int to_rank)>;

struct PlannerOptions {
  CostConstants cost;
  int alternatives = 4;  // how many next-best layouts to return
  // Rank assignment: solved exactly (which workers stay and which ranks they take, TP groups
  // inside hosts) when the hosts hold at most this many TP groups (slots) and the search ends
  // within its budget; above it, each TP group goes to the host of the worker that held its
  // rank or its proportional rank, each host placed exactly (see docs/resharding.md).
  int exact_assignment_max_blocks = 128;
  KeptBytesFn kept_bytes;  // empty: the analytic estimate
  // kept_bytes answers from its own table (by class of equivalent ranks): the assignment calls
  // it for every pair instead of memoising each pair of ranks itself.
  bool kept_bytes_memoized = false;
};

struct PlanResult {
  LayoutScore best;
  std::vector<LayoutScore> alternatives;  // next in the ranking, best first
  // Empty when best uses every worker; else why no layout that does is valid (e.g. "no valid
  // layout uses all 7 workers: dp=7,pp=1,tp=1: global_batch (64) is not a multiple of ...").
  std::string idle_reason;
  // When best uses every worker but a host-contained layout on fewer workers is modelled faster
  // (every worker is used whenever possible, so that one is not chosen): that layout.
  std::optional<LayoutScore> faster_with_idle_workers;
  std::vector<int> worker_of_rank;        // the assignment for best.layout
  int64_t kept_bytes = 0;                 // state the assigned workers keep (per KeptBytesFn)
  int64_t layouts_considered = 0;
  bool exact_assignment = true;
};

// Scores one layout with its best recomputation and sequence-parallelism choice;
// kInvalidArgument with the reason when it is not valid for the model and the workers
// (divisibility, pipeline depth, batch, memory even with full recomputation).
// Only the recompute and sequence_parallel pins apply here.
StatusOr<LayoutScore> ScoreLayout(const ModelDescription& model, const Layout& layout,
                                  const std::vector<int>& host_of_worker,
                                  const CostConstants& cost = {}, const PlannerPins& pins = {});

// Chooses the layout and assigns workers. The ranking: TP groups inside hosts first (a layout
// with TP across hosts is chosen only when no host-contained one is valid), then layouts that use
// every worker, then the modelled step time (ties: fewer workers, smaller tp, smaller pp).
// kInvalidArgument when there are no workers, a pin cannot be met (only_dp without a current
// placement), or no layout is valid (with the reason the closest candidates failed).
StatusOr<PlanResult> PlanLayout(const ModelDescription& model,
                                const std::vector<int>& host_of_worker, const PlannerPins& pins,
                                const CurrentPlacement& current,
                                const PlannerOptions& options = {});

// Assigns the workers to the ranks of `layout` (TP groups inside one host whenever the hosts can
// hold them all, then PP, then DP), keeping as much state as possible from `current`: which
// workers stay on a shrink is part of that choice. *exact: the result is proven to keep the most
// bytes; *kept: the bytes kept (per KeptBytesFn). kInvalidArgument when there are fewer workers
// than ranks or the current placement is malformed.
StatusOr<std::vector<int>> AssignRanks(const ModelDescription& model, const Layout& layout,
                                       const std::vector<int>& host_of_worker,
                                       const CurrentPlacement& current,
                                       const PlannerOptions& options = {},
                                       bool* exact = nullptr, int64_t* kept = nullptr);

// The analytic kept-bytes estimate used when PlannerOptions::kept_bytes is empty.
int64_t EstimateKeptBytes(const ModelDescription& model, const Layout& from, int from_rank,
                          const Layout& to, int to_rank);

// Solves min sum cost[i][assign[i]] with distinct columns, rows <= cols (Hungarian algorithm,
// O(rows^2 * cols)). Returns assign (size rows).
std::vector<int> SolveAssignment(const std::vector<std::vector<int64_t>>& cost);

}  // namespace elastra
