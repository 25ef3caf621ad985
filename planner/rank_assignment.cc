// Rank assignment: the analytic kept-bytes estimate, the groups of workers a TP group stays
// inside, the exact assignment (per-unit Hungarian, local search, branch and bound) and the large
// heuristic, and AssignRanks. See rank_assignment.h, planner.h and docs/resharding.md.
#include "planner/rank_assignment.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/logging.h"
#include "planner/assignment_solver.h"
#include "elastra/sharding.h"

namespace elastra {

using planner_internal::CheckCurrent;
using planner_internal::GroupSearch;

namespace {

// Length of the overlap of [a/na, (a+1)/na) and [b/nb, (b+1)/nb), as a fraction of the whole.
double IntervalOverlap(int a, int na, int b, int nb) {
  const double lo = std::max(static_cast<double>(a) / na, static_cast<double>(b) / nb);
  const double hi = std::min(static_cast<double>(a + 1) / na, static_cast<double>(b + 1) / nb);
  return std::max(0.0, hi - lo);
}

}  // namespace

namespace planner_internal {

Status CheckCurrent(const CurrentPlacement& current, size_t num_workers) {
  if (current.worker_of_rank.empty()) return OkStatus();
  if (static_cast<int>(current.worker_of_rank.size()) != current.layout.world()) {
    return InvalidArgumentError("current placement has " +
                                std::to_string(current.worker_of_rank.size()) + " workers for " +
                                current.layout.ToString());
  }
  std::vector<bool> seen(num_workers, false);
  for (int w : current.worker_of_rank) {
    if (w < 0 || static_cast<size_t>(w) >= num_workers || seen[w]) {
      return InvalidArgumentError("current placement names worker " + std::to_string(w) +
                                  " that is unknown or used twice");
    }
    seen[w] = true;
  }
  return OkStatus();
}

}  // namespace planner_internal

int64_t EstimateKeptBytes(const ModelDescription& m, const Layout& from, int from_rank,
                          const Layout& to, int to_rank) {
  const Coordinates a = CoordinatesOf(from, from_rank), b = CoordinatesOf(to, to_rank);
  const LayerRange la = StageLayers(m.layers, from.pp, a.pp_rank);
  const LayerRange lb = StageLayers(m.layers, to.pp, b.pp_rank);
  const int common = std::max(0, std::min(la.last, lb.last) - std::max(la.first, lb.first));
  const double tp = IntervalOverlap(a.tp_rank, from.tp, b.tp_rank, to.tp);
  const double dp = m.zero ? IntervalOverlap(a.dp_rank, from.dp, b.dp_rank, to.dp) : 1.0;
  const double ds = static_cast<double>(m.dtype_size());
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.ffn_hidden);
  // Per element kept: the parameter, and the optimizer's 12 bytes (sharded over DP with ZeRO-1).
  auto kept = [&](double split_elems, double replicated_elems) {
    return ds * (split_elems * tp + replicated_elems) +
           12.0 * dp * (split_elems * tp + replicated_elems);
  };
  double bytes = common * kept(4 * h * h + 3 * h + 2 * h * f + f, 6 * h);
  const bool both_first = la.first == 0 && lb.first == 0;
  const bool both_last = la.last == m.layers && lb.last == m.layers;
  if (both_first) bytes += kept(static_cast<double>(m.vocab) * h, static_cast<double>(m.seq_len) * h);
  if (both_last) bytes += kept(0, 2 * h);
  return static_cast<int64_t>(bytes);
}

namespace {

// Workers that a TP group must stay inside, each with the number of TP groups it can hold: the
// hosts; all workers as one group when TP groups cannot all fit inside hosts; or blocks of tp
// consecutive workers (the large heuristic and the placement without a current layout).
struct WorkerGroups {
  std::vector<std::vector<int>> workers;
  std::vector<int> slots;

