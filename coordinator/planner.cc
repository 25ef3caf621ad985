// The planner: layout choice by a cost model, and rank assignment. See planner.h and
// docs/resharding.md.
#include "coordinator/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
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

// The two stages that bound a pipeline: stage 0 (the most layers, the embeddings, and the most
// micro-batches in flight under 1F1B) and the last stage (the output layer and the loss). With
// pp = 1 they are the same stage.
struct Stage {
  int layers = 0;
  bool first = false;  // holds the embeddings
  bool last = false;   // holds the output layer (Megatron: a copy of the tied word embedding)
  int64_t in_flight = 0;
};

// The model's sizes as doubles, and the per-layer memory and compute terms that do not depend on
// the layout (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", section 4, generalised to any ffn_hidden and activation element size).
struct ModelTerms {
  double s, b, h, f, a, v, e;            // seq, micro-batch, hidden, ffn, heads, vocab, dtype bytes
  double layer_split, layer_replicated;  // parameters of a layer split over TP / replicated

  explicit ModelTerms(const ModelDescription& m)
      : s(static_cast<double>(m.seq_len)),
        b(static_cast<double>(m.micro_batch)),
        h(static_cast<double>(m.hidden)),
        f(static_cast<double>(m.ffn_hidden)),
        a(static_cast<double>(m.heads)),
        v(static_cast<double>(m.vocab)),
        e(static_cast<double>(m.dtype_size())) {
    layer_split = 4 * h * h + 3 * h + 2 * h * f + f;  // qkv, proj weight, fc1, fc2 weight
    layer_replicated = 6 * h;                         // 2 layer norms, proj and fc2 biases
  }
  // Activation bytes a layer keeps per micro-batch without recomputation. Values are e bytes,
  // dropout masks 1 byte. Replicated over TP unless sequence parallel: the layer-norm inputs, the
  // qkv and fc1 inputs and two dropout masks (10 sbh for 16-bit). Split over TP: q, k, v, the
  // projection input, the GeLU and fc2 inputs (24 sbh with f = 4h). The attention core: softmax
  // output, its dropout mask and the dropout output (5 a s^2 b).
  double Replicated() const { return s * b * h * (4 * e + 2); }
  double Split() const { return s * b * (4 * h + 2 * f) * e; }
  double Core() const { return a * s * s * b * (2 * e + 1); }
  // FLOPs of one layer's forward for one micro-batch: the GEMMs and the two attention matmuls.
  double LayerForward() const { return b * s * (8 * h * h + 4 * h * f) + AttentionCore(); }
  double AttentionCore() const { return 4 * b * s * s * h; }
  // The output layer (logits) for one micro-batch, forward and backward.
  double Logits() const { return 3 * 2 * b * s * h * v; }
};

// Activation bytes per layer and micro-batch a rank keeps until its backward.
double LayerActivations(const ModelTerms& t, int tp, Recompute r, bool sp) {
  const double tsp = sp ? tp : 1;
  switch (r) {
    case Recompute::kNone:
      return t.Replicated() / tsp + (t.Split() + t.Core()) / tp;
    case Recompute::kSelective:  // the attention core is recomputed
      return t.Replicated() / tsp + t.Split() / tp;
    case Recompute::kFull:  // only the layer input is kept
      return t.s * t.b * t.h * t.e / tsp;
  }
  return 0;
}

// What recomputing needs on top: the layer being recomputed, during its backward.
double RecomputeWorkspace(const ModelTerms& t, int tp, Recompute r, bool sp) {
  switch (r) {
    case Recompute::kNone:
      return 0;
    case Recompute::kSelective:
      return t.Core() / tp;
    case Recompute::kFull:
      return LayerActivations(t, tp, Recompute::kNone, sp);
  }
  return 0;
}

// FLOPs per layer and micro-batch (forward, backward = 2 forwards, and what is recomputed).
double LayerFlops(const ModelTerms& t, Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return 3 * t.LayerForward();
    case Recompute::kSelective:
      return 3 * t.LayerForward() + t.AttentionCore();
    case Recompute::kFull:
      return 4 * t.LayerForward();
  }
  return 0;
}

