// Tests of the model description parser and the planner (layout choice and rank assignment).
#include "planner/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "planner/model_description.h"

namespace elastra {
namespace {

constexpr char kSmall[] = R"({"layers": 8, "hidden": 1024, "heads": 16, "ffn_hidden": 4096,
  "vocab": 32000, "seq_len": 1024, "global_batch": 64, "micro_batch": 2, "dtype": "bf16",
  "optimizer": "adam", "zero": 1, "device_memory_gib": 80})";

// A ~7B model that does not fit one 80 GiB device.
constexpr char kLarge[] = R"({"layers": 32, "hidden": 4096, "heads": 32, "vocab": 50304,
  "seq_len": 2048, "global_batch": 512, "micro_batch": 1, "device_memory_gib": 80})";

ModelDescription Parse(const char* text) {
  auto m = ParseModelDescription(text);
  EXPECT_TRUE(m.ok()) << m.status();
  return *m;
}

constexpr double kGiBBytes = 1024.0 * 1024.0 * 1024.0;

std::vector<int> Hosts(int workers, int per_host) {
  std::vector<int> h(workers);
  for (int w = 0; w < workers; ++w) h[w] = w / per_host;
  return h;
}

TEST(ModelDescription, ParsesFieldsAndDefaults) {
  const ModelDescription m = Parse(kLarge);
  EXPECT_EQ(m.layers, 32);
  EXPECT_EQ(m.ffn_hidden, 4 * 4096);
  EXPECT_EQ(m.dtype, "bf16");
  EXPECT_EQ(m.dtype_size(), 2u);
  EXPECT_EQ(m.zero, 0);
  // 12 h^2 L + 13 h L + (V + s) h + 2h for a GPT with 4h MLP.
  const int64_t h = 4096;
  EXPECT_EQ(m.ParameterCount(), 12 * h * h * 32 + 13 * h * 32 + (50304 + 2048) * h + 2 * h);
}

TEST(ModelDescription, BadInputGetsAClearError) {
  struct Case {
    std::string json;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{", "not valid JSON"},
      {"[1, 2]", "JSON object"},
      {R"({"hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4, "global_batch": 4,
           "micro_batch": 1, "device_memory_gib": 1})", "missing field 'layers'"},
      {R"({"layers": "8", "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1})", "'layers' must be an integer"},
      {R"({"layers": 0, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1})", "'layers' must be between"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1, "zero": 2})", "'zero'"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1, "dtype": "int4"})", "'dtype'"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1, "optimizer": "sgd"})", "'optimizer'"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": -3})", "'device_memory_gib'"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1})", "missing field 'device_memory_gib'"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 6, "micro_batch": 4, "device_memory_gib": 1})", "multiple of micro_batch"},
      {R"({"layers": 2, "hidden": 9, "heads": 2, "vocab": 10, "seq_len": 4,
           "global_batch": 4, "micro_batch": 1, "device_memory_gib": 1})", "multiple of heads"},
      {R"({"layers": 2, "hidden": 8, "heads": 2, "vocab": 10, "seq_len": 4, "global_batch": 4,
           "micro_batch": 1, "device_memory_gib": 1, "hiden": 3})", "unknown field 'hiden'"},
  };
  for (const auto& c : cases) {
    auto m = ParseModelDescription(c.json);
    ASSERT_FALSE(m.ok()) << c.json;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos)
        << m.status().message() << " (wanted '" << c.expect << "')";
  }
}

