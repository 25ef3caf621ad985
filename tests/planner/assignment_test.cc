// The planner's rank assignment, fed the exact kept bytes from the region math, moves no more
// bytes than any other assignment that keeps TP groups inside hosts: which workers leave on a
// shrink is part of the choice (brute force over every choice of workers and ranks).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "planner/assignment_solver.h"
#include "planner/planner.h"
#include "elastra/sharding.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

ModelDescription Model(bool zero) {
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
  m.zero = zero ? 1 : 0;
  m.device_memory_gib = 16;
  return m;
}

StateSpec StateOf(const ModelDescription& m) {
  GptConfig g;
  g.layers = m.layers;
  g.hidden = m.hidden;
  g.ffn_hidden = m.ffn_hidden;
  g.vocab = m.vocab;
  g.seq_len = m.seq_len;
  g.param_size = m.dtype_size();
  g.zero = m.zero == 1;
  return GptState(g);
}

std::vector<int> HostsOfSize(int workers, int per_host) {
  std::vector<int> h(workers);
  for (int w = 0; w < workers; ++w) h[w] = w / per_host;
  return h;
}

std::vector<int> Identity(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool TpInsideHosts(const std::vector<int>& worker_of_rank, int tp, const std::vector<int>& hosts) {
  for (size_t r = 0; r < worker_of_rank.size(); ++r) {
    if (hosts[worker_of_rank[r]] != hosts[worker_of_rank[r - r % tp]]) return false;
  }
  return true;
}

// Whether some assignment of `to` keeps every TP group inside one host.
bool HostContainedExists(const Layout& to, const std::vector<int>& hosts) {
  std::map<int, int> size;
  for (int h : hosts) ++size[h];
  int slots = 0;
  for (const auto& [h, n] : size) slots += n / to.tp;
  return slots >= to.dp * to.pp;
}

// Exact kept bytes for the current placement: kept[w][r] is what worker w holds of rank r of `to`.
std::vector<std::vector<int64_t>> KeptMatrix(const StateSpec& state, const Placement& from,
                                             const Layout& to, int workers) {
  std::vector<std::vector<int64_t>> kept(workers, std::vector<int64_t>(to.world(), 0));
  for (size_t r = 0; r < from.worker_of_rank.size(); ++r) {
    const Coordinates c = CoordinatesOf(from.layout, static_cast<int>(r));
    for (int t = 0; t < to.world(); ++t) {
      kept[from.worker_of_rank[r]][t] = KeptBytes(state, from.layout, &c, to, CoordinatesOf(to, t));
    }
  }
  return kept;
}

// The most bytes any assignment keeps: every choice of which workers stay and which ranks they
// take, with TP groups inside hosts when that is possible at all.
int64_t BruteForceMostKept(const std::vector<std::vector<int64_t>>& kept, const Layout& to,
                           const std::vector<int>& hosts) {
  const int workers = static_cast<int>(hosts.size());
  const bool in_hosts = HostContainedExists(to, hosts);
  std::vector<int> worker_of_rank(to.world(), -1);
  std::vector<bool> used(workers, false);
  int64_t best = -1;
  std::function<void(int, int64_t)> visit = [&](int r, int64_t sum) {
    if (r == to.world()) {
      best = std::max(best, sum);
      return;
    }
    for (int w = 0; w < workers; ++w) {
      if (used[w]) continue;
      if (in_hosts && r % to.tp != 0 && hosts[w] != hosts[worker_of_rank[r - r % to.tp]]) continue;
      used[w] = true;
      worker_of_rank[r] = w;
      visit(r + 1, sum + kept[w][r]);
      used[w] = false;
    }
  };
  visit(0, 0);
  return best;
}

PlannerOptions ExactKept(const StateSpec& state, const Layout& from) {
  PlannerOptions options;
  options.kept_bytes = [&state, from](int fr, const Layout& tl, int tr) {
    const Coordinates c = CoordinatesOf(from, fr);
    return KeptBytes(state, from, &c, tl, CoordinatesOf(tl, tr));
  };
  return options;
}

// Assigns `to` from `from` (placed on current_workers) with the exact kept bytes and checks the
// plan against brute force. Returns the chosen assignment.
std::vector<int> CheckAgainstBruteForce(const ModelDescription& model, const Layout& from,
                                        const std::vector<int>& current_workers, const Layout& to,
                                        const std::vector<int>& hosts) {
  const StateSpec state = StateOf(model);
  const std::string what = from.ToString() + " -> " + to.ToString();
  bool exact = false;
  int64_t kept = 0;
  auto chosen = AssignRanks(model, to, hosts, CurrentPlacement{from, current_workers},
                            ExactKept(state, from), &exact, &kept);
  EXPECT_TRUE(chosen.ok()) << chosen.status();
  if (!chosen.ok()) return {};
  EXPECT_TRUE(exact) << what;
  if (HostContainedExists(to, hosts)) EXPECT_TRUE(TpInsideHosts(*chosen, to.tp, hosts)) << what;
  const auto matrix =
      KeptMatrix(state, {from, current_workers}, to, static_cast<int>(hosts.size()));
  EXPECT_EQ(kept, BruteForceMostKept(matrix, to, hosts)) << what;
  // The reshard plan moves exactly what the new ranks need and do not keep: the fewest bytes.
  auto plan = BuildReshardPlan(state, {from, current_workers}, {to, *chosen}, hosts);
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (plan.ok()) {
    EXPECT_EQ(plan->bytes_moved, plan->bytes_lower_bound) << what;
    auto nothing_kept =
        BuildReshardPlan(state, {from, current_workers}, {to, Identity(to.world())}, hosts);
    // Bytes needed = moved + kept, whatever the assignment.
    const auto fresh =
        KeptMatrix(state, {from, current_workers}, to, static_cast<int>(hosts.size()));
    int64_t identity_kept = 0;
    for (int r = 0; r < to.world(); ++r) identity_kept += fresh[r][r];
    EXPECT_TRUE(nothing_kept.ok());
    if (nothing_kept.ok()) {
      EXPECT_EQ(plan->bytes_moved + kept, nothing_kept->bytes_moved + identity_kept) << what;
    }
  }
  return *chosen;
}

// Bytes of the tensors split over TP (the state that moves when tp changes), one replica.
int64_t SplitBytes(const StateSpec& state) {
  int64_t bytes = 0;
  for (const auto& t : state.tensors) {
    if (t.rule.tp_split_dim < 0) continue;
    int64_t n = static_cast<int64_t>(t.element_size);
    for (int64_t d : t.shape) n *= d;
    bytes += n;
  }
  return bytes;
}

TEST(Assignment, TpFourToTwoKeepsHalfOfTheSplitState) {
  // Every split dimension divisible by 4, so quarters and halves are exact.
  ModelDescription model = Model(false);
  model.ffn_hidden = 32;
  model.vocab = 32;
  const StateSpec state = StateOf(model);
  const Layout from{1, 1, 4}, to{1, 1, 2};
  const std::vector<int> hosts = HostsOfSize(4, 8);
  const std::vector<int> chosen = CheckAgainstBruteForce(model, from, Identity(4), to, hosts);
  ASSERT_EQ(chosen.size(), 2u);
  // New tp rank 0 needs the first half (held by workers 0 and 1, a quarter each), rank 1 the
  // second (workers 2 and 3): one worker of each pair stays.
  EXPECT_TRUE(chosen[0] == 0 || chosen[0] == 1) << chosen[0];
  EXPECT_TRUE(chosen[1] == 2 || chosen[1] == 3) << chosen[1];
  auto plan = BuildReshardPlan(state, {from, Identity(4)}, {to, chosen}, hosts);
  ASSERT_TRUE(plan.ok());
  const int64_t split = SplitBytes(state);
  EXPECT_EQ(plan->bytes_moved * 2, split);  // half a replica's split state
  // Keeping the first two workers (the old prefix rule) moves three quarters.
  auto prefix = BuildReshardPlan(state, {from, Identity(4)}, {to, {0, 1}}, hosts);
  ASSERT_TRUE(prefix.ok());
  EXPECT_EQ(prefix->bytes_moved * 4, split * 3);
}

TEST(Assignment, ShrinksChooseWhoLeaves) {
  struct Change {
    Layout from, to;
    int per_host;
  };
  const std::vector<Change> changes = {
      {{1, 4, 1}, {1, 2, 1}, 8},  // pp shrink: keep one worker per new stage's layers
      {{4, 1, 1}, {2, 1, 1}, 8},  // dp shrink: with ZeRO, new dp d needs old dp 2d or 2d+1
      {{4, 1, 2}, {2, 1, 2}, 4},  // dp shrink with TP groups, hosts of 4
      {{2, 1, 4}, {2, 1, 2}, 4},  // tp shrink in every replica
      {{1, 2, 4}, {1, 4, 1}, 4},  // tp -> pp
      {{2, 2, 2}, {1, 2, 2}, 4},  // mixed: a replica leaves
      {{2, 1, 4}, {1, 2, 2}, 4},  // mixed: tp and dp down, pp up
      {{1, 1, 8}, {1, 2, 2}, 8},  // tp 8 -> pp 2 x tp 2
  };
  for (bool zero : {false, true}) {
    const ModelDescription model = Model(zero);
    for (const Change& c : changes) {
      const int n = std::max(c.from.world(), c.to.world());
      CheckAgainstBruteForce(model, c.from, Identity(c.from.world()), c.to,
                             HostsOfSize(n, c.per_host));
    }
  }
}

TEST(Assignment, RandomChangesMatchBruteForce) {
  std::mt19937 rng(2024);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(rng() % (hi - lo + 1)); };
  auto random_layout = [&](int max_world) {
    for (;;) {
      Layout l{pick(1, 4), pick(1, 4), std::vector<int>{1, 2, 4}[pick(0, 2)]};
      if (l.world() <= max_world) return l;
    }
  };
  int trials = 0, shrinks = 0;
  while (trials < 120) {
    const int workers = pick(2, 8);
    std::vector<int> hosts;
    for (int h = 0; static_cast<int>(hosts.size()) < workers; ++h) {
      const int size = pick(1, 4);
      for (int i = 0; i < size && static_cast<int>(hosts.size()) < workers; ++i) hosts.push_back(h);
    }
    const Layout from = random_layout(workers), to = random_layout(workers);
    std::vector<int> current(workers);
    std::iota(current.begin(), current.end(), 0);
    std::shuffle(current.begin(), current.end(), rng);
    current.resize(from.world());
    CheckAgainstBruteForce(Model(trials % 2 == 1), from, current, to, hosts);
    shrinks += to.world() < from.world();
    ++trials;
  }
  EXPECT_GT(shrinks, 20);
}