  int TotalSlots() const { return std::accumulate(slots.begin(), slots.end(), 0); }
  // Work of placing every slot's ranks on its group at once (Hungarian: rows^2 * cols).
  double PlaceWork(int tp) const {
    double work = 0;
    for (size_t g = 0; g < workers.size(); ++g) {
      const double rows = static_cast<double>(slots[g]) * tp;
      work += rows * rows * static_cast<double>(workers[g].size());
    }
    return work;
  }
};

std::map<int, std::vector<int>> WorkersByHost(const std::vector<int>& host_of_worker) {
  std::map<int, std::vector<int>> by_host;
  for (size_t w = 0; w < host_of_worker.size(); ++w) {
    by_host[host_of_worker[w]].push_back(static_cast<int>(w));
  }
  return by_host;
}

int64_t InHostSlots(const std::map<int, std::vector<int>>& by_host, int tp) {
  int64_t slots = 0;
  for (const auto& [h, ws] : by_host) slots += static_cast<int64_t>(ws.size()) / tp;
  return slots;
}

WorkerGroups HostGroups(const std::map<int, std::vector<int>>& by_host, int tp) {
  WorkerGroups g;
  for (const auto& [h, ws] : by_host) {
    if (static_cast<int>(ws.size()) < tp) continue;  // holds no TP group: its workers leave
    g.workers.push_back(ws);
    g.slots.push_back(static_cast<int>(ws.size()) / tp);
  }
  return g;
}

// Every worker, in host order, as one group: TP groups may cross hosts.
WorkerGroups OneGroup(const std::map<int, std::vector<int>>& by_host, int tp) {
  WorkerGroups g;
  g.workers.emplace_back();
  for (const auto& [h, ws] : by_host) g.workers[0].insert(g.workers[0].end(), ws.begin(), ws.end());
  g.slots.push_back(static_cast<int>(g.workers[0].size()) / tp);
  return g;
}

// Blocks of tp consecutive workers of a host (across hosts, in host order, when `in_hosts` is
// false), one TP group each.
WorkerGroups BlockGroups(const std::map<int, std::vector<int>>& by_host, int tp, bool in_hosts) {
  const WorkerGroups source = in_hosts ? HostGroups(by_host, tp) : OneGroup(by_host, tp);
  WorkerGroups g;
  for (const auto& ws : source.workers) {
    for (size_t i = 0; i + tp <= ws.size(); i += tp) {
      g.workers.emplace_back(ws.begin() + i, ws.begin() + i + tp);
      g.slots.push_back(1);
    }
  }
  return g;
}

// The shift that keeps max_kept * scale * rows well inside int64 (0 in every realistic case:
// it needs more than 10^13 bytes kept by one worker).
int ShiftToFit(int64_t max_kept, int64_t scale, int64_t rows) {
  const int64_t limit =
      std::numeric_limits<int64_t>::max() / 4 / std::max<int64_t>(1, scale * rows);
  int shift = 0;
  while ((max_kept >> shift) > limit) ++shift;
  return shift;
}

// Bytes kept by a worker on a rank of the new layout (memoised), and the placement of a set of
// TP groups ("units") on one group of workers.
class RankAssigner {
 public:
  RankAssigner(const ModelDescription& model, const Layout& layout, const CurrentPlacement& current,
               const PlannerOptions& options, size_t num_workers)
      : model_(model),
        layout_(layout),
        current_(current),
        options_(options),
        old_rank_(num_workers, -1) {
    for (size_t r = 0; r < current.worker_of_rank.size(); ++r) {
      old_rank_[current.worker_of_rank[r]] = static_cast<int>(r);
    }
    const int64_t pairs = static_cast<int64_t>(current.layout.world()) * layout.world();
    if (pairs <= kDenseMemoPairs && !options.kept_bytes_memoized) dense_.assign(pairs, -1);
  }

  int tp() const { return layout_.tp; }

