// The planner: layout choice by a cost model, and rank assignment. See planner.h and
// docs/resharding.md.
#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "common/logging.h"
#include "elastra/sharding.h"

namespace elastra {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Host facts the scoring needs, computed once per plan.
struct HostStats {
  std::map<int, int> workers_on_host;
  int max_host_size = 0;

  explicit HostStats(const std::vector<int>& host_of_worker) {
    for (int h : host_of_worker) ++workers_on_host[h];
    for (const auto& [h, n] : workers_on_host) max_host_size = std::max(max_host_size, n);
  }
  // TP groups of size tp that fit inside single hosts.
  int64_t Blocks(int tp) const {
    int64_t blocks = 0;
    for (const auto& [h, n] : workers_on_host) blocks += n / tp;
    return blocks;
  }
};

// Length of the overlap of [a/na, (a+1)/na) and [b/nb, (b+1)/nb), as a fraction of the whole.
double IntervalOverlap(int a, int na, int b, int nb) {
  const double lo = std::max(static_cast<double>(a) / na, static_cast<double>(b) / nb);
  const double hi = std::min(static_cast<double>(a + 1) / na, static_cast<double>(b + 1) / nb);
  return std::max(0.0, hi - lo);
}

int ValidateAndScore(const ModelDescription& m, const Layout& l, size_t num_workers,
                     const HostStats& hosts, const CostConstants& c, LayoutScore* s,
                     std::string* why) {
  if (l.dp < 1 || l.pp < 1 || l.tp < 1) {
    *why = "every degree must be >= 1";
    return 1;
  }
  if (static_cast<size_t>(l.world()) > num_workers) {
    *why = "needs " + std::to_string(l.world()) + " workers, " + std::to_string(num_workers) +
           " available";
    return 1;
  }
  if (m.heads % l.tp != 0 || m.hidden % l.tp != 0) {
    *why = "tp=" + std::to_string(l.tp) + " must divide heads (" + std::to_string(m.heads) +
           ") and hidden (" + std::to_string(m.hidden) + ")";
    return 1;
  }
  if (l.pp > m.layers) {
    *why = "pp=" + std::to_string(l.pp) + " exceeds the " + std::to_string(m.layers) + " layers";
    return 1;
  }
  if (m.global_batch % (static_cast<int64_t>(l.dp) * m.micro_batch) != 0) {
    *why = "global_batch (" + std::to_string(m.global_batch) + ") is not a multiple of dp x " +
           "micro_batch (" + std::to_string(l.dp) + " x " + std::to_string(m.micro_batch) + ")";
    return 1;
  }
  const int64_t micro = m.global_batch / (static_cast<int64_t>(l.dp) * m.micro_batch);
  const int max_layers = StageLayers(m.layers, l.pp, 0).last;  // stage 0 is never smaller
  const double ds = static_cast<double>(m.dtype_size());
  const double h = static_cast<double>(m.hidden), seq = static_cast<double>(m.seq_len);
  const double b = static_cast<double>(m.micro_batch);

  // Memory on the fullest stage (stage 0: the most layers and the embeddings).
  const double stage_params =
      (static_cast<double>(max_layers) * m.LayerParameterCount() + m.EmbeddingParameterCount()) /
      l.tp;
  const double weights_grads = 2.0 * stage_params * ds;
  const double optimizer = 12.0 * stage_params / (m.zero ? l.dp : 1);
  // Activations per layer and micro-batch (Korthikanti et al. 2022, no recomputation), times
  // the micro-batches 1F1B keeps in flight on stage 0.
  const double act_layer = seq * b * h * (10.0 + 24.0 / l.tp + 5.0 * m.heads * seq / (h * l.tp));
  const double activations = act_layer * max_layers * std::min<int64_t>(l.pp, micro);
  s->memory_gib = (weights_grads + optimizer + activations) / kGiB;
  if (s->memory_gib + c.memory_reserve_gib > m.device_memory_gib) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "needs %.1f GiB per device (+%.1f reserve), %.1f available",
                  s->memory_gib, c.memory_reserve_gib, m.device_memory_gib);
    *why = buf;
    return 2;
  }

  s->layout = l;
  s->micro_batches = micro;
  s->tp_in_host = l.tp <= 1 || hosts.Blocks(l.tp) >= static_cast<int64_t>(l.dp) * l.pp;
  const bool replica_in_host = l.pp * l.tp <= hosts.max_host_size;
  const bool dp_in_host = l.world() <= hosts.max_host_size;
  const double intra = c.intra_host_bytes_per_s, inter = c.inter_host_bytes_per_s;

  // Compute: 6 FLOPs per parameter and token plus attention scores, spread over the ranks, with
  // the fullest stage setting the pace.
  const double tokens = static_cast<double>(m.global_batch) * seq;
  const double flops =
      6.0 * static_cast<double>(m.ParameterCount()) * tokens + 12.0 * m.layers * h * seq * tokens;
  const double imbalance = static_cast<double>(max_layers) * l.pp / m.layers;
  s->compute_s = flops / (l.world() * c.device_flops * c.flops_efficiency) * imbalance;

  const double act_bytes = b * seq * h * ds;  // one micro-batch's activations at a boundary
  if (l.tp > 1) {
    const double bw = s->tp_in_host ? intra : inter;
    const double one = 2.0 * (l.tp - 1) / l.tp * act_bytes / bw + c.collective_latency_s;
    s->tp_comm_s = 4.0 * max_layers * micro * one;  // 2 forward + 2 backward per layer
  }
  // The pipelined part (compute and TP traffic) idles for (pp-1) of (m+pp-1) slots.
  s->bubble_s = (s->compute_s + s->tp_comm_s) * (l.pp - 1) / static_cast<double>(micro);
  if (l.pp > 1) {
    const double bw = replica_in_host ? intra : inter;
    s->pp_comm_s = 2.0 * micro * (act_bytes / l.tp / bw + c.collective_latency_s);
  }
  if (l.dp > 1) {
    const double bw = dp_in_host ? intra : inter;
    s->dp_comm_s =
        2.0 * (l.dp - 1) / l.dp * stage_params * ds / bw + 2.0 * (l.dp - 1) * c.collective_latency_s;
  }
  s->step_time_s = s->compute_s + s->tp_comm_s + s->bubble_s + s->pp_comm_s + s->dp_comm_s;
  return 0;
}

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

}  // namespace