// Seconds of one layer's compute per micro-batch on a rank: its FLOPs at the kernels' rate, and
// for selective recomputation also the attention core's activations written again at memory
// bandwidth (softmax and dropout are memory-bound, so their FLOPs alone understate them).
double LayerSeconds(const ModelTerms& t, int tp, Recompute r, const CostConstants& c) {
  const double flops = LayerFlops(t, r) / tp / (c.device_flops * c.flops_efficiency);
  return flops + (r == Recompute::kSelective ? t.Core() / tp / c.memory_bytes_per_s : 0);
}

// TP collectives per layer and micro-batch (allreduce, or with sequence parallelism the
// reduce-scatter + all-gather pair that moves the same bytes): 2 forward, 2 backward, and 2 more
// when the forward is recomputed.
int TpCollectivesPerLayer(Recompute r) { return r == Recompute::kFull ? 6 : 4; }

constexpr Recompute kRecomputeChoices[] = {Recompute::kNone, Recompute::kSelective,
                                           Recompute::kFull};

// Why a layout cannot hold the model at all (degrees, workers, divisibility, pipeline depth,
// batch); empty when it can.
std::string StructuralProblem(const ModelDescription& m, const Layout& l, size_t num_workers) {
  if (l.dp < 1 || l.pp < 1 || l.tp < 1) return "every degree must be >= 1";
  if (static_cast<size_t>(l.world()) > num_workers) {
    return "needs " + std::to_string(l.world()) + " workers, " + std::to_string(num_workers) +
           " available";
  }
  if (m.heads % l.tp != 0 || m.hidden % l.tp != 0) {
    return "tp=" + std::to_string(l.tp) + " must divide heads (" + std::to_string(m.heads) +
           ") and hidden (" + std::to_string(m.hidden) + ")";
  }
  if (l.pp > m.layers) {
    return "pp=" + std::to_string(l.pp) + " exceeds the " + std::to_string(m.layers) + " layers";
  }
  if (m.global_batch % (static_cast<int64_t>(l.dp) * m.micro_batch) != 0) {
    return "global_batch (" + std::to_string(m.global_batch) + ") is not a multiple of dp x " +
           "micro_batch (" + std::to_string(l.dp) + " x " + std::to_string(m.micro_batch) + ")";
  }
  return "";
}

// What a layout costs whatever the recomputation choice: its bounding stages, the state bytes of
// their parameters, and the TP, PP and DP communication.
struct LayoutTerms {
  int tp = 1, pp = 1;
  int64_t micro = 0;                // micro-batches per pipeline and step
  std::vector<Stage> stages;        // stage 0 and (pp > 1) the last stage
  std::vector<double> state_bytes;  // per stage: parameters x bytes of state per parameter
  double tp_collective_s = 0;       // one TP collective of a micro-batch's hidden states
  double pp_comm_s = 0;             // per step
  double dp_comm_s = 0;             // per step
  bool tp_in_host = true;

  LayoutTerms(const ModelDescription& m, const ModelTerms& t, const Layout& l,
              const HostStats& hosts, const CostConstants& c)
      : tp(l.tp), pp(l.pp), micro(m.global_batch / (static_cast<int64_t>(l.dp) * m.micro_batch)) {
    // 1F1B: stage i holds the activations of min(pp - i, m) micro-batches.
    stages.push_back(
        {StageLayers(m.layers, pp, 0).last, true, pp == 1, std::min<int64_t>(pp, micro)});
    if (pp > 1) {
      const LayerRange last = StageLayers(m.layers, pp, pp - 1);
      stages.push_back({last.last - last.first, false, true, 1});
    }
    // The state of a parameter: weight, gradient (fp32 with bf16 weights: Megatron and
    // DeepSpeed accumulate and all-reduce bf16 gradients in fp32), Adam's fp32 master weight
    // and two moments (sharded over DP with ZeRO-1).
    const double grad_bytes = m.dtype == "bf16" ? 4 : t.e;
    const double state_per_param = t.e + grad_bytes + 12.0 / (m.zero ? l.dp : 1);
    double max_params = 0;
    for (const Stage& st : stages) {
      double params = st.layers * (t.layer_split / tp + t.layer_replicated);
      if (st.first) params += t.v * t.h / tp + t.s * t.h;  // word (split over TP), position
      if (st.last) params += 2 * t.h + (st.first ? 0 : t.v * t.h / tp);  // final norm, output
      state_bytes.push_back(params * state_per_param);
      max_params = std::max(max_params, params);
    }

    tp_in_host = tp <= 1 || hosts.Blocks(tp) >= static_cast<int64_t>(l.dp) * pp;
    const double act_bytes = t.b * t.s * t.h * t.e;  // one micro-batch's hidden states
    auto bw = [&](bool in_host) {
      return in_host ? c.intra_host_bytes_per_s : c.inter_host_bytes_per_s;
    };
    if (tp > 1) {
      tp_collective_s = 2.0 * (tp - 1) / tp * act_bytes / bw(tp_in_host) + c.collective_latency_s;
    }
    if (pp > 1) {  // a forward and a backward send per micro-batch, 1/tp of it per rank
      const bool replica_in_host = pp * tp <= hosts.max_host_size;
      pp_comm_s = 2.0 * micro * (act_bytes / tp / bw(replica_in_host) + c.collective_latency_s);
    }
    if (l.dp > 1) {  // ring all-reduce of the fullest stage's gradients
      const bool dp_in_host = l.world() <= hosts.max_host_size;
      dp_comm_s = 2.0 * (l.dp - 1) / l.dp * max_params * grad_bytes / bw(dp_in_host) +
                  2.0 * (l.dp - 1) * c.collective_latency_s;
    }
  }
};

