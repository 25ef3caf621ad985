// The memory constraint of the layout policy (docs/recovery.md): what a worker needs at a layout,
// the layout that fits the workers' budgets, and the recovery members that keep whole replicas in
// place. Pure: no core, no clock. The property test draws random states, budgets and worker
// counts and checks that no choice exceeds a budget.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "coordinator/layout_policy.h"

namespace elastra::coordinator {
namespace {

// Four layers, each with a [64, 64] float32 weight split over TP along dim 0 and owned by its
// stage, and a [64] replicated bias on every stage: 16 KiB a weight, 256 B a bias.
proto::JoinRequest FourLayers() {
  proto::JoinRequest join{"a", "n1", 0, 1};
  join.state.num_layers = 4;
  for (int l = 0; l < 4; ++l) {
    join.state.tensors.push_back(
        TensorSpec{"w" + std::to_string(l), {64, 64}, 4, ShardingRule{0, l, false}});
  }
  join.state.tensors.push_back(TensorSpec{"bias", {64}, 4, ShardingRule{-1, -1, false}});
  return join;
}

constexpr int64_t kWeight = 64 * 64 * 4;
constexpr int64_t kBias = 64 * 4;

std::vector<std::string> Hosts(int n) { return std::vector<std::string>(n, "h"); }

TEST(LayoutMemoryTest, NeedBytesFollowsTheShardingRules) {
  LayoutPolicy policy;
  EXPECT_EQ(policy.NeedBytes(Layout{1, 1, 1}), 0) << "nothing registered yet";
  policy.Learn(FourLayers());
  EXPECT_EQ(policy.NeedBytes(Layout{1, 1, 1}), 4 * kWeight + kBias);
  EXPECT_EQ(policy.NeedBytes(Layout{3, 1, 1}), 4 * kWeight + kBias) << "replicas hold it all";
  EXPECT_EQ(policy.NeedBytes(Layout{1, 2, 1}), 2 * kWeight + kBias);
  EXPECT_EQ(policy.NeedBytes(Layout{1, 1, 2}), 4 * kWeight / 2 + kBias);
  EXPECT_EQ(policy.NeedBytes(Layout{2, 2, 2}), kWeight + kBias);
  // 64 rows in 3: 22, 21, 21; the fullest rank bounds the layout.
  EXPECT_EQ(policy.NeedBytes(Layout{1, 1, 3}), 4 * 22 * 64 * 4 + kBias);
  EXPECT_EQ(policy.NeedBytes(Layout{1, 5, 1}), INT64_MAX) << "5 stages of 4 layers";
}

TEST(LayoutMemoryTest, ZeroShardedTensorsShrinkWithDataParallelism) {
  LayoutPolicy policy;
  proto::JoinRequest join{"a", "n1", 0, 1};
  join.state.tensors.push_back(TensorSpec{"m", {10, 10}, 4, ShardingRule{-1, -1, true}});
  policy.Learn(join);
  EXPECT_EQ(policy.NeedBytes(Layout{1, 1, 1}), 400);
  // 100 elements over 3 replicas: 34, 33, 33; the fullest rank bounds the layout.
  EXPECT_EQ(policy.NeedBytes(Layout{3, 1, 1}), 34 * 4);
}

TEST(LayoutMemoryTest, CheckMemorySaysWhatIsNeededAndWhoHasLess) {
  LayoutPolicy policy;
  policy.Learn(FourLayers());
  EXPECT_TRUE(policy.CheckMemory(Layout{1, 1, 1}, 0, "w0").ok()) << "0 is unlimited";
  EXPECT_TRUE(policy.CheckMemory(Layout{1, 1, 1}, 4 * kWeight + kBias, "w0").ok());
  Status s = policy.CheckMemory(Layout{1, 1, 1}, 20000, "w4");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "layout dp=1,pp=1,tp=1 needs 64.2 KiB a worker, w4 has 19.5 KiB");
}

TEST(LayoutMemoryTest, ARecoveryKeepsTheModelParallelismAndLeavesTheRestStandby) {
  LayoutPolicy policy;
  policy.Learn(FourLayers());
  const Layout current{2, 2, 2};
  // 7 survivors, unlimited memory: one replica of pp=2 x tp=2, not dp=7.
  auto kept = policy.ChooseFitting(Hosts(7), 0, current, /*keep_model_parallel=*/true);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(*kept, (Layout{1, 2, 2}));
  // A planned change of 7 uses every worker when it fits (dp=7).
  auto all = policy.ChooseFitting(Hosts(7), 0, current, /*keep_model_parallel=*/false);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(*all, (Layout{7, 1, 1}));
}

TEST(LayoutMemoryTest, ABudgetRulesOutTheLayoutsThatDoNotFit) {
  LayoutPolicy policy;
  policy.Learn(FourLayers());
  // Room for a quarter of the weights: only pp x tp >= 4 fits.
  const int64_t budget = kWeight + kBias;
  auto chosen = policy.ChooseFitting(Hosts(7), budget, Layout{7, 1, 1}, false);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->world(), 7) << "tp=7 (rows split 10, 9, ...) fits and uses every worker";
  EXPECT_EQ(chosen->dp, 1);
  EXPECT_LE(policy.NeedBytes(*chosen), budget);
  chosen = policy.ChooseFitting(Hosts(4), budget, Layout{4, 1, 1}, false);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->pp * chosen->tp, 4);
  EXPECT_FALSE(policy.ChooseFitting(Hosts(3), budget, Layout{1, 1, 1}, false).has_value())
      << "3 workers cannot hold a quarter each";
  EXPECT_FALSE(policy.ChooseFitting(Hosts(8), 100, Layout{1, 1, 1}, false).has_value());
}

