// The layout policy on its own: which layouts fit the registered state, the default and planned
// layouts, and the rank assignment that keeps state in place. Pure: no core, no clock.
#include "coordinator/layout_policy.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace elastra::coordinator {
namespace {

// Two layers and a [6, 4] tensor split over TP along dim 0 (as CoreTest's resize test).
proto::JoinRequest JoinWithState() {
  proto::JoinRequest join{"a", "n1", 0, 1};
  join.state.num_layers = 2;
  join.state.tensors.push_back(TensorSpec{"w", {6, 4}, 4, ShardingRule{0, 1, false}});
  return join;
}

// A ~7B model that does not fit one 80 GiB device (tests/planner/planner_test.cc).
constexpr char kLargeModel[] = R"({"model": {"layers": 32, "hidden": 4096, "heads": 32,
  "vocab": 50304, "seq_len": 2048, "global_batch": 512, "micro_batch": 1,
  "device_memory_gib": 80}})";

TEST(LayoutPolicyTest, ValidateChecksTheRegisteredState) {
  LayoutPolicy policy;
  EXPECT_TRUE(policy.Validate(Layout{1, 3, 1}).ok()) << "no state registered yet: anything goes";
  policy.Learn(JoinWithState());
  EXPECT_TRUE(policy.Validate(Layout{2, 2, 1}).ok());
  EXPECT_TRUE(policy.Validate(Layout{1, 1, 2}).ok());
  Status stages = policy.Validate(Layout{1, 3, 1});  // three stages for two layers
  EXPECT_EQ(stages.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stages.message().find("does not fit the job's state"), std::string::npos) << stages;
  EXPECT_TRUE(policy.Validate(Layout{1, 1, 4}).ok()) << "six rows over four TP ranks: uneven";
  EXPECT_FALSE(policy.Validate(Layout{1, 1, 8}).ok());  // six rows over eight TP ranks
  // The first state registered stays: a later join does not replace it.
  proto::JoinRequest other{"b", "n1", 0, 2};
  other.state.num_layers = 3;
  other.state.tensors.push_back(TensorSpec{"v", {3, 3}, 4, ShardingRule{0, 1, false}});
  policy.Learn(other);
  EXPECT_FALSE(policy.Validate(Layout{1, 3, 1}).ok());
}

// A join's state with dimensions each under the 2^40 cap whose product overflows int64_t (the
// coordinator_core fuzz target found it: 68719476800 x 8589934592 under UBSan) is refused.
TEST(LayoutPolicyTest, CheckStateRefusesShapesWhoseProductOverflows) {
  StateSpec state;
  state.num_layers = 2;
  state.tensors.push_back(
      TensorSpec{"w", {int64_t{68719476800}, int64_t{8589934592}}, 4, ShardingRule{0, 1, false}});
  Status s = CheckState(state);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("more than 2^48 elements"), std::string::npos) << s;
  state.tensors[0].shape = {int64_t{1} << 24, int64_t{1} << 24};  // exactly 2^48: allowed
  EXPECT_TRUE(CheckState(state).ok()) << CheckState(state);
  state.tensors[0].shape = {(int64_t{1} << 24) + 1, int64_t{1} << 24};
  EXPECT_FALSE(CheckState(state).ok());
}

TEST(LayoutPolicyTest, DefaultKeepsPipelineAndTensorDegreesWhenTheyFit) {
  LayoutPolicy policy;
  EXPECT_EQ(policy.Default(4, Layout{1, 2, 1}), (Layout{2, 2, 1}));
  EXPECT_EQ(policy.Default(3, Layout{1, 2, 1}), (Layout{3, 1, 1})) << "pp=2 does not divide 3";
  EXPECT_EQ(policy.Default(4, Layout{2, 1, 1}), (Layout{4, 1, 1}));
  policy.Learn(JoinWithState());
  // Keeping tp=8 would split six rows eight ways: pure data parallelism instead.
  EXPECT_EQ(policy.Default(16, Layout{1, 1, 8}), (Layout{16, 1, 1}));
  EXPECT_EQ(policy.Default(8, Layout{1, 1, 2}), (Layout{4, 1, 2}));
}