// One recomputation and sequence-parallelism choice on a layout: the memory of its fullest stage
// and the time of one 1F1B slot (a micro-batch's forward and backward) on its slowest stage.
struct ChoiceCost {
  double memory = 0, activations = 0;  // bytes on the fullest stage, and the activations' part
  double slot = 0, compute = 0, recompute = 0, tp_comm = 0;  // seconds on the slowest stage
};

ChoiceCost CostOfChoice(const ModelTerms& t, const LayoutTerms& lt, Recompute r, bool sp,
                        const CostConstants& c) {
  const int tp = lt.tp;
  const double tsp = sp ? tp : 1;
  const double rate = c.device_flops * c.flops_efficiency;
  ChoiceCost cost;
  for (size_t i = 0; i < lt.stages.size(); ++i) {
    const Stage& st = lt.stages[i];
    double act = st.layers * LayerActivations(t, tp, r, sp) * st.in_flight +
                 RecomputeWorkspace(t, tp, r, sp);
    if (st.first) act += t.s * t.b * t.h / tsp * st.in_flight;  // embedding dropout mask
    if (st.last) {
      // The final norm's and the output layer's inputs, and the fp32 logits of the loss.
      act += 2 * t.s * t.b * t.h * t.e / tsp + 4 * t.s * t.b * t.v / tp;
    }
    if (lt.state_bytes[i] + act > cost.memory) {
      cost.memory = lt.state_bytes[i] + act;
      cost.activations = act;
    }
    const double compute =
        st.layers * LayerSeconds(t, tp, r, c) + (st.last ? t.Logits() / tp / rate : 0);
    const double comm = st.layers * TpCollectivesPerLayer(r) * lt.tp_collective_s;
    if (compute + comm > cost.slot) {
      cost.slot = compute + comm;
      cost.compute = compute;
      cost.recompute =
          st.layers * (LayerSeconds(t, tp, r, c) - LayerSeconds(t, tp, Recompute::kNone, c));
      cost.tp_comm = comm;
    }
  }
  return cost;
}

