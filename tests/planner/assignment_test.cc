// The planner's rank assignment, fed the exact kept bytes from the region math, moves no more
// bytes than any other assignment that keeps TP groups inside hosts (brute force over small
// cases).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "coordinator/planner.h"
#include "elastra/sharding.h"
#include "state/reshard_plan.h"

namespace elastra {
namespace {

ModelDescription Model() {
  ModelDescription m;
  m.layers = 4;
  m.hidden = 16;
  m.heads = 4;
  m.ffn_hidden = 24;
  m.vocab = 30;
  m.seq_len = 8;
  m.global_batch = 48;
  m.micro_batch = 1;
  m.dtype = "fp32";
  m.zero = 1;
  m.device_memory_gib = 16;
  return m;
}

bool TpInsideHosts(const std::vector<int>& worker_of_rank, int tp, const std::vector<int>& hosts) {
  for (size_t r = 0; r < worker_of_rank.size(); ++r) {
    if (hosts[worker_of_rank[r]] != hosts[worker_of_rank[r - r % tp]]) return false;
  }
  return true;
}

TEST(Assignment, ExactAssignmentMovesTheFewestBytes) {
  const ModelDescription model = Model();
  GptConfig g;
  g.layers = model.layers;
  g.hidden = model.hidden;
  g.ffn_hidden = model.ffn_hidden;
  g.vocab = model.vocab;
  g.seq_len = model.seq_len;
  g.param_size = 4;
  g.zero = true;
  const StateSpec state = GptState(g);
  const std::vector<std::pair<Layout, Layout>> changes = {
      {{2, 1, 2}, {1, 2, 2}}, {{1, 2, 2}, {4, 1, 1}}, {{4, 1, 1}, {1, 2, 2}},
      {{2, 2, 1}, {1, 4, 1}}, {{1, 4, 1}, {2, 1, 2}}, {{4, 1, 1}, {2, 1, 1}},
      {{2, 1, 2}, {3, 1, 2}}, {{6, 1, 1}, {1, 2, 2}}, {{1, 1, 2}, {2, 1, 2}}};
  for (const auto& [from, to] : changes) {
    const int n = std::max(from.world(), to.world());
    std::vector<int> hosts(n);
    for (int w = 0; w < n; ++w) hosts[w] = w / 2;
    std::vector<int> identity(from.world());
    std::iota(identity.begin(), identity.end(), 0);
    PlannerOptions options;
    options.kept_bytes = [&, from = from](int fr, const Layout& tl, int tr) {
      const Coordinates c = CoordinatesOf(from, fr);
      return KeptBytes(state, from, &c, tl, CoordinatesOf(tl, tr));
    };
    bool exact = false;
    auto chosen = AssignRanks(model, to, hosts, CurrentPlacement{from, identity}, options, &exact);
    ASSERT_TRUE(chosen.ok()) << chosen.status();
    EXPECT_TRUE(exact);
    EXPECT_TRUE(TpInsideHosts(*chosen, to.tp, hosts));
    auto plan = BuildReshardPlan(state, {from, identity}, {to, *chosen}, hosts);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->bytes_moved, plan->bytes_lower_bound);

    // Every assignment of n workers to the ranks of `to` with TP groups inside hosts.
    std::vector<int> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    int64_t best = INT64_MAX;
    int tried = 0;
    do {
      std::vector<int> w(perm.begin(), perm.begin() + to.world());
      if (!TpInsideHosts(w, to.tp, hosts)) continue;
      auto p = BuildReshardPlan(state, {from, identity}, {to, w}, hosts);
      ASSERT_TRUE(p.ok());
      best = std::min(best, p->bytes_moved);
      ++tried;
    } while (std::next_permutation(perm.begin(), perm.end()));
    EXPECT_GT(tried, 0);
    EXPECT_EQ(plan->bytes_moved, best) << from.ToString() << " -> " << to.ToString();
  }
}

}  // namespace
}  // namespace elastra