  int64_t Kept(int worker, int rank) {
    const int from = old_rank_[worker];
    if (from < 0) return 0;
    if (options_.kept_bytes_memoized) return options_.kept_bytes(from, layout_, rank);
    const int64_t key = static_cast<int64_t>(from) * layout_.world() + rank;
    if (!dense_.empty() && dense_[key] >= 0) return dense_[key];
    if (dense_.empty()) {
      auto it = memo_.find(key);
      if (it != memo_.end()) return it->second;
    }
    const int64_t k = options_.kept_bytes
                          ? options_.kept_bytes(from, layout_, rank)
                          : EstimateKeptBytes(model_, current_.layout, from, layout_, rank);
    if (!dense_.empty()) {
      dense_[key] = k;
    } else {
      memo_.emplace(key, k);
    }
    return k;
  }

  // Places the ranks of `units` on `workers` (at most one rank per worker): the assignment that
  // keeps the most bytes, and among those (with `tiebreak`) the one closest to Megatron order
  // inside the group. Writes worker_of_rank for those ranks when given; returns the bytes kept.
  int64_t Place(const std::vector<int>& workers, const std::vector<int>& units, bool tiebreak,
                std::vector<int>* worker_of_rank) {
    const int tp = layout_.tp;
    const int rows = static_cast<int>(units.size()) * tp;
    const int cols = static_cast<int>(workers.size());
    CHECK_LE(rows, cols);
    if (rows == 0) return 0;
    // Row-major rows x cols, reused from call to call (one call per TP group and per group).
    kept_.resize(static_cast<size_t>(rows) * cols);
    int64_t max_kept = 0;
    for (int i = 0; i < rows; ++i) {
      const int rank = units[i / tp] * tp + i % tp;
      for (int c = 0; c < cols; ++c) {
        const int64_t k = Kept(workers[c], rank);
        kept_[i * cols + c] = k;
        max_kept = std::max(max_kept, k);
      }
    }
    if (max_kept == 0 && !tiebreak && !worker_of_rank) return 0;  // any order will do
    // Kept bytes first; the sum of the ties (each < cols) never outweighs one (shifted) byte.
    const int64_t scale = tiebreak ? static_cast<int64_t>(rows) * cols + 1 : 1;
    const int shift = ShiftToFit(max_kept, scale, rows);
    auto cost = [&](int i, int c) {
      return -(kept_[i * cols + c] >> shift) * scale + (tiebreak ? std::abs(i - c) : 0);
    };
    if (rows == 1) {
      // One rank: the first column of least cost, the column SolveAssignment picks.
      int pick = 0;
      for (int c = 1; c < cols; ++c) {
        if (cost(0, c) < cost(0, pick)) pick = c;
      }
      if (worker_of_rank) (*worker_of_rank)[units[0] * tp] = workers[pick];
      return kept_[pick];
    }
    cost_.resize(kept_.size());
    for (int i = 0; i < rows; ++i) {
      for (int c = 0; c < cols; ++c) cost_[i * cols + c] = cost(i, c);
    }
    const std::vector<int> pick = planner_internal::SolveAssignmentFlat(cost_.data(), rows, cols);
    int64_t total = 0;
    for (int i = 0; i < rows; ++i) {
      total += kept_[i * cols + pick[i]];
      if (worker_of_rank) (*worker_of_rank)[units[i / tp] * tp + i % tp] = workers[pick[i]];
    }
    return total;
  }

  // Places every group's units (group_of_unit: the group of each unit) and returns the bytes kept.
  int64_t PlaceAll(const WorkerGroups& groups, const std::vector<int>& group_of_unit,
                   std::vector<int>* worker_of_rank) {
    std::vector<std::vector<int>> units_of_group(groups.workers.size());
    for (size_t u = 0; u < group_of_unit.size(); ++u) {
      units_of_group[group_of_unit[u]].push_back(static_cast<int>(u));
    }
    int64_t total = 0;
    for (size_t g = 0; g < groups.workers.size(); ++g) {
      total += Place(groups.workers[g], units_of_group[g], true, worker_of_rank);
    }
    return total;
  }

  // The rank a worker held in the current layout, -1 if none.
  int OldRank(int worker) const { return old_rank_[worker]; }