TEST(LayoutPolicyTest, ChooseAsksThePlannerOnlyWithAModel) {
  const std::vector<std::string> hosts(8, "n1");
  LayoutPolicy plain;
  EXPECT_EQ(plain.Choose(hosts, Layout{1, 2, 1}), (Layout{4, 2, 1})) << "no model: Default()";

  LayoutPolicy planned;
  proto::JoinRequest join{"a", "n1", 0, 1};
  join.model_json = kLargeModel;
  planned.Learn(join);
  ASSERT_TRUE(planned.has_model());
  const Layout chosen = planned.Choose(hosts, Layout{});
  EXPECT_EQ(chosen.world(), 8) << chosen.ToString() << ": every worker gets a rank";
  EXPECT_GT(chosen.pp * chosen.tp, 1) << chosen.ToString() << ": 7B does not fit one device";

  LayoutPolicy pinned;
  join.model_json = std::string(kLargeModel).insert(1, R"("pins": {"only_dp": true}, )");
  pinned.Learn(join);
  ASSERT_TRUE(pinned.has_model());
  EXPECT_EQ(pinned.Choose(hosts, Layout{1, 1, 1}), (Layout{8, 1, 1}));

  LayoutPolicy broken;
  join.model_json = R"({"model": {"layers": 0}})";
  broken.Learn(join);
  EXPECT_FALSE(broken.has_model()) << "an unreadable model description is ignored";
}

// The model description comes from a worker's join: what does not parse, whatever its shape, is
// ignored with a warning; it never throws and never recurses as deep as the text nests (both
// found with the model_description fuzz target's inputs: tests/fuzz/corpus/model_description).
TEST(LayoutPolicyTest, HostileModelDescriptionsAreIgnored) {
  const std::vector<std::string> hosts(4, "n1");
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  for (const std::string& text : {
           std::string(kLargeModel).insert(1, R"("pins": {"tp": "2"}, )"),
           std::string(kLargeModel).insert(1, R"("pins": {"pp": -1}, )"),
           std::string(kLargeModel).insert(1, R"("pins": {"only_dp": 1}, )"),
           std::string(kLargeModel).insert(1, R"("pins": {"dp": 2}, )"),
           std::string(kLargeModel).insert(1, R"("pins": [1], )"),
           R"({"model": )" + deep + "}",
           R"({"model": {"layers": )" + deep + "}}",
           R"({"model": {"optimizer": )" + deep + "}}",
       }) {
    LayoutPolicy policy;
    proto::JoinRequest join{"a", "n1", 0, 1};
    join.model_json = text;
    ASSERT_NO_THROW(policy.Learn(join)) << text.substr(0, 80);
    EXPECT_FALSE(policy.has_model()) << text.substr(0, 80);
    EXPECT_EQ(policy.Choose(hosts, Layout{}), (Layout{4, 1, 1})) << "the default layout";
  }
}

TEST(LayoutPolicyTest, AssignKeepsEachShardWithTheWorkerThatHoldsIt) {
  LayoutPolicy policy;
  const std::vector<std::string> hosts(3, "n1");
  // Before any state is registered, the candidates' order is the assignment.
  EXPECT_EQ(policy.Assign(Layout{2, 1, 1}, {"b", "a", "c"}, hosts, Layout{2, 1, 1}, {"a", "b"}),
            (std::vector<std::string>{"b", "a"}));
  // A [6, 4] tensor with ZeRO-1: a (DP rank 0) holds its first half, b (DP rank 1) the second.
  proto::JoinRequest join{"a", "n1", 0, 1};
  join.state.tensors.push_back(TensorSpec{"m", {6, 4}, 4, ShardingRule{-1, -1, true}});
  policy.Learn(join);
  // They keep their ranks whatever the candidates' order; c, holding nothing, leaves.
  EXPECT_EQ(policy.Assign(Layout{2, 1, 1}, {"b", "c", "a"}, hosts, Layout{2, 1, 1}, {"a", "b"}),
            (std::vector<std::string>{"a", "b"}));
  // A current member that is not a candidate: the candidates' order.
  EXPECT_EQ(policy.Assign(Layout{2, 1, 1}, {"c", "b"}, {"n1", "n1"}, Layout{2, 1, 1}, {"a", "b"}),
            (std::vector<std::string>{"c", "b"}));
}