StatusOr<LayoutScore> ScoreLayout(const ModelDescription& model, const Layout& layout,
                                  const std::vector<int>& host_of_worker,
                                  const CostConstants& cost) {
  HostStats hosts(host_of_worker);
  LayoutScore s;
  std::string why;
  if (ValidateAndScore(model, layout, host_of_worker.size(), hosts, cost, &s, &why) != 0) {
    return InvalidArgumentError("layout " + layout.ToString() + " is not valid: " + why);
  }
  return s;
}

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

std::vector<int> SolveAssignment(const std::vector<std::vector<int64_t>>& a) {
  const int n = static_cast<int>(a.size());
  if (n == 0) return {};
  const int m = static_cast<int>(a[0].size());
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> u(n + 1, 0), v(m + 1, 0);
  std::vector<int> p(m + 1, 0), way(m + 1, 0);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::vector<int64_t> minv(m + 1, kInf);
    std::vector<char> used(m + 1, false);
    do {
      used[j0] = true;
      const int i0 = p[j0];
      int64_t delta = kInf;
      int j1 = 0;
      for (int j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const int64_t cur = a[i0 - 1][j - 1] - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> assign(n, -1);
  for (int j = 1; j <= m; ++j) {
    if (p[j] != 0) assign[p[j] - 1] = j - 1;
  }
  return assign;
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
  const int64_t limit = std::numeric_limits<int64_t>::max() / 4 / std::max<int64_t>(1, scale * rows);
  int shift = 0;
  while ((max_kept >> shift) > limit) ++shift;
  return shift;
}

// Bytes kept by a worker on a rank of the new layout (memoised), and the placement of a set of
// TP groups ("units") on one group of workers.
class RankAssigner {
 public:
  RankAssigner(const ModelDescription& model, const Layout& layout,
               const CurrentPlacement& current, const PlannerOptions& options, size_t num_workers)
      : model_(model), layout_(layout), current_(current), options_(options),
        old_rank_(num_workers, -1) {
    for (size_t r = 0; r < current.worker_of_rank.size(); ++r) {
      old_rank_[current.worker_of_rank[r]] = static_cast<int>(r);
    }
  }

  int tp() const { return layout_.tp; }

  int64_t Kept(int worker, int rank) {
    const int from = old_rank_[worker];
    if (from < 0) return 0;
    const int64_t key = static_cast<int64_t>(from) * layout_.world() + rank;
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const int64_t k = options_.kept_bytes
                          ? options_.kept_bytes(from, layout_, rank)
                          : EstimateKeptBytes(model_, current_.layout, from, layout_, rank);
    memo_.emplace(key, k);
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
    std::vector<std::vector<int64_t>> kept(rows, std::vector<int64_t>(cols));
    int64_t max_kept = 0;
    for (int i = 0; i < rows; ++i) {
      const int rank = units[i / tp] * tp + i % tp;
      for (int c = 0; c < cols; ++c) {
        kept[i][c] = Kept(workers[c], rank);
        max_kept = std::max(max_kept, kept[i][c]);
      }
    }
    // Kept bytes first; the sum of the ties (each < cols) never outweighs one (shifted) byte.
    const int64_t scale = tiebreak ? static_cast<int64_t>(rows) * cols + 1 : 1;
    const int shift = ShiftToFit(max_kept, scale, rows);
    std::vector<std::vector<int64_t>> cost(rows, std::vector<int64_t>(cols));
    for (int i = 0; i < rows; ++i) {
      for (int c = 0; c < cols; ++c) {
        cost[i][c] = -(kept[i][c] >> shift) * scale + (tiebreak ? std::abs(i - c) : 0);
      }
    }
    const std::vector<int> pick = SolveAssignment(cost);
    int64_t total = 0;
    for (int i = 0; i < rows; ++i) {
      total += kept[i][pick[i]];
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
  std::vector<int> old_rank_;
  std::unordered_map<int64_t, int64_t> memo_;
};

// Branch and bound over the group each unit goes to, for when units compete for the same
// workers so that the per-unit bound is not reached. The bound of a partial choice is the
// assignment problem over every rank and worker with the chosen units' ranks held to their
// groups and the others free: a relaxation, exact once every unit is chosen.
class GroupSearch {
 public:
  // kept: rank x column (columns: every worker of every group, group_of_col their group).
  GroupSearch(std::vector<std::vector<int64_t>> kept, std::vector<int> group_of_col,
              std::vector<int> slots, const std::vector<std::vector<int64_t>>& best, int tp,
              int64_t max_nodes)
      : kept_(std::move(kept)), group_of_col_(std::move(group_of_col)), slots_(std::move(slots)),
        best_(best), tp_(tp), max_nodes_(max_nodes) {
    const int units = static_cast<int>(best.size());
    order_.resize(units);
    std::iota(order_.begin(), order_.end(), 0);
    auto top = [&](int u) { return *std::max_element(best[u].begin(), best[u].end()); };
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) { return top(a) > top(b); });
    // A group none of whose workers keeps anything is interchangeable with any other such group
    // of the same size and free slots: only the first of them is tried.
    barren_.assign(slots_.size(), true);
    size_.assign(slots_.size(), 0);
    for (size_t c = 0; c < group_of_col_.size(); ++c) {
      ++size_[group_of_col_[c]];
      for (const auto& row : kept_) {
        if (row[c] != 0) barren_[group_of_col_[c]] = false;
      }
    }
    forbidden_ = 1;
    for (const auto& row : kept_) forbidden_ += *std::max_element(row.begin(), row.end());
  }

  // Improves on `incumbent` (bytes kept by *group_of_unit). Returns true when the search ran to
  // the end, so that *group_of_unit is optimal.
  bool Run(int64_t incumbent, std::vector<int>* group_of_unit) {
    incumbent_ = incumbent;
    best_map_ = *group_of_unit;
    choice_.assign(order_.size(), -1);
    used_.assign(slots_.size(), 0);
    Visit(0);
    *group_of_unit = best_map_;
    return !aborted_;
  }

 private:
  int64_t Bound() {
    const int rows = static_cast<int>(kept_.size()), cols = static_cast<int>(group_of_col_.size());
    std::vector<std::vector<int64_t>> cost(rows, std::vector<int64_t>(cols));
    for (int r = 0; r < rows; ++r) {
      const int g = choice_[r / tp_];
      for (int c = 0; c < cols; ++c) {
        cost[r][c] = g < 0 || group_of_col_[c] == g ? -kept_[r][c] : forbidden_;
      }
    }
    const std::vector<int> pick = SolveAssignment(cost);
    int64_t total = 0;
    for (int r = 0; r < rows; ++r) total -= cost[r][pick[r]];
    return total;  // never negative: the slots leave a choice without forbidden pairs
  }

  void Visit(size_t k) {
    if (aborted_) return;
    if (++nodes_ > max_nodes_) {
      aborted_ = true;
      return;
    }
    const int64_t bound = Bound();
    if (bound <= incumbent_) return;
    if (k == order_.size()) {  // every unit placed: the bound is the value
      incumbent_ = bound;
      best_map_ = choice_;
      return;
    }
    const int u = order_[k];
    std::vector<int> groups;
    for (size_t g = 0; g < slots_.size(); ++g) {
      if (used_[g] < slots_[g]) groups.push_back(static_cast<int>(g));
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [&](int a, int b) { return best_[u][a] > best_[u][b]; });
    std::set<std::pair<int, int>> barren_tried;  // (size, free slots) of empty barren groups
    for (int g : groups) {
      if (barren_[g] && used_[g] == 0 && !barren_tried.insert({size_[g], slots_[g]}).second) {
        continue;
      }
      choice_[u] = g;
      ++used_[g];
      Visit(k + 1);
      --used_[g];
      choice_[u] = -1;
    }
  }

  const std::vector<std::vector<int64_t>> kept_;
  const std::vector<int> group_of_col_;
  const std::vector<int> slots_;
  const std::vector<std::vector<int64_t>>& best_;
  const int tp_;
  const int64_t max_nodes_;
  std::vector<int> order_, size_;
  std::vector<bool> barren_;
  int64_t forbidden_ = 1;
  int64_t incumbent_ = 0;
  int64_t nodes_ = 0;
  bool aborted_ = false;
  std::vector<int> choice_, used_, best_map_;
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
constexpr double kPlaceWorkLimit = 2e8;   // placing every group's units once
constexpr double kImproveWorkLimit = 5e7;  // the local search
constexpr double kSearchWorkLimit = 3e7;  // all the branch and bound's bounds together

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
  for (int g = 0; g < num_groups; ++g) group_of_slot.insert(group_of_slot.end(), groups.slots[g], g);
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
    const int proportional =
        ((d * old.dp / layout.dp) * old.pp + p * old.pp / layout.pp) * old.tp;
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
      const WorkerGroups heuristic_groups =
          in_hosts && groups.PlaceWork(tp) <= kPlaceWorkLimit ? groups
                                                              : BlockGroups(by_host, tp, in_hosts);
      AssignHeuristic(assigner, heuristic_groups, layout, current, num_workers, &worker_of_rank,
                      &kept);
    }
  }
  if (exact) *exact = is_exact;
  if (kept_out) *kept_out = kept;
  return worker_of_rank;
}