 private:
  const ModelDescription& model_;
  const Layout layout_;
  const CurrentPlacement& current_;
  const PlannerOptions& options_;
  // Kept bytes by (old rank, new rank): a dense table up to 1M pairs (8 MiB), else a hash map.
  static constexpr int64_t kDenseMemoPairs = int64_t{1} << 20;
  std::vector<int> old_rank_;
  std::vector<int64_t> dense_;
  std::unordered_map<int64_t, int64_t> memo_;
  std::vector<int64_t> kept_, cost_;  // Place's matrices
};

// Local search on the group of each unit: moves a unit to a group with a free slot, or swaps
// the groups of two units, while that keeps more bytes (each group re-placed exactly). Stops
// after `max_work` Hungarian steps. Returns the bytes kept by *group_of_unit.
int64_t ImproveGroups(RankAssigner& a, const WorkerGroups& groups, std::vector<int>* group_of_unit,
                      double max_work) {
  const int num_groups = static_cast<int>(groups.workers.size());
  const int units = static_cast<int>(group_of_unit->size());
  std::vector<std::vector<int>> members(num_groups);
  for (int u = 0; u < units; ++u) members[(*group_of_unit)[u]].push_back(u);
  double work = 0;
  auto value = [&](int g) {
    const double rows = static_cast<double>(members[g].size()) * a.tp();
    work += rows * rows * static_cast<double>(groups.workers[g].size());
    return a.Place(groups.workers[g], members[g], false, nullptr);
  };
  std::vector<int64_t> kept(num_groups);
  for (int g = 0; g < num_groups; ++g) kept[g] = value(g);
  auto erase = [](std::vector<int>& v, int x) { v.erase(std::find(v.begin(), v.end(), x)); };
  bool improved = true;
  while (improved && work < max_work) {
    improved = false;
    for (int u = 0; u < units && work < max_work; ++u) {
      const int gu = (*group_of_unit)[u];
      // Moves to a free slot, then swaps with a unit of another group.
      for (int g = 0; g < num_groups && work < max_work; ++g) {
        if (g == gu || static_cast<int>(members[g].size()) >= groups.slots[g]) continue;
        erase(members[gu], u);
        members[g].push_back(u);
        const int64_t a_gu = value(gu), a_g = value(g);
        if (a_gu + a_g > kept[gu] + kept[g]) {
          kept[gu] = a_gu;
          kept[g] = a_g;
          (*group_of_unit)[u] = g;
          improved = true;
          break;
        }
        erase(members[g], u);
        members[gu].push_back(u);
      }
      if ((*group_of_unit)[u] != gu) continue;
      for (int v = u + 1; v < units && work < max_work; ++v) {
        const int gv = (*group_of_unit)[v];
        if (gv == gu) continue;
        erase(members[gu], u);
        erase(members[gv], v);
        members[gu].push_back(v);
        members[gv].push_back(u);
        const int64_t a_gu = value(gu), a_gv = value(gv);
        if (a_gu + a_gv > kept[gu] + kept[gv]) {
          kept[gu] = a_gu;
          kept[gv] = a_gv;
          (*group_of_unit)[u] = gv;
          (*group_of_unit)[v] = gu;
          improved = true;
          break;
        }
        erase(members[gu], v);
        erase(members[gv], u);
        members[gu].push_back(u);
        members[gv].push_back(v);
      }
    }
  }
  return std::accumulate(kept.begin(), kept.end(), int64_t{0});
}

// Work limits of the exact assignment (in Hungarian steps: rows^2 * cols).
constexpr double kPlaceWorkLimit = 2e8;    // placing every group's units once
constexpr double kImproveWorkLimit = 5e7;  // the local search
constexpr double kSearchWorkLimit = 3e7;   // all the branch and bound's bounds together

// The exact assignment: which group each unit goes to (first by a units x slots Hungarian on
// each unit's best alone, then by branch and bound when units compete), then each group's
// ranks x workers Hungarian. Returns true when the result is proven optimal.
bool AssignExact(RankAssigner& a, const WorkerGroups& groups, int units,
                 std::vector<int>* worker_of_rank, int64_t* kept) {
  const int num_groups = static_cast<int>(groups.workers.size());
  std::vector<std::vector<int64_t>> best(units, std::vector<int64_t>(num_groups));
  int64_t max_best = 0;
  for (int u = 0; u < units; ++u) {
    for (int g = 0; g < num_groups; ++g) {
      best[u][g] = a.Place(groups.workers[g], {u}, false, nullptr);
      max_best = std::max(max_best, best[u][g]);
    }
  }
  // Units to slots: the most bytes kept if no two units wanted the same worker (an upper bound),
  // ties toward Megatron order (unit u on slot u).
  std::vector<int> group_of_slot;
  for (int g = 0; g < num_groups; ++g)
    group_of_slot.insert(group_of_slot.end(), groups.slots[g], g);
  const int slots = static_cast<int>(group_of_slot.size());
  const int64_t scale = static_cast<int64_t>(units) * slots + 1;
  const int shift = ShiftToFit(max_best, scale, units);
  std::vector<std::vector<int64_t>> cost(units, std::vector<int64_t>(slots));
  for (int u = 0; u < units; ++u) {
    for (int s = 0; s < slots; ++s) {
      cost[u][s] = -(best[u][group_of_slot[s]] >> shift) * scale + std::abs(u - s);
    }
  }
  const std::vector<int> slot_of_unit = SolveAssignment(cost);
  std::vector<int> group_of_unit(units);
  int64_t upper = 0;
  for (int u = 0; u < units; ++u) {
    group_of_unit[u] = group_of_slot[slot_of_unit[u]];
    upper += best[u][group_of_unit[u]];
  }
  *kept = a.PlaceAll(groups, group_of_unit, worker_of_rank);
  if (*kept == upper) return true;
  // Units compete for workers: improve the choice of groups locally, then search it.
  if (ImproveGroups(a, groups, &group_of_unit, kImproveWorkLimit) > *kept) {
    *kept = a.PlaceAll(groups, group_of_unit, worker_of_rank);
  }
  const int rows = units * a.tp();
  std::vector<int> group_of_col;
  std::vector<int> cols;
  for (int g = 0; g < num_groups; ++g) {
    for (int w : groups.workers[g]) {
      cols.push_back(w);
      group_of_col.push_back(g);
    }
  }
  const double node_work = static_cast<double>(rows) * rows * static_cast<double>(cols.size());
  const int64_t max_nodes = static_cast<int64_t>(std::min(1e5, kSearchWorkLimit / node_work));
  if (max_nodes < 1) return false;
  std::vector<std::vector<int64_t>> matrix(rows, std::vector<int64_t>(cols.size()));
  for (int r = 0; r < rows; ++r) {
    for (size_t c = 0; c < cols.size(); ++c) matrix[r][c] = a.Kept(cols[c], r);
  }
  GroupSearch search(std::move(matrix), std::move(group_of_col), groups.slots, best, a.tp(),
                     max_nodes);
  const int64_t before = *kept;
  const bool complete = search.Run(before, &group_of_unit);
  *kept = a.PlaceAll(groups, group_of_unit, worker_of_rank);
  CHECK_GE(*kept, before);
  return complete;
}

// The large heuristic: each unit goes to the group of the worker that held the same rank or the
// rank at its proportional coordinates, when that keeps the most and a slot is free (greedy, most
// bytes first); the rest fill free slots in order; each group's ranks x workers is exact.
void AssignHeuristic(RankAssigner& a, const WorkerGroups& groups, const Layout& layout,
                     const CurrentPlacement& current, size_t num_workers,
                     std::vector<int>* worker_of_rank, int64_t* kept) {
  const int tp = layout.tp, units = layout.dp * layout.pp;
  const Layout& old = current.layout;
  std::vector<int> group_of_worker(num_workers, -1);
  for (size_t g = 0; g < groups.workers.size(); ++g) {
    for (int w : groups.workers[g]) group_of_worker[w] = static_cast<int>(g);
  }
  struct Candidate {
    int64_t kept;
    int unit;
    int group;
  };
  std::vector<Candidate> candidates;
  for (int u = 0; u < units; ++u) {
    const int d = u / layout.pp, p = u % layout.pp;
    const int proportional = ((d * old.dp / layout.dp) * old.pp + p * old.pp / layout.pp) * old.tp;
    std::set<int> tried;
    for (int r : {u * tp, proportional}) {
      if (r >= static_cast<int>(current.worker_of_rank.size())) continue;
      const int g = group_of_worker[current.worker_of_rank[r]];
      if (g < 0 || !tried.insert(g).second) continue;
      candidates.push_back({a.Place(groups.workers[g], {u}, false, nullptr), u, g});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate& x, const Candidate& y) { return x.kept > y.kept; });
  std::vector<int> group_of_unit(units, -1), used(groups.workers.size(), 0);
  for (const Candidate& c : candidates) {
    if (group_of_unit[c.unit] >= 0 || used[c.group] >= groups.slots[c.group]) continue;
    group_of_unit[c.unit] = c.group;
    ++used[c.group];
  }
  size_t next = 0;
  for (int u = 0; u < units; ++u) {
    if (group_of_unit[u] >= 0) continue;
    while (used[next] >= groups.slots[next]) ++next;
    group_of_unit[u] = static_cast<int>(next);
    ++used[next];
  }
  *kept = a.PlaceAll(groups, group_of_unit, worker_of_rank);
}

}  // namespace