TEST(ModelDescription, LoadReportsMissingFileAndPath) {
  auto missing = LoadModelDescription("/nonexistent/model.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  const std::string path = ::testing::TempDir() + "/bad_model.json";
  std::ofstream(path) << R"({"layers": 2})";
  auto bad = LoadModelDescription(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos);
}

// Everything the planner promises about a chosen layout.
void ExpectValid(const ModelDescription& m, const LayoutScore& s, int workers) {
  const Layout& l = s.layout;
  EXPECT_LE(l.world(), workers);
  EXPECT_EQ(m.heads % l.tp, 0);
  EXPECT_EQ(m.hidden % l.tp, 0);
  EXPECT_LE(l.pp, m.layers);
  EXPECT_EQ(m.global_batch % (static_cast<int64_t>(l.dp) * m.micro_batch), 0);
  EXPECT_LE(s.memory_gib + CostConstants{}.memory_reserve_gib, m.device_memory_gib);
  EXPECT_NEAR(s.step_time_s, s.compute_s + s.tp_comm_s + s.bubble_s + s.pp_comm_s + s.dp_comm_s,
              1e-12);
}

TEST(Planner, ChoosesValidLayoutsAndSortedAlternatives) {
  for (const char* text : {kSmall, kLarge}) {
    const ModelDescription m = Parse(text);
    for (int workers : {1, 2, 3, 8, 12, 16, 64}) {
      auto plan = PlanLayout(m, Hosts(workers, 8), {}, {});
      if (!plan.ok()) {
        // Only the large model on too few devices may fail, and then for memory.
        EXPECT_STREQ(text, kLarge);
        EXPECT_NE(plan.status().message().find("GiB"), std::string::npos) << plan.status();
        continue;
      }
      ExpectValid(m, plan->best, workers);
      // Ranked by (TP across hosts, workers left idle, step time).
      auto key = [&](const LayoutScore& s) {
        return std::make_tuple(!s.tp_in_host, s.layout.world() != workers, s.step_time_s);
      };
      auto last = key(plan->best);
      for (const auto& alt : plan->alternatives) {
        ExpectValid(m, alt, workers);
        EXPECT_GE(key(alt), last);
        EXPECT_FALSE(alt.layout == plan->best.layout);
        last = key(alt);
      }
      ASSERT_EQ(static_cast<int>(plan->worker_of_rank.size()), plan->best.layout.world());
      std::set<int> distinct(plan->worker_of_rank.begin(), plan->worker_of_rank.end());
      EXPECT_EQ(distinct.size(), plan->worker_of_rank.size());
    }
  }
}

TEST(Planner, LargeModelNeedsModelParallelismAndSmallDeviceIsRefused) {
  ModelDescription m = Parse(kLarge);
  auto plan = PlanLayout(m, Hosts(16, 8), {}, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_GT(plan->best.layout.pp * plan->best.layout.tp, 1);
  m.device_memory_gib = 4;
  auto refused = PlanLayout(m, Hosts(4, 4), {}, {});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("GiB"), std::string::npos) << refused.status();
}

TEST(Planner, LeavesWorkersIdleOnlyWhenNoLayoutUsesThemAllAndSaysWhy) {
  // 7 workers, 6 layers: 7 divides neither heads, the batch, nor fits as pp.
  ModelDescription m = Parse(kSmall);
  m.layers = 6;
  auto plan = PlanLayout(m, Hosts(7, 8), {}, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_LT(plan->best.layout.world(), 7);
  EXPECT_EQ(plan->worker_of_rank.size(), static_cast<size_t>(plan->best.layout.world()));
  EXPECT_NE(plan->idle_reason.find("all 7 workers"), std::string::npos) << plan->idle_reason;
  EXPECT_NE(plan->idle_reason.find("global_batch"), std::string::npos) << plan->idle_reason;
}

TEST(Planner, UsesEveryWorkerWhenALayoutDoes) {
  // With 8 layers, pp=7 uses all 7 workers. Its first stage has 2 layers, so the model finds
  // dp=2,pp=3 on 6 workers faster; every worker is still used, and the faster one is reported.
  const ModelDescription m = Parse(kSmall);
  auto plan = PlanLayout(m, Hosts(7, 8), {}, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->best.layout.world(), 7);
  EXPECT_TRUE(plan->idle_reason.empty()) << plan->idle_reason;
  ASSERT_TRUE(plan->faster_with_idle_workers.has_value());
  EXPECT_LT(plan->faster_with_idle_workers->layout.world(), 7);
  EXPECT_LT(plan->faster_with_idle_workers->step_time_s, plan->best.step_time_s);
  // When the layout using every worker is also the fastest, nothing is reported.
  auto sixteen = PlanLayout(m, Hosts(16, 8), {}, {});
  ASSERT_TRUE(sixteen.ok());
  EXPECT_EQ(sixteen->best.layout.world(), 16);
  EXPECT_FALSE(sixteen->faster_with_idle_workers.has_value());
}

TEST(Planner, NeverPlacesTpAcrossHostsWhileAHostContainedLayoutFits) {
  // Hosts of 2 and a cross-host network made faster than the in-host one, so that tp=4 across
  // hosts is modelled faster: the planner still keeps TP inside hosts.
  const ModelDescription m = Parse(kLarge);
  PlannerOptions o;
  o.cost.inter_host_bytes_per_s = 10 * o.cost.intra_host_bytes_per_s;
  auto plan = PlanLayout(m, Hosts(8, 2), {}, {}, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->best.tp_in_host);
  EXPECT_LE(plan->best.layout.tp, 2);
  auto across = ScoreLayout(m, Layout{2, 1, 4}, Hosts(8, 2), o.cost);
  ASSERT_TRUE(across.ok()) << across.status();
  EXPECT_FALSE(across->tp_in_host);
  EXPECT_LT(across->step_time_s, plan->best.step_time_s);
  // One worker per host and no pipeline: tp=1 does not fit, so TP has to cross hosts.
  EXPECT_FALSE(ScoreLayout(m, Layout{8, 1, 1}, Hosts(8, 1)).ok());
  auto forced = PlanLayout(m, Hosts(8, 1), PlannerPins{0, 1, false}, {});
  ASSERT_TRUE(forced.ok()) << forced.status();
  EXPECT_GT(forced->best.layout.tp, 1);
  EXPECT_FALSE(forced->best.tp_in_host);
}

TEST(Planner, PinsAreHonoured) {
  const ModelDescription m = Parse(kSmall);
  auto tp = PlanLayout(m, Hosts(16, 8), PlannerPins{4, 0, false}, {});
  ASSERT_TRUE(tp.ok());
  EXPECT_EQ(tp->best.layout.tp, 4);
  for (const auto& a : tp->alternatives) EXPECT_EQ(a.layout.tp, 4);
  auto pp = PlanLayout(m, Hosts(16, 8), PlannerPins{0, 2, false}, {});
  ASSERT_TRUE(pp.ok());
  EXPECT_EQ(pp->best.layout.pp, 2);
  for (const auto& a : pp->alternatives) EXPECT_EQ(a.layout.pp, 2);

  CurrentPlacement current{{2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}};
  auto dp = PlanLayout(m, Hosts(16, 8), PlannerPins{0, 0, true}, current);
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(dp->best.layout.pp, 2);
  EXPECT_EQ(dp->best.layout.tp, 2);
  EXPECT_EQ(PlanLayout(m, Hosts(16, 8), PlannerPins{0, 0, true}, {}).status().code(),
            StatusCode::kInvalidArgument);
  // tp=3 divides neither heads nor hidden: nothing valid, with the reason.
  auto bad = PlanLayout(m, Hosts(16, 8), PlannerPins{3, 0, false}, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tp=3"), std::string::npos) << bad.status();
  EXPECT_FALSE(PlanLayout(m, {}, {}, {}).ok());
  auto too_wide = PlanLayout(m, Hosts(2, 8), PlannerPins{4, 0, false}, {});
  ASSERT_FALSE(too_wide.ok());
  EXPECT_NE(too_wide.status().message().find("exceeds the workers"), std::string::npos);
}

TEST(CostModel, BubbleAndTrafficFollowTheDocumentedFormulas) {
  const ModelDescription m = Parse(kSmall);
  auto s = ScoreLayout(m, Layout{2, 4, 1}, Hosts(8, 8));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->micro_batches, 64 / (2 * 2));
  EXPECT_NEAR(s->bubble_s, s->compute_s * 3.0 / 16.0, 1e-12);
  EXPECT_GT(s->pp_comm_s, 0);
  EXPECT_EQ(s->tp_comm_s, 0);

  // The same tp=4 groups inside hosts of 4 vs spread over hosts of 2.
  auto in_host = ScoreLayout(m, Layout{2, 1, 4}, Hosts(8, 4));
  auto across = ScoreLayout(m, Layout{2, 1, 4}, Hosts(8, 2));
  ASSERT_TRUE(in_host.ok() && across.ok());
  EXPECT_TRUE(in_host->tp_in_host);
  EXPECT_FALSE(across->tp_in_host);
  const double ratio = CostConstants{}.intra_host_bytes_per_s / CostConstants{}.inter_host_bytes_per_s;
  EXPECT_GT(across->tp_comm_s, in_host->tp_comm_s * ratio * 0.5);
  EXPECT_EQ(in_host->compute_s, across->compute_s);

  // DP gradient traffic grows with dp and is zero without DP.
  auto dp1 = ScoreLayout(m, Layout{1, 1, 1}, Hosts(16, 8));
  auto dp16 = ScoreLayout(m, Layout{16, 1, 1}, Hosts(16, 8));
  ASSERT_TRUE(dp1.ok() && dp16.ok());
  EXPECT_EQ(dp1->dp_comm_s, 0);
  EXPECT_GT(dp16->dp_comm_s, 0);

  EXPECT_FALSE(ScoreLayout(m, Layout{3, 1, 1}, Hosts(8, 8)).ok());   // batch
  EXPECT_FALSE(ScoreLayout(m, Layout{1, 9, 1}, Hosts(16, 8)).ok());  // pp > layers
  EXPECT_FALSE(ScoreLayout(m, Layout{1, 1, 16}, Hosts(8, 8)).ok());  // too few workers
}

// A bf16 GPT with ffn = 4h, so that Korthikanti et al.'s per-layer formulas apply as printed.
ModelDescription Korthikanti(int layers) {
  ModelDescription m = Parse(kLarge);
  m.layers = layers;
  m.micro_batch = 2;
  m.device_memory_gib = 1e6;  // everything fits: the choice is pinned
  return m;
}

TEST(CostModel, ActivationMemoryFollowsKorthikanti) {
  // Per layer and micro-batch (bytes): no recomputation sbh(10 + 24/t) + 5as^2b/t, with
  // sequence parallelism (34 sbh + 5as^2b)/t; selective sbh(10 + 24/t), with sequence
  // parallelism 34 sbh/t; full 2 sbh, with sequence parallelism 2 sbh/t. With pp = 1 one
  // micro-batch is in flight; the difference between 2L and L layers is L layers' worth.
  const double s = 2048, b = 2, h = 4096, a = 32, t = 4, L = 8;
  struct Case {
    Recompute r;
    bool sp;
    double per_layer;
  };
  const std::vector<Case> cases = {
      {Recompute::kNone, false, s * b * h * (10 + 24 / t) + 5 * a * s * s * b / t},
      {Recompute::kNone, true, (34 * s * b * h + 5 * a * s * s * b) / t},
      {Recompute::kSelective, false, s * b * h * (10 + 24 / t)},
      {Recompute::kSelective, true, 34 * s * b * h / t},
      {Recompute::kFull, false, 2 * s * b * h},
      {Recompute::kFull, true, 2 * s * b * h / t}};
  for (const Case& c : cases) {
    PlannerPins pins;
    pins.recompute = c.r;
    pins.sequence_parallel = c.sp;
    auto one = ScoreLayout(Korthikanti(L), Layout{1, 1, 4}, Hosts(4, 8), {}, pins);
    auto two = ScoreLayout(Korthikanti(2 * L), Layout{1, 1, 4}, Hosts(4, 8), {}, pins);
    ASSERT_TRUE(one.ok() && two.ok());
    EXPECT_EQ(one->recompute, c.r);
    EXPECT_EQ(one->sequence_parallel, c.sp);
    EXPECT_EQ(one->in_flight, 1);
    const double per_layer = (two->activation_gib - one->activation_gib) * kGiBBytes / L;
    EXPECT_NEAR(per_layer / c.per_layer, 1.0, 1e-9) << RecomputeName(c.r) << " sp " << c.sp;
  }
}

TEST(CostModel, OneFOneBKeepsUpToPpMicroBatchesOnTheFirstStage) {
  ModelDescription m = Korthikanti(16);
  m.vocab = 64;  // so that stage 0, not the output layer's stage, needs the most memory
  PlannerPins pins;
  pins.recompute = Recompute::kFull;
  pins.sequence_parallel = false;
  auto deep = ScoreLayout(m, Layout{1, 4, 1}, Hosts(4, 8), {}, pins);  // m = 256 micro-batches
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(deep->in_flight, 4);
  m.global_batch = 4;  // 2 micro-batches: only 2 can be in flight
  auto shallow = ScoreLayout(m, Layout{1, 4, 1}, Hosts(4, 8), {}, pins);
  ASSERT_TRUE(shallow.ok());
  EXPECT_EQ(shallow->micro_batches, 2);
  EXPECT_EQ(shallow->in_flight, 2);
  // Stage 0: 4 layers' inputs (2 sbh each) per micro-batch in flight, plus the embedding's
  // dropout mask (sbh at 1 byte); the recomputation workspace is the same for both.
  const double sbh = 2048.0 * 2 * 4096;
  EXPECT_NEAR((deep->activation_gib - shallow->activation_gib) * kGiBBytes, 2 * (4 * 2 * sbh + sbh),
              1.0);
  // The bubble is pp - 1 slots of the slowest stage: m = 2 pays it over 2 slots, m = 256 over 256.
  EXPECT_NEAR(shallow->bubble_s / shallow->compute_s, 3.0 / 2.0, 1e-9);
  EXPECT_NEAR(deep->bubble_s / deep->compute_s, 3.0 / 256.0, 1e-9);
}

TEST(CostModel, RecomputationCostsItsForwardAndSelectiveTheAttentionCore) {
  const ModelDescription m = Korthikanti(8);
  const CostConstants c;
  auto score = [&](Recompute r) {
    PlannerPins pins;
    pins.recompute = r;
    auto s = ScoreLayout(m, Layout{1, 1, 4}, Hosts(4, 8), c, pins);
    EXPECT_TRUE(s.ok());
    return *s;
  };
  const LayoutScore none = score(Recompute::kNone), selective = score(Recompute::kSelective),
                    full = score(Recompute::kFull);
  const double rate = c.device_flops * c.flops_efficiency;
  const double mb = static_cast<double>(none.micro_batches), L = 8, t = 4;
  const double s = 2048, b = 2, h = 4096, a = 32, V = 50304;
  // Forward of a layer: 24 bsh^2 + 4 bs^2h FLOPs; backward twice that; logits 6 bshV.
  const double fwd = 24 * b * s * h * h + 4 * b * s * s * h;
  EXPECT_EQ(none.recompute_s, 0);
  EXPECT_NEAR(none.compute_s, mb * (3 * L * fwd + 6 * b * s * h * V) / t / rate, 1e-9);
  EXPECT_NEAR(full.recompute_s, mb * L * fwd / t / rate, 1e-9);  // one more forward
  EXPECT_NEAR(full.compute_s - none.compute_s, full.recompute_s, 1e-9);
  EXPECT_NEAR(full.tp_comm_s / none.tp_comm_s, 6.0 / 4.0, 1e-9);  // the forward's 2 collectives
  // Selective: the attention matmuls again, and the attention core's activations (5as^2b bytes
  // per layer) written again at memory bandwidth. A few percent here, a third for full.
  EXPECT_NEAR(
      selective.recompute_s,
      mb * L * (4 * b * s * s * h / t / rate + 5 * a * s * s * b / t / c.memory_bytes_per_s), 1e-9);
  EXPECT_EQ(selective.tp_comm_s, none.tp_comm_s);
  const double layers_s = none.compute_s - mb * 6 * b * s * h * V / t / rate;
  EXPECT_LT(selective.recompute_s, 0.05 * layers_s);
  EXPECT_NEAR(full.recompute_s / layers_s, 1.0 / 3.0, 1e-9);
}

TEST(CostModel, PicksTheFastestChoiceThatFits) {
  ModelDescription m = Korthikanti(8);
  const Layout l{1, 1, 4};
  auto pinned = [&](Recompute r, bool sp) {
    PlannerPins pins;
    pins.recompute = r;
    pins.sequence_parallel = sp;
    return *ScoreLayout(m, l, Hosts(4, 8), {}, pins);
  };
  const double reserve = CostConstants{}.memory_reserve_gib;
  const LayoutScore none = pinned(Recompute::kNone, false),
                    none_sp = pinned(Recompute::kNone, true),
                    selective_sp = pinned(Recompute::kSelective, true),
                    full_sp = pinned(Recompute::kFull, true);
  EXPECT_GT(none.memory_gib, none_sp.memory_gib);
  EXPECT_GT(none_sp.memory_gib, selective_sp.memory_gib);
  EXPECT_GT(selective_sp.memory_gib, full_sp.memory_gib);
  // Room for everything: no recomputation, with sequence parallelism (same time, less memory).
  m.device_memory_gib = none.memory_gib + reserve + 1;
  auto roomy = ScoreLayout(m, l, Hosts(4, 8));
  ASSERT_TRUE(roomy.ok());
  EXPECT_EQ(roomy->recompute, Recompute::kNone);
  EXPECT_TRUE(roomy->sequence_parallel);
  EXPECT_EQ(roomy->step_time_s, none.step_time_s);
  // Less room each time: selective, then full recomputation; then nothing fits.
  m.device_memory_gib = none_sp.memory_gib + reserve - 0.01;
  auto tight = ScoreLayout(m, l, Hosts(4, 8));
  ASSERT_TRUE(tight.ok());
  EXPECT_EQ(tight->recompute, Recompute::kSelective);
  m.device_memory_gib = selective_sp.memory_gib + reserve - 0.01;
  auto tighter = ScoreLayout(m, l, Hosts(4, 8));
  ASSERT_TRUE(tighter.ok());
  EXPECT_EQ(tighter->recompute, Recompute::kFull);
  EXPECT_GT(tighter->step_time_s, tight->step_time_s);
  m.device_memory_gib = full_sp.memory_gib + reserve - 0.01;
  auto none_fits = ScoreLayout(m, l, Hosts(4, 8));
  ASSERT_FALSE(none_fits.ok());
  EXPECT_NE(none_fits.status().message().find("full recomputation"), std::string::npos)
      << none_fits.status();
}

TEST(CostModel, ScoreJsonNamesTheChoice) {
  auto s = ScoreLayout(Korthikanti(8), Layout{1, 1, 4}, Hosts(4, 8));
  ASSERT_TRUE(s.ok());
  const std::string json = LayoutScoreJson(*s);
  for (const char* key :
       {"\"recompute\":\"none\"", "\"sequence_parallel\":true", "\"in_flight\":1",
        "\"recompute_s\"", "\"activation_gib\"", "\"layout\":\"dp=1,pp=1,tp=4\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
}

TEST(Assignment, HungarianMatchesBruteForce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int rows = 1 + rng() % 5, cols = rows + rng() % 3;
    std::vector<std::vector<int64_t>> c(rows, std::vector<int64_t>(cols));
    for (auto& row : c) {
      for (auto& x : row) x = static_cast<int64_t>(rng() % 100) - 50;
    }
    const auto assign = SolveAssignment(c);
    int64_t got = 0;
    std::set<int> used;
    for (int i = 0; i < rows; ++i) {
      got += c[i][assign[i]];
      used.insert(assign[i]);
    }
    EXPECT_EQ(static_cast<int>(used.size()), rows);
    std::vector<int> perm(cols);
    std::iota(perm.begin(), perm.end(), 0);
    int64_t best = INT64_MAX;
    do {
      int64_t v = 0;
      for (int i = 0; i < rows; ++i) v += c[i][perm[i]];
      best = std::min(best, v);
    } while (std::next_permutation(perm.begin(), perm.end()));
    EXPECT_EQ(got, best);
  }
}

TEST(Assignment, FreshLayoutUsesMegatronOrderWithTpInsideHosts) {
  const ModelDescription m = Parse(kSmall);
  // Hosts interleaved: worker w on host w % 2, so Megatron order must follow hosts, not ids.
  std::vector<int> hosts(8);
  for (int w = 0; w < 8; ++w) hosts[w] = w % 2;
  auto a = AssignRanks(m, Layout{2, 1, 4}, hosts, {});
  ASSERT_TRUE(a.ok());
  for (int g = 0; g < 2; ++g) {
    for (int j = 1; j < 4; ++j) EXPECT_EQ(hosts[(*a)[g * 4 + j]], hosts[(*a)[g * 4]]);
  }
  EXPECT_EQ(*a, (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
}

TEST(Assignment, SameLayoutKeepsEveryWorkerInPlace) {
  const ModelDescription m = Parse(kSmall);
  std::mt19937 rng(5);
  for (Layout l : {Layout{2, 2, 2}, Layout{4, 2, 1}, Layout{1, 4, 2}}) {
    std::vector<int> workers(8);
    std::iota(workers.begin(), workers.end(), 0);
    std::shuffle(workers.begin(), workers.end(), rng);
    // Keep TP groups inside hosts of 2: shuffle whole pairs only when tp = 2.
    if (l.tp == 2) {
      for (int g = 0; g < 4; ++g) {
        workers[2 * g] = 2 * ((g + 1) % 4);
        workers[2 * g + 1] = 2 * ((g + 1) % 4) + 1;
      }
    }
    CurrentPlacement current{l, workers};
    bool exact = false;
    int64_t kept = 0;
    auto a = AssignRanks(m, l, Hosts(8, 2), current, {}, &exact, &kept);
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(exact);
    EXPECT_EQ(*a, workers) << l.ToString();
  }
}

TEST(Assignment, ShrinkKeepsTheWorkersHoldingTheMostState) {
  const ModelDescription m = Parse(kSmall);
  // dp=2,pp=2 on 4 workers -> pp=2 alone: the two kept workers must hold the two stages.
  CurrentPlacement current{{2, 2, 1}, {3, 1, 0, 2}};
  auto a = AssignRanks(m, Layout{1, 2, 1}, Hosts(4, 4), current);
  ASSERT_TRUE(a.ok());
  // Rank 0 (stage 0) must be a worker that held stage 0 (workers 3 or 0), rank 1 stage 1.
  EXPECT_TRUE((*a)[0] == 3 || (*a)[0] == 0);
  EXPECT_TRUE((*a)[1] == 1 || (*a)[1] == 2);
  EXPECT_FALSE(AssignRanks(m, Layout{1, 1, 8}, Hosts(4, 4), current).ok());
  EXPECT_FALSE(AssignRanks(m, Layout{1, 1, 2}, Hosts(4, 4), CurrentPlacement{{2, 1, 1}, {0}}).ok());
}

TEST(Assignment, TpShrinkWithTheEstimateKeepsOneWorkerOfEachHalf) {
  // tp 4 -> 2 on one host: new rank 0 needs the first half (old ranks 0 and 1 hold a quarter
  // each), rank 1 the second; keeping workers 0 and 1 would move 3/4 of the split state.
  const ModelDescription m = Parse(kSmall);
  bool exact = false;
  auto a = AssignRanks(m, Layout{1, 1, 2}, Hosts(4, 8), CurrentPlacement{{1, 1, 4}, {0, 1, 2, 3}},
                       {}, &exact);
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(exact);
  EXPECT_TRUE((*a)[0] == 0 || (*a)[0] == 1) << (*a)[0];
  EXPECT_TRUE((*a)[1] == 2 || (*a)[1] == 3) << (*a)[1];
}

TEST(Assignment, CustomKeptBytesDrivesTheChoice) {
  const ModelDescription m = Parse(kSmall);
  CurrentPlacement current{{4, 1, 1}, {0, 1, 2, 3}};
  PlannerOptions o;
  // Pretend only old rank 3 holds anything of new rank 0.
  o.kept_bytes = [](int from, const Layout&, int to) -> int64_t {
    return from == 3 && to == 0 ? 1000 : 0;
  };
  int64_t kept = 0;
  auto a = AssignRanks(m, Layout{2, 1, 1}, Hosts(4, 4), current, o, nullptr, &kept);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)[0], 3);
  EXPECT_EQ(kept, 1000);
}

}  // namespace
}  // namespace elastra