// Validates a layout and scores it with its fastest recomputation and sequence-parallel choice
// that fits (ties: the one that needs less memory). Returns 0, or 1 (structure) or 2 (memory:
// *s holds the least memory any allowed choice needs) with the reason in *why.
int ValidateAndScore(const ModelDescription& m, const Layout& l, size_t num_workers,
                     const HostStats& hosts, const CostConstants& c, const PlannerPins& pins,
                     LayoutScore* s, std::string* why) {
  *why = StructuralProblem(m, l, num_workers);
  if (!why->empty()) return 1;
  const ModelTerms t(m);
  const LayoutTerms lt(m, t, l, hosts, c);
  s->layout = l;
  s->micro_batches = lt.micro;
  s->in_flight = lt.stages[0].in_flight;
  s->tp_in_host = lt.tp_in_host;
  bool found = false;
  double best_step = 0, least = -1;
  std::string least_choice;
  for (Recompute r : kRecomputeChoices) {
    if (pins.recompute && r != *pins.recompute) continue;
    for (bool sp : {false, true}) {
      if (sp && l.tp == 1) continue;  // nothing to split
      if (pins.sequence_parallel && sp != *pins.sequence_parallel && l.tp > 1) continue;
      const ChoiceCost cost = CostOfChoice(t, lt, r, sp, c);
      const double gib = cost.memory / kGiB;
      if (least < 0 || gib < least) {
        least = gib;
        least_choice =
            std::string(RecomputeName(r)) + " recomputation" + (sp ? ", sequence parallel" : "");
      }
      if (gib + c.memory_reserve_gib > m.device_memory_gib) continue;
      // 1F1B: m slots of the slowest stage, plus pp - 1 slots of fill and drain (the bubble).
      const double step = (lt.micro + l.pp - 1) * cost.slot + lt.pp_comm_s + lt.dp_comm_s;
      if (found && (step > best_step || (step == best_step && gib >= s->memory_gib))) continue;
      found = true;
      best_step = step;
      s->recompute = r;
      s->sequence_parallel = sp;
      s->memory_gib = gib;
      s->activation_gib = cost.activations / kGiB;
      s->compute_s = lt.micro * cost.compute;
      s->recompute_s = lt.micro * cost.recompute;
      s->tp_comm_s = lt.micro * cost.tp_comm;
      s->bubble_s = (l.pp - 1) * cost.slot;
      s->pp_comm_s = lt.pp_comm_s;
      s->dp_comm_s = lt.dp_comm_s;
      s->step_time_s = s->compute_s + s->tp_comm_s + s->bubble_s + s->pp_comm_s + s->dp_comm_s;
    }
  }
  if (found) return 0;
  s->memory_gib = least;
  char buf[240];
  std::snprintf(buf, sizeof buf,
                "needs %.1f GiB per device with the least memory (%s) (+%.1f reserve), %.1f "
                "available",
                least, least_choice.c_str(), c.memory_reserve_gib, m.device_memory_gib);
  *why = buf;
  return 2;
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

const char* RecomputeName(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
  }
  return "unknown";
}

std::string LayoutScoreJson(const LayoutScore& s) {
  const nlohmann::json j = {{"layout", s.layout.ToString()},
                            {"dp", s.layout.dp},
                            {"pp", s.layout.pp},
                            {"tp", s.layout.tp},
                            {"workers", s.layout.world()},
                            {"recompute", RecomputeName(s.recompute)},
                            {"sequence_parallel", s.sequence_parallel},
                            {"step_time_s", s.step_time_s},
                            {"compute_s", s.compute_s},
                            {"recompute_s", s.recompute_s},
                            {"bubble_s", s.bubble_s},
                            {"tp_comm_s", s.tp_comm_s},
                            {"pp_comm_s", s.pp_comm_s},
                            {"dp_comm_s", s.dp_comm_s},
                            {"micro_batches", s.micro_batches},
                            {"in_flight", s.in_flight},
                            {"memory_gib", s.memory_gib},
                            {"activation_gib", s.activation_gib},
                            {"tp_in_host", s.tp_in_host}};
  return j.dump();
}

