// The planner's cost model: memory, compute and communication of a layout, the recomputation and
// sequence-parallelism choice that makes it fastest while it fits, and ScoreLayout. See
// planner_cost.h, planner.h and docs/resharding.md.
#include "planner/planner_cost.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "elastra/sharding.h"

namespace elastra {
namespace planner_internal {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

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

}  // namespace

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

}  // namespace planner_internal

using planner_internal::HostStats;
using planner_internal::ValidateAndScore;

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

}  // namespace elastra