TEST(Assignment, ExactAssignmentMovesTheFewestBytes) {
  const ModelDescription model = Model(true);
  const std::vector<std::pair<Layout, Layout>> changes = {
      {{2, 1, 2}, {1, 2, 2}}, {{1, 2, 2}, {4, 1, 1}}, {{4, 1, 1}, {1, 2, 2}},
      {{2, 2, 1}, {1, 4, 1}}, {{1, 4, 1}, {2, 1, 2}}, {{4, 1, 1}, {2, 1, 1}},
      {{2, 1, 2}, {3, 1, 2}}, {{6, 1, 1}, {1, 2, 2}}, {{1, 1, 2}, {2, 1, 2}}};
  for (const auto& [from, to] : changes) {
    const int n = std::max(from.world(), to.world());
    CheckAgainstBruteForce(model, from, Identity(from.world()), to, HostsOfSize(n, 2));
  }
}

TEST(Assignment, HeuristicAboveTheExactSizeKeepsProportionalRanks) {
  // Forced onto the large-size heuristic: a dp shrink with ZeRO keeps, for new dp d, the workers
  // of old dp 2d or 2d+1 (each holds half of its optimizer state), as the exact assignment does.
  const ModelDescription model = Model(true);
  const StateSpec state = StateOf(model);
  const Layout from{8, 1, 2}, to{4, 1, 2};
  const std::vector<int> hosts = HostsOfSize(16, 4);
  PlannerOptions options = ExactKept(state, from);
  bool exact = true;
  int64_t heuristic_kept = 0, exact_kept = 0;
  options.exact_assignment_max_blocks = 0;
  auto heuristic =
      AssignRanks(model, to, hosts, {from, Identity(16)}, options, &exact, &heuristic_kept);
  ASSERT_TRUE(heuristic.ok());
  EXPECT_FALSE(exact);
  EXPECT_TRUE(TpInsideHosts(*heuristic, to.tp, hosts));
  options.exact_assignment_max_blocks = 128;
  auto best = AssignRanks(model, to, hosts, {from, Identity(16)}, options, &exact, &exact_kept);
  ASSERT_TRUE(best.ok());
  EXPECT_TRUE(exact);
  EXPECT_EQ(heuristic_kept, exact_kept);
  for (int d = 0; d < 4; ++d) {
    for (int t = 0; t < 2; ++t) EXPECT_EQ((*heuristic)[d * 2 + t] / 2 / 2, d) << d << " " << t;
  }
}