StatusOr<std::vector<int>> AssignRanks(const ModelDescription& model, const Layout& layout,
                                       const std::vector<int>& host_of_worker,
                                       const CurrentPlacement& current,
                                       const PlannerOptions& options, bool* exact,
                                       int64_t* kept_out) {
  const size_t num_workers = host_of_worker.size();
  if (layout.dp < 1 || layout.pp < 1 || layout.tp < 1) {
    return InvalidArgumentError("layout " + layout.ToString() + " has a degree below 1");
  }
  if (static_cast<size_t>(layout.world()) > num_workers) {
    return InvalidArgumentError("layout " + layout.ToString() + " needs " +
                                std::to_string(layout.world()) + " workers, " +
                                std::to_string(num_workers) + " available");
  }
  ELASTRA_RETURN_IF_ERROR(CheckCurrent(current, num_workers));
  const int tp = layout.tp;
  const int units = layout.dp * layout.pp;
  const auto by_host = WorkersByHost(host_of_worker);
  // TP groups stay inside hosts whenever enough hosts can hold them.
  const bool in_hosts = InHostSlots(by_host, tp) >= units;
  std::vector<int> worker_of_rank(layout.world(), -1);
  int64_t kept = 0;
  bool is_exact = true;
  if (current.worker_of_rank.empty()) {
    // Megatron order: unit u (PP stages of a replica, then DP) on block u.
    const WorkerGroups blocks = BlockGroups(by_host, tp, in_hosts);
    for (int r = 0; r < layout.world(); ++r) worker_of_rank[r] = blocks.workers[r / tp][r % tp];
  } else {
    RankAssigner assigner(model, layout, current, options, num_workers);
    const WorkerGroups groups = in_hosts ? HostGroups(by_host, tp) : OneGroup(by_host, tp);
    if (groups.TotalSlots() <= options.exact_assignment_max_blocks &&
        groups.PlaceWork(tp) <= kPlaceWorkLimit) {
      is_exact = AssignExact(assigner, groups, units, &worker_of_rank, &kept);
    } else {
      is_exact = false;
      const WorkerGroups heuristic_groups = in_hosts && groups.PlaceWork(tp) <= kPlaceWorkLimit
                                                ? groups
                                                : BlockGroups(by_host, tp, in_hosts);
      AssignHeuristic(assigner, heuristic_groups, layout, current, num_workers, &worker_of_rank,
                      &kept);
    }
  }
  if (exact) *exact = is_exact;
  if (kept_out) *kept_out = kept;
  return worker_of_rank;
}

}  // namespace elastra