TEST(LayoutPolicyTest, WithNothingToKeepTensorParallelGroupsStayInsideHosts) {
  LayoutPolicy policy;
  // Workers joined alternating between two hosts; tp=2 groups are consecutive ranks.
  const std::vector<std::string> ids = {"a0", "b0", "a1", "b1"};
  const std::vector<std::string> hosts = {"a", "b", "a", "b"};
  auto order = policy.Assign(Layout{2, 1, 2}, ids, hosts, Layout{}, {});
  ASSERT_EQ(order.size(), 4u);
  auto host_of = [&](const std::string& id) { return id.substr(0, 1); };
  EXPECT_EQ(host_of(order[0]), host_of(order[1])) << "TP group 0 on one host";
  EXPECT_EQ(host_of(order[2]), host_of(order[3])) << "TP group 1 on one host";
  // Pure data parallelism keeps the candidates' order (the highest ranks leave a shrink).
  EXPECT_EQ(policy.Assign(Layout{4, 1, 1}, ids, hosts, Layout{}, {}), ids);
  // The same with the state registered and a current member missing (a failure, a drain).
  proto::JoinRequest join{"a0", "a", 0, 1};
  join.state.num_layers = 2;
  join.state.tensors.push_back(TensorSpec{"w", {8, 4}, 4, ShardingRule{0, 1, false}});
  policy.Learn(join);
  order = policy.Assign(Layout{2, 1, 2}, ids, hosts, Layout{5, 1, 1}, {"a0", "b0", "a1", "b1", "x"});
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(host_of(order[0]), host_of(order[1]));
  EXPECT_EQ(host_of(order[2]), host_of(order[3]));
}

// The bytes a worker at rank `fr` of `from` already holds of rank `tr`'s shards in `to`.
int64_t Kept(const StateSpec& state, const Layout& from, int fr, const Layout& to, int tr) {
  int64_t kept = 0;
  for (const TensorSpec& t : state.tensors) {
    const Region a = LocalRegion(t, state.num_layers, from, CoordinatesOf(from, fr));
    const Region b = LocalRegion(t, state.num_layers, to, CoordinatesOf(to, tr));
    if (a.empty() || b.empty()) continue;
    for (const Rect& p : a.Pieces()) {
      for (const Rect& q : b.Pieces()) {
        kept += Intersect(p, q).volume() * static_cast<int64_t>(t.element_size);
      }
    }
  }
  return kept;
}

// tp 4 -> 2 on one host (issue 14): keeping workers 0 and 1 moves 0.75 of a replica, keeping one
// worker of each half (as `elastra plan --from dp=1,pp=1,tp=4 --to dp=1,pp=1,tp=2` does, leaving
// 1 and 3) moves 0.5, the least any choice of leavers moves. The live coordinator chooses as well.
TEST(LayoutPolicyTest, AShrinkLeavesTheWorkersWhoseStateIsLeastUseful) {
  LayoutPolicy policy;
  proto::JoinRequest join{"w0", "n1", 0, 1};
  join.state = GptState({2, 16, 64, 100, 16, 4, true, false});
  policy.Learn(join);
  const std::vector<std::string> ids{"w0", "w1", "w2", "w3"};
  const Layout from{1, 1, 4}, to{1, 1, 2};
  const std::vector<std::string> order =
      policy.Assign(to, ids, std::vector<std::string>(4, "n1"), from, ids);
  ASSERT_EQ(order.size(), 2u);
  auto index = [&](const std::string& id) {
    return static_cast<int>(std::find(ids.begin(), ids.end(), id) - ids.begin());
  };
  const int64_t kept = Kept(join.state, from, index(order[0]), to, 0) +
                       Kept(join.state, from, index(order[1]), to, 1);
  int64_t best = 0;
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      if (a != b)
        best = std::max(best, Kept(join.state, from, a, to, 0) + Kept(join.state, from, b, to, 1));
    }
  }
  EXPECT_EQ(kept, best) << order[0] << " " << order[1];
  // What the new ranks hold: a replica. What moves: half of the TP-split part of it.
  int64_t replica = 0, split = 0;
  for (const TensorSpec& t : join.state.tensors) {
    const int64_t bytes = FullRect(t.shape).volume() * static_cast<int64_t>(t.element_size);
    replica += bytes;
    if (t.rule.tp_split_dim >= 0) split += bytes;
  }
  const int64_t needed = replica + (replica - split);  // the replicated part on both ranks
  EXPECT_EQ(needed - kept, split / 2);
  const bool halves = (index(order[0]) < 2) != (index(order[1]) < 2);
  EXPECT_TRUE(halves) << order[0] << " " << order[1] << ": one worker of each half stays";
}

TEST(LayoutPolicyTest, HostIndicesNumberHostsByFirstAppearance) {
  EXPECT_EQ(HostIndices({"b", "a", "b", "c"}), (std::vector<int>{0, 1, 0, 2}));
  EXPECT_EQ(HostIndices({"b", "b", "a", "a", "b", "c", "c"}),
            (std::vector<int>{0, 0, 1, 1, 0, 2, 2}));
  EXPECT_TRUE(HostIndices({}).empty());
}

}  // namespace
}  // namespace elastra::coordinator