StatusOr<LayoutScore> ScoreLayout(const ModelDescription& model, const Layout& layout,
                                  const std::vector<int>& host_of_worker, const CostConstants& cost,
                                  const PlannerPins& pins) {
  HostStats hosts(host_of_worker);
  LayoutScore s;
  std::string why;
  if (ValidateAndScore(model, layout, host_of_worker.size(), hosts, cost, pins, &s, &why) != 0) {
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
  std::vector<int64_t> minv(m + 1);
  std::vector<char> used(m + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::fill(minv.begin(), minv.end(), kInf);
    std::fill(used.begin(), used.end(), false);
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
    if (pairs <= kDenseMemoPairs) dense_.assign(pairs, -1);
  }

  int tp() const { return layout_.tp; }

  int64_t Kept(int worker, int rank) {
    const int from = old_rank_[worker];
    if (from < 0) return 0;
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
    std::vector<std::vector<int64_t>> kept(rows, std::vector<int64_t>(cols));
    int64_t max_kept = 0;
    for (int i = 0; i < rows; ++i) {
      const int rank = units[i / tp] * tp + i % tp;
      for (int c = 0; c < cols; ++c) {
        kept[i][c] = Kept(workers[c], rank);
        max_kept = std::max(max_kept, kept[i][c]);
      }
    }
    if (max_kept == 0 && !tiebreak && !worker_of_rank) return 0;  // any order will do
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
  // Kept bytes by (old rank, new rank): a dense table up to 1M pairs (8 MiB), else a hash map.
  static constexpr int64_t kDenseMemoPairs = int64_t{1} << 20;
  std::vector<int> old_rank_;
  std::vector<int64_t> dense_;
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
      : kept_(std::move(kept)),
        group_of_col_(std::move(group_of_col)),
        slots_(std::move(slots)),
        best_(best),
        tp_(tp),
        max_nodes_(max_nodes) {
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
  // Why no layout that uses every worker is valid: the first reason, or the one that came
  // closest to fitting in memory.
  std::string all_reason, all_memory_reason;
  double all_least_memory = -1;
  const int64_t batches = model.global_batch / model.micro_batch;
  for (int tp = 1; tp <= num_workers; ++tp) {
    if (pin_tp && tp != pin_tp) continue;
    for (int pp = 1; pp * tp <= num_workers; ++pp) {
      if (pin_pp && pp != pin_pp) continue;
      for (int dp = 1; dp * pp * tp <= num_workers; ++dp) {
        const bool all = dp * pp * tp == num_workers;
        if (batches % dp != 0 && !(pin_tp && pin_pp) && !all) continue;  // cheap skip
        ++considered;
        LayoutScore s;
        std::string why;
        const Layout layout{dp, pp, tp};
        const int rc = ValidateAndScore(model, layout, host_of_worker.size(), hosts, options.cost,
                                        pins, &s, &why);
        if (rc == 0) {
          valid.push_back(s);
          continue;
        }
        if (first_reason.empty()) first_reason = layout.ToString() + ": " + why;
        if (rc == 2 && (least_memory < 0 || s.memory_gib < least_memory)) {
          least_memory = s.memory_gib;
        }
        if (!all) continue;
        if (all_reason.empty()) all_reason = layout.ToString() + ": " + why;
        if (rc == 2 && (all_least_memory < 0 || s.memory_gib < all_least_memory)) {
          all_least_memory = s.memory_gib;
          all_memory_reason = layout.ToString() + ": " + why;
        }
      }
    }
  }
  if (valid.empty()) {
    std::string msg = "no valid layout for " + std::to_string(num_workers) + " workers";
    if (least_memory >= 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "; the smallest per-device memory estimate (with the least memory-hungry "
                    "recomputation) is %.1f GiB (+%.1f reserve), the device has %.1f GiB",
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
  // TP across hosts only when no host-contained layout is valid; then every worker used when a
  // layout that does so is valid; then the step time.
  const bool any_in_host =
      std::any_of(valid.begin(), valid.end(), [](const LayoutScore& v) { return v.tp_in_host; });
  auto tier = [&](const LayoutScore& v) {
    return std::make_pair(any_in_host && !v.tp_in_host, v.layout.world() != num_workers);
  };
  std::sort(valid.begin(), valid.end(), [&](const LayoutScore& a, const LayoutScore& b) {
    if (tier(a) != tier(b)) return tier(a) < tier(b);
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
  if (result.best.layout.world() != num_workers) {
    const std::string n = std::to_string(num_workers);
    const bool all_across_hosts =
        std::any_of(valid.begin(), valid.end(),
                    [&](const LayoutScore& v) { return v.layout.world() == num_workers; });
    const std::string& why = !all_memory_reason.empty() ? all_memory_reason : all_reason;
    if (all_across_hosts) {
      result.idle_reason = "no layout with TP groups inside hosts uses all " + n +
                           " workers (those that do put TP across hosts)";
    } else if (!why.empty()) {
      result.idle_reason = "no valid layout uses all " + n + " workers: e.g. " + why;
    } else {
      result.idle_reason = "no layout with the pins uses all " + n +
                           " workers (tp x pp does "
                           "not divide " +
                           n + ")";
    }
  }
  for (const LayoutScore& v : valid) {
    if (tier(v).first != tier(result.best).first || v.layout.world() == num_workers) continue;
    if (v.step_time_s < result.best.step_time_s &&
        (!result.faster_with_idle_workers ||
         v.step_time_s < result.faster_with_idle_workers->step_time_s)) {
      result.faster_with_idle_workers = v;
    }
  }
  ELASTRA_ASSIGN_OR_RETURN(result.worker_of_rank,
                           AssignRanks(model, result.best.layout, host_of_worker, current,
                                       options, &result.exact_assignment, &result.kept_bytes));
  return result;
}

}  // namespace elastra