TEST(Assignment, AMemoisedKeptBytesGivesTheSameAssignment) {
  // kept_bytes_memoized only stops the assigner's own table: the exact and the heuristic
  // assignments are the same with it (ranks, bytes kept), for changes with and without ZeRO.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 24; ++trial) {
    const ModelDescription model = Model(trial % 2 == 1);
    const StateSpec state = StateOf(model);
    const Layout from{2 + trial % 3, 1 + trial % 2, trial % 4 < 2 ? 1 : 2};
    const Layout to{1 + (trial / 3) % 4, 1 + (trial / 2) % 2, trial % 3 == 0 ? 2 : 1};
    const int workers = std::max(from.world(), to.world()) + 2;
    std::vector<int> current = Identity(workers);
    std::shuffle(current.begin(), current.end(), rng);
    current.resize(from.world());
    for (int max_blocks : {0, 128}) {
      PlannerOptions plain = ExactKept(state, from);
      plain.exact_assignment_max_blocks = max_blocks;
      PlannerOptions memoised = plain;
      memoised.kept_bytes_memoized = true;
      bool exact_a = false, exact_b = false;
      int64_t kept_a = -1, kept_b = -2;
      const std::vector<int> hosts = HostsOfSize(workers, 2 + trial % 3);
      auto a = AssignRanks(model, to, hosts, {from, current}, plain, &exact_a, &kept_a);
      auto b = AssignRanks(model, to, hosts, {from, current}, memoised, &exact_b, &kept_b);
      ASSERT_TRUE(a.ok() && b.ok()) << trial;
      EXPECT_EQ(*a, *b) << trial << " " << max_blocks;
      EXPECT_EQ(kept_a, kept_b) << trial;
      EXPECT_EQ(exact_a, exact_b) << trial;
    }
  }
}

TEST(Assignment, TheFlatSolverMatchesTheSolverOverRows) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int rows = 1 + static_cast<int>(rng() % 6);
    const int cols = rows + static_cast<int>(rng() % 4);
    std::vector<std::vector<int64_t>> cost(rows, std::vector<int64_t>(cols));
    std::vector<int64_t> flat;
    for (auto& row : cost) {
      for (auto& x : row) {
        x = static_cast<int64_t>(rng() % 5) - 2;  // many ties
        flat.push_back(x);
      }
    }
    EXPECT_EQ(SolveAssignment(cost), planner_internal::SolveAssignmentFlat(flat.data(), rows, cols))
        << trial;
  }
}

}  // namespace
}  // namespace elastra
