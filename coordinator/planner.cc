// The planner: layout choice by a cost model, and rank assignment. See planner.h and
// docs/resharding.md.
#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <unordered_map>

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

  // Blocks: tp workers of one host (consecutive by id), or across hosts when tp groups cannot
  // all fit inside hosts.
  std::map<int, std::vector<int>> by_host;
  for (size_t w = 0; w < num_workers; ++w) by_host[host_of_worker[w]].push_back(static_cast<int>(w));
  std::vector<std::vector<int>> blocks;
  int64_t in_host_blocks = 0;
  for (const auto& [h, ws] : by_host) in_host_blocks += ws.size() / tp;
  if (in_host_blocks >= units) {
    for (const auto& [h, ws] : by_host) {
      for (size_t i = 0; i + tp <= ws.size(); i += tp) {
        blocks.emplace_back(ws.begin() + i, ws.begin() + i + tp);
      }
    }
  } else {
    std::vector<int> all;
    for (const auto& [h, ws] : by_host) all.insert(all.end(), ws.begin(), ws.end());
    for (size_t i = 0; i + tp <= all.size(); i += tp) {
      blocks.emplace_back(all.begin() + i, all.begin() + i + tp);
    }
  }
  const int num_blocks = static_cast<int>(blocks.size());

  std::vector<int> old_rank(num_workers, -1);
  for (size_t r = 0; r < current.worker_of_rank.size(); ++r) {
    old_rank[current.worker_of_rank[r]] = static_cast<int>(r);
  }
  std::unordered_map<int64_t, int64_t> memo;
  auto kept = [&](int worker, int rank) -> int64_t {
    const int from = old_rank[worker];
    if (from < 0) return 0;
    const int64_t key = static_cast<int64_t>(from) * layout.world() + rank;
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    const int64_t k = options.kept_bytes
                          ? options.kept_bytes(from, layout, rank)
                          : EstimateKeptBytes(model, current.layout, from, layout, rank);
    memo.emplace(key, k);
    return k;
  };
  // Best order of a block's workers over the tp ranks of unit u; returns bytes kept.
  auto inner = [&](int u, int b, std::vector<int>* order) -> int64_t {
    std::vector<std::vector<int64_t>> c(tp, std::vector<int64_t>(tp));
    bool any = false;
    for (int j = 0; j < tp; ++j) {
      for (int i = 0; i < tp; ++i) {
        c[j][i] = -kept(blocks[b][i], u * tp + j);
        any = any || c[j][i] != 0;
      }
    }
    std::vector<int> pick(tp);
    for (int j = 0; j < tp; ++j) pick[j] = j;
    if (any && tp > 1) pick = SolveAssignment(c);
    int64_t total = 0;
    for (int j = 0; j < tp; ++j) total -= c[j][pick[j]];
    if (order) *order = pick;
    return total;
  };

  std::vector<int> block_of_unit(units, -1);
  const bool have_current = !current.worker_of_rank.empty();
  bool is_exact = true;
  if (!have_current) {
    for (int u = 0; u < units; ++u) block_of_unit[u] = u;  // Megatron order
  } else if (num_blocks <= options.exact_assignment_max_blocks) {
    // Primary: bytes kept; secondary: stay close to Megatron order (|u - b| < scale).
    const int64_t scale = num_blocks + 1;
    std::vector<std::vector<int64_t>> cost(units, std::vector<int64_t>(num_blocks));
    for (int u = 0; u < units; ++u) {
      for (int b = 0; b < num_blocks; ++b) cost[u][b] = -inner(u, b, nullptr) * scale + std::abs(u - b);
    }
    block_of_unit = SolveAssignment(cost);
  } else {
    // Large: a unit keeps the block of the worker that held its first rank, when free; the
    // rest take free blocks in order.
    is_exact = false;
    std::vector<int> block_of_worker(num_workers, -1);
    for (int b = 0; b < num_blocks; ++b) {
      for (int w : blocks[b]) block_of_worker[w] = b;
    }
    std::vector<bool> taken(num_blocks, false);
    for (int u = 0; u < units; ++u) {
      const int r = u * tp;
      if (r >= static_cast<int>(current.worker_of_rank.size())) continue;
      const int b = block_of_worker[current.worker_of_rank[r]];
      if (b >= 0 && !taken[b]) {
        block_of_unit[u] = b;
        taken[b] = true;
      }
    }
    int next = 0;
    for (int u = 0; u < units; ++u) {
      if (block_of_unit[u] >= 0) continue;
      while (taken[next]) ++next;
      block_of_unit[u] = next;
      taken[next] = true;
    }
  }
  std::vector<int> worker_of_rank(layout.world());
  int64_t total_kept = 0;
  for (int u = 0; u < units; ++u) {
    std::vector<int> order;
    total_kept += have_current ? inner(u, block_of_unit[u], &order) : 0;
    if (!have_current) {
      order.resize(tp);
      for (int j = 0; j < tp; ++j) order[j] = j;
    }
    for (int j = 0; j < tp; ++j) worker_of_rank[u * tp + j] = blocks[block_of_unit[u]][order[j]];
  }
  if (exact) *exact = is_exact;
  if (kept_out) *kept_out = total_kept;
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