StatusOr<PlanResult> PlanLayout(const ModelDescription& model,
                                const std::vector<int>& host_of_worker, const PlannerPins& pins,
                                const CurrentPlacement& current, const PlannerOptions& options) {
  const int num_workers = static_cast<int>(host_of_worker.size());
  if (num_workers < 1) return InvalidArgumentError("no workers to plan for");
  ELASTRA_RETURN_IF_ERROR(CheckCurrent(current, host_of_worker.size()));
  int pin_tp = pins.tp, pin_pp = pins.pp;
  if (pins.only_dp) {
    if (current.worker_of_rank.empty()) {
      return InvalidArgumentError("pin 'only dp changes' needs a current layout");
    }
    if ((pin_tp && pin_tp != current.layout.tp) || (pin_pp && pin_pp != current.layout.pp)) {
      return InvalidArgumentError("pins contradict: only dp changes, but tp/pp pinned elsewhere");
    }
    pin_tp = current.layout.tp;
    pin_pp = current.layout.pp;
  }
  if (pin_tp < 0 || pin_pp < 0) return InvalidArgumentError("pins must be >= 0");

  HostStats hosts(host_of_worker);
  std::vector<LayoutScore> valid;
  int64_t considered = 0;
  std::string first_reason;
  double least_memory = -1;
  const int64_t batches = model.global_batch / model.micro_batch;
  for (int tp = 1; tp <= num_workers; ++tp) {
    if (pin_tp && tp != pin_tp) continue;
    for (int pp = 1; pp * tp <= num_workers; ++pp) {
      if (pin_pp && pp != pin_pp) continue;
      for (int dp = 1; dp * pp * tp <= num_workers; ++dp) {
        if (batches % dp != 0 && !(pin_tp && pin_pp)) continue;  // cheap skip, reason below
        ++considered;
        LayoutScore s;
        std::string why;
        const int rc = ValidateAndScore(model, Layout{dp, pp, tp}, host_of_worker.size(), hosts,
                                        options.cost, &s, &why);
        if (rc == 0) {
          valid.push_back(s);
        } else {
          if (first_reason.empty()) first_reason = Layout{dp, pp, tp}.ToString() + ": " + why;
          if (rc == 2 && (least_memory < 0 || s.memory_gib < least_memory)) {
            least_memory = s.memory_gib;
          }
        }
      }
    }
  }
  if (valid.empty()) {
    std::string msg = "no valid layout for " + std::to_string(num_workers) + " workers";
    if (least_memory >= 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "; the smallest per-device memory estimate is %.1f GiB (+%.1f reserve), the "
                    "device has %.1f GiB",
                    least_memory, options.cost.memory_reserve_gib, model.device_memory_gib);
      msg += buf;
    } else if (!first_reason.empty()) {
      msg += "; e.g. " + first_reason;
    } else {
      msg += " with the pins (tp=" + std::to_string(pin_tp) + ", pp=" + std::to_string(pin_pp) +
             ", 0 = free): tp x pp exceeds the workers";
    }
    return InvalidArgumentError(msg);
  }
  std::sort(valid.begin(), valid.end(), [](const LayoutScore& a, const LayoutScore& b) {
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    if (a.layout.world() != b.layout.world()) return a.layout.world() < b.layout.world();
    if (a.layout.tp != b.layout.tp) return a.layout.tp < b.layout.tp;
    return a.layout.pp < b.layout.pp;
  });
  PlanResult result;
  result.best = valid[0];
  for (size_t i = 1; i < valid.size() && static_cast<int>(i) <= options.alternatives; ++i) {
    result.alternatives.push_back(valid[i]);
  }
  result.layouts_considered = considered;
  ELASTRA_ASSIGN_OR_RETURN(result.worker_of_rank,
                           AssignRanks(model, result.best.layout, host_of_worker, current,
                                       options, &result.exact_assignment, &result.kept_bytes));
  return result;
}

}  // namespace elastra