TEST(LayoutMemoryTest, NoChoiceExceedsABudget) {
  std::mt19937 rng(20261207);
  for (int round = 0; round < 200; ++round) {
    LayoutPolicy policy;
    proto::JoinRequest join{"a", "n1", 0, 1};
    join.state.num_layers = 1 + static_cast<int>(rng() % 6);
    const int tensors = 1 + static_cast<int>(rng() % 5);
    for (int t = 0; t < tensors; ++t) {
      const int64_t rows = 8 << (rng() % 4), cols = 1 + rng() % 16;
      const int split = static_cast<int>(rng() % 3) - 1;  // -1 replicated, 0 rows, 1 columns
      const int layer = static_cast<int>(rng() % (join.state.num_layers + 1)) - 1;
      join.state.tensors.push_back(TensorSpec{"t" + std::to_string(t), {rows, cols}, 4,
                                              ShardingRule{split, layer,
                                                           rng() % 4 == 0}});
    }
    policy.Learn(join);
    const int workers = 1 + static_cast<int>(rng() % 16);
    const int64_t whole = policy.NeedBytes(Layout{1, 1, 1});
    const int64_t budget = rng() % 5 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % (whole + 1));
    const Layout current{1 + static_cast<int>(rng() % 2), 1 + static_cast<int>(rng() % 2),
                         1 + static_cast<int>(rng() % 2)};
    for (bool keep : {false, true}) {
      auto chosen = policy.ChooseFitting(Hosts(workers), budget, current, keep);
      if (!chosen) {
        // None fits: then not even every worker in one layout of its own degrees does.
        for (int pp = 1; pp <= workers; ++pp) {
          for (int tp = 1; pp * tp <= workers; ++tp) {
            const Layout l{workers / (pp * tp), pp, tp};
            if (policy.Validate(l).ok()) {
              EXPECT_GT(policy.NeedBytes(l), budget) << l.ToString() << " fits but was not chosen";
            }
          }
        }
        continue;
      }
      EXPECT_LE(chosen->world(), workers);
      EXPECT_TRUE(policy.Validate(*chosen).ok()) << chosen->ToString();
      if (budget > 0) EXPECT_LE(policy.NeedBytes(*chosen), budget) << chosen->ToString();
    }
  }
}

TEST(LayoutMemoryTest, KeepReplicasKeepsWholeReplicasInPlace) {
  const Layout current{2, 1, 2};
  const std::vector<std::string> members = {"a0", "a1", "b0", "b1"};
  // b1 lost, no spare: replica a stays as it was; b0 is left out (standby).
  EXPECT_EQ(KeepReplicas(current, members, {"a0", "a1", "b0"}, {}, 1),
            (std::vector<std::string>{"a0", "a1"}));
  // a0 lost: replica b, whole, is kept, at dp rank 0.
  EXPECT_EQ(KeepReplicas(current, members, {"a1", "b0", "b1"}, {}, 1),
            (std::vector<std::string>{"b0", "b1"}));
  // With a spare the layout stays: the spare takes b1's place, everyone else stays put.
  EXPECT_EQ(KeepReplicas(current, members, {"a0", "a1", "b0"}, {"s"}, 2),
            (std::vector<std::string>{"a0", "a1", "b0", "s"}));
  // a0 lost with a spare: the spare takes its place and the replicas keep their order, so that
  // every dp group but the broken one stays as it was.
  EXPECT_EQ(KeepReplicas(current, members, {"a1", "b0", "b1"}, {"s"}, 2),
            (std::vector<std::string>{"s", "a1", "b0", "b1"}));
  // Two broken replicas make one: a1 and b0 hold positions 1 and 0.
  EXPECT_EQ(KeepReplicas(current, members, {"a1", "b0"}, {}, 1),
            (std::vector<std::string>{"b0", "a1"}));
  EXPECT_TRUE(KeepReplicas(current, members, {"a1"}, {}, 1).empty()) << "not enough workers";
}

TEST(LayoutMemoryTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(512), "512 B");
  EXPECT_EQ(HumanBytes(3 << 20), "3.0 MiB");
  EXPECT_EQ(HumanBytes(int64_t{5} << 30), "5.0 GiB");
}

}  // namespace
}  // namespace elastra::coordinator
