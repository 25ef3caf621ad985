// Tests of the model description parser and the planner (layout choice and rank assignment).
#include "coordinator/planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "coordinator/model_description.h"

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
      double last = plan->best.step_time_s;
      for (const auto& alt : plan->alternatives) {
        ExpectValid(m, alt, workers);
        EXPECT_GE(alt.step_time_s, last);
        EXPECT_FALSE(alt.layout == plan->best.layout);
        last = alt.step_time_s;
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

TEST(Planner, MayLeaveWorkersIdle) {
  // 7 workers: no valid layout uses all 7 (7 divides neither heads, layers nor the batch).
  const ModelDescription m = Parse(kSmall);
  auto plan = PlanLayout(m, Hosts(7, 8), {}, {});
  ASSERT_TRUE(plan.ok());
  EXPECT_LT(plan->best.layout.world(), 7);
  EXPECT_EQ(plan->worker_of_rank.size(), static_cast<size_t>(plan->best.layout.world()));
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
