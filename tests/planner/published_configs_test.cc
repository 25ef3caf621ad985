// The cost model against published large-scale training runs: on its own hardware, each
// published layout must fit, and be within a few percent of the planner's best choice, which
// keeps TP inside a host and uses every GPU. Sources (docs/resharding.md has the table):
//   [N21] Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
//         Using Megatron-LM" (SC21), table 1 (weak scaling, A100 80 GB, DGX A100 nodes of 8).
//         Micro-batch size is not in the table: 1. Activation recomputation: full.
//   [K22] Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
//         Models", table 3 (same cluster): sequence parallelism and selective recomputation.
//   [S22] Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B",
//         section 2.3: 280 DGX A100 nodes (2240 GPUs), t = 8, p = 35, batch 1920, full
//         recomputation.
//   [B22] BigScience 2022, "BLOOM: A 176B-Parameter Open-Access Multilingual Language Model",
//         section 3.4, and its launch script (bigscience-workshop/bigscience,
//         train/tr11-176B-ml/tr11-176B-ml.slurm): 48 nodes of 8 A100 80 GB, TP 4, PP 12, DP 8,
//         micro-batch 2, batch 2048, vocabulary padded to 250880, bf16 with the optimizer state
//         sharded over DP (ZeRO-1), full recomputation; 4 x 100 Gb/s Omni-Path per node.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace elastra {
namespace {

// Selene (DGX A100 80 GB, NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node). The kernels' 60 % of
// peak reproduces [N21]'s measured throughput: with full recomputation the model's step times
// for its 18.4B to 1T rows are 0.92 to 1.10 of the measured ones. 230 GB/s is NCCL's all-reduce
// bus bandwidth over NVSwitch.
CostConstants Selene() {
  CostConstants c;
  c.device_flops = 312e12;
  c.flops_efficiency = 0.6;
  c.memory_bytes_per_s = 2.0e12;
  c.intra_host_bytes_per_s = 230e9;
  c.inter_host_bytes_per_s = 25e9;  // one 200 Gb/s HDR port per GPU
  return c;
}

// Jean Zay (BLOOM): the same nodes with 4 x 100 Gb/s Omni-Path per node of 8 GPUs.
CostConstants JeanZay() {
  CostConstants c = Selene();
  c.inter_host_bytes_per_s = 6.25e9;
  return c;
}

struct Published {
  const char* name;
  const char* source;
  int layers;
  int64_t hidden;
  int heads;
  int64_t vocab;
  int64_t global_batch;
  int64_t micro_batch;
  const char* dtype;
  int zero;
  int gpus;
  Layout layout;        // dp, pp, tp as published
  Recompute recompute;  // what the run used
  bool sequence_parallel;
  CostConstants cost;
  double tolerance = 1.05;  // published step / planner's best step
};

// clang-format off
const std::vector<Published>& Table() {
  static const std::vector<Published> table = {
      // The weak-scaling table sets t = 8 from 18.4B on rather than searching; at hidden 6144
      // the model charges t = 8 about 17 % of compute in TP traffic and prefers t = 4 (6 to 7 %
      // faster). [N21]'s own measurement agrees that this row pays for it: 135 TFLOP/s per GPU,
      // the lowest of the table (138 to 163 for the others).
      {"GPT 18.4B", "[N21] table 1", 40, 6144, 48, 51200, 1024, 1, "fp16", 0, 256, {32, 1, 8},
       Recompute::kFull, false, Selene(), 1.08},
      {"GPT 39.1B", "[N21] table 1", 48, 8192, 64, 51200, 1536, 1, "fp16", 0, 512, {32, 2, 8},
       Recompute::kFull, false, Selene()},
      {"GPT 76.1B", "[N21] table 1", 60, 10240, 80, 51200, 1792, 1, "fp16", 0, 1024, {32, 4, 8},
       Recompute::kFull, false, Selene()},
      {"GPT 145.6B", "[N21] table 1", 80, 12288, 96, 51200, 2304, 1, "fp16", 0, 1536,
       {24, 8, 8}, Recompute::kFull, false, Selene()},
      {"GPT 310.1B", "[N21] table 1", 96, 16384, 128, 51200, 2160, 1, "fp16", 0, 1920,
       {15, 16, 8}, Recompute::kFull, false, Selene()},
      {"GPT 529.6B", "[N21] table 1", 105, 20480, 128, 51200, 2520, 1, "fp16", 0, 2520,
       {9, 35, 8}, Recompute::kFull, false, Selene()},
      {"GPT 1008B", "[N21] table 1", 128, 25600, 160, 51200, 3072, 1, "fp16", 0, 3072,
       {6, 64, 8}, Recompute::kFull, false, Selene()},
      {"GPT 22B", "[K22] table 3", 48, 6144, 64, 51200, 4, 4, "bf16", 0, 8, {1, 1, 8},
       Recompute::kSelective, true, Selene()},
      {"GPT-3 175B", "[K22] table 3", 96, 12288, 96, 51200, 64, 1, "bf16", 0, 64, {1, 8, 8},
       Recompute::kSelective, true, Selene()},
      {"MT-NLG 530B", "[K22] table 3", 105, 20480, 128, 51200, 280, 1, "bf16", 0, 280,
       {1, 35, 8}, Recompute::kSelective, true, Selene()},
      {"GPT 1T", "[K22] table 3", 128, 25600, 160, 51200, 512, 1, "bf16", 0, 512, {1, 64, 8},
       Recompute::kSelective, true, Selene()},
      {"MT-NLG 530B", "[S22] 2.3", 105, 20480, 128, 51200, 1920, 1, "bf16", 0, 2240, {8, 35, 8},
       Recompute::kFull, false, Selene()},
      // The free choice would run BLOOM at t = 8 with sequence parallelism and no recomputation
      // (5.1 % faster), techniques its Megatron-DeepSpeed did not have; with what it ran, the
      // published layout is within 2.1 %.
      {"BLOOM 176B", "[B22] 3.4", 70, 14336, 112, 250880, 2048, 2, "bf16", 1, 384, {8, 12, 4},
       Recompute::kFull, false, JeanZay(), 1.06},
  };
  return table;
}
// clang-format on

ModelDescription ModelOf(const Published& p) {
  ModelDescription m;
  m.layers = p.layers;
  m.hidden = p.hidden;
  m.heads = p.heads;
  m.ffn_hidden = 4 * p.hidden;
  m.vocab = p.vocab;
  m.seq_len = 2048;
  m.global_batch = p.global_batch;
  m.micro_batch = p.micro_batch;
  m.dtype = p.dtype;
  m.zero = p.zero;
  m.device_memory_gib = 80;
  return m;
}

std::vector<int> Hosts(int workers, int per_host) {
  std::vector<int> h(workers);
  for (int w = 0; w < workers; ++w) h[w] = w / per_host;
  return h;
}

std::string Choice(const LayoutScore& s) {
  return s.layout.ToString() + " " + RecomputeName(s.recompute) +
         (s.sequence_parallel ? "+sp" : "");
}

// The published layout against the planner's best, with the activation choices `pins` allows.
double CheckAgainstBest(const Published& p, const PlannerPins& activation_pins, const char* what) {
  const ModelDescription m = ModelOf(p);
  const std::vector<int> hosts = Hosts(p.gpus, 8);
  auto published = ScoreLayout(m, p.layout, hosts, p.cost, activation_pins);
  EXPECT_TRUE(published.ok()) << p.name << " (" << what << "): " << published.status();
  PlannerOptions options;
  options.cost = p.cost;
  auto plan = PlanLayout(m, hosts, activation_pins, {}, options);
  EXPECT_TRUE(plan.ok()) << p.name << ": " << plan.status();
  if (!published.ok() || !plan.ok()) return 0;
  EXPECT_TRUE(plan->best.tp_in_host) << p.name;
  EXPECT_LE(plan->best.layout.tp, 8) << p.name;
  EXPECT_EQ(plan->best.layout.world(), p.gpus) << p.name;
  const double ratio = published->step_time_s / plan->best.step_time_s;
  EXPECT_LE(ratio, p.tolerance) << p.name << " " << p.source << " (" << what << "): published "
                                << Choice(*published) << " vs best " << Choice(plan->best);
  std::printf(
      "%-12s %-14s %-6s %-5d published %-32s %6.2f s %5.1f GiB | best %-32s %6.2f s "
      "| ratio %.3f\n",
      p.name, p.source, what, p.gpus, Choice(*published).c_str(), published->step_time_s,
      published->memory_gib, Choice(plan->best).c_str(), plan->best.step_time_s, ratio);
  return ratio;
}

TEST(PublishedConfigs, FitAndAreWithinAFewPercentOfTheBest) {
  for (const Published& p : Table()) {
    CheckAgainstBest(p, {}, "free");
    // With the recomputation (and sequence parallelism) the run used.
    PlannerPins method;
    method.recompute = p.recompute;
    method.sequence_parallel = p.sequence_parallel;
    CheckAgainstBest(p, method, "as run");
  }
}

TEST(PublishedConfigs, PinnedToThePublishedTpAndPpThePlannerPicksThePublishedLayout) {
  for (const Published& p : Table()) {
    const ModelDescription m = ModelOf(p);
    PlannerOptions options;
    options.cost = p.cost;
    PlannerPins pins;
    pins.tp = p.layout.tp;
    pins.pp = p.layout.pp;
    auto plan = PlanLayout(m, Hosts(p.gpus, 8), pins, {}, options);
    ASSERT_TRUE(plan.ok()) << p.name << ": " << plan.status();
    EXPECT_EQ(plan->best.layout, p.layout) << p.name << ": " << Choice(plan->best);
    EXPECT_TRUE(plan->best.tp_in_host) << p.name;
    EXPECT_TRUE(plan->idle_reason.empty()) << p.name << ": " << plan->idle_reason;
  }
}

// The case of issue 14 with the planner's default constants: a 1T GPT (Megatron's 1T run) on
// 3072 devices of 80 GiB, 8 per host. Without recomputation nothing with tp inside a host fits
// (the old model chose tp = 80 across hosts on 2560 workers); Megatron ran t = 8, p = 64, d = 6.
TEST(PublishedConfigs, OneTrillionOn3072DevicesWithTheDefaults) {
  ModelDescription m;
  m.layers = 128;
  m.hidden = 25600;
  m.heads = 160;
  m.ffn_hidden = 4 * 25600;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.global_batch = 3072;
  m.micro_batch = 1;
  m.device_memory_gib = 80;
  const std::vector<int> hosts = Hosts(3072, 8);
  auto plan = PlanLayout(m, hosts, {}, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->best.layout, (Layout{6, 64, 8}));
  EXPECT_EQ(plan->best.recompute, Recompute::kSelective);
  EXPECT_TRUE(plan->best.sequence_parallel);
  EXPECT_TRUE(plan->best.tp_in_host);
  EXPECT_EQ(plan->best.in_flight, 64);
  EXPECT_TRUE(plan->idle_reason.empty());
  PlannerPins none;
  none.recompute = Recompute::kNone;
  EXPECT_FALSE(ScoreLayout(m, Layout{6, 64, 8}, hosts, {}, none).ok());
  PlannerPins pins;
  pins.tp = 8;
  pins.pp = 64;
  auto pinned = PlanLayout(m, hosts, pins, {});
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->best.layout, (Layout{6, 64, 8}));
  EXPECT_EQ(pinned->best.step_time_s, plan->best.step_time_s);
}

}  // namespace
}  // namespace elastra
