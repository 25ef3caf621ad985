// Tests of the region math (sharding.h), the reshard planner and the executor.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"
#include "elastra/sharding.h"
#include "tests/collectives/gloo_thread_ranks.h"
#include "tests/reshard/global_shards.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

using testing::ShardsOf;

TEST(Region, PiecesCoverTheFlatRangeInLocalOrder) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int64_t rows = 1 + rng() % 6, cols = 1 + rng() % 7;
    Region region;
    region.box = Rect{2, 2 + rows, 3, 3 + cols};
    const int64_t n = rows * cols;
    region.flat_begin = rng() % (n + 1);
    region.flat_end = region.flat_begin + rng() % (n - region.flat_begin + 1);
    std::vector<int> seen(region.elements(), 0);
    int64_t volume = 0;
    for (const Rect& p : region.Pieces()) {
      volume += p.volume();
      for (int64_t r = p.row_begin; r < p.row_end; ++r) {
        for (int64_t c = p.col_begin; c < p.col_end; ++c) {
          const int64_t off = region.LocalOffset(r, c);
          ASSERT_GE(off, 0);
          ASSERT_LT(off, region.elements());
          ++seen[off];
        }
      }
    }
    EXPECT_EQ(volume, region.elements());
    for (int s : seen) EXPECT_EQ(s, 1);
    EXPECT_LE(region.Pieces().size(), 3u);
  }
}

TEST(Region, SubtractLeavesExactlyTheDifference) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    auto rect = [&] {
      int64_t r0 = rng() % 6, c0 = rng() % 6;
      return Rect{r0, r0 + static_cast<int64_t>(rng() % 5), c0, c0 + static_cast<int64_t>(rng() % 5)};
    };
    const Rect a = rect(), b = rect();
    const auto parts = Subtract(a, b);
    int64_t v = 0;
    for (const Rect& p : parts) {
      v += p.volume();
      EXPECT_TRUE(Intersect(p, b).empty());
      EXPECT_EQ(Intersect(p, a), p);
    }
    EXPECT_EQ(v, a.volume() - Intersect(a, b).volume());
  }
}

TEST(Sharding, StagesSplitLayersBalancedAndContiguous) {
  for (int layers = 1; layers <= 13; ++layers) {
    for (int pp = 1; pp <= layers; ++pp) {
      int next = 0;
      for (int s = 0; s < pp; ++s) {
        const LayerRange r = StageLayers(layers, pp, s);
        EXPECT_EQ(r.first, next);
        const int n = r.last - r.first;
        EXPECT_TRUE(n == layers / pp || n == layers / pp + 1);
        for (int l = r.first; l < r.last; ++l) EXPECT_EQ(StageOfLayer(layers, pp, l), s);
        next = r.last;
      }
      EXPECT_EQ(next, layers);
    }
  }
}

// Every element is held by exactly the ranks the rule says: tp split -> one TP rank, zero ->
// one DP rank, layer -> one stage; otherwise replicated.
TEST(Sharding, RanksCoverEveryElementWithTheRuleReplication) {
  const GptConfig config{/*layers=*/3, /*hidden=*/8, /*ffn_hidden=*/12, /*vocab=*/11,
                         /*seq_len=*/5, /*param_size=*/2, /*adam=*/true, /*zero=*/true};
  const StateSpec state = GptState(config);
  for (Layout l : {Layout{2, 3, 2}, Layout{3, 1, 4}, Layout{1, 2, 3}}) {
    for (const auto& t : state.tensors) {
      ASSERT_TRUE(ValidateTensor(t, state.num_layers, l).ok()) << t.name;
      const Rect full = FullRect(t.shape);
      std::vector<int> count(full.volume(), 0);
      for (int r = 0; r < l.world(); ++r) {
        const Region region = LocalRegion(t, state.num_layers, l, CoordinatesOf(l, r));
        for (const Rect& p : region.Pieces()) {
          for (int64_t i = p.row_begin; i < p.row_end; ++i) {
            for (int64_t j = p.col_begin; j < p.col_end; ++j) ++count[i * full.col_end + j];
          }
        }
      }
      const int stages = t.rule.layer >= 0 ? 1 : l.pp;
      const int tps = t.rule.tp_split_dim >= 0 ? 1 : l.tp;
      const int dps = t.rule.zero ? 1 : l.dp;
      for (int c : count) ASSERT_EQ(c, stages * tps * dps) << t.name << " " << l.ToString();
    }
  }
}

TEST(Sharding, ValidateRefusesBadSpecs) {
  const Layout l{1, 2, 4};
  EXPECT_FALSE(ValidateTensor({"a", {}, 4, {}}, 2, l).ok());
  EXPECT_FALSE(ValidateTensor({"a", {2, 2, 2}, 4, {}}, 2, l).ok());
  EXPECT_FALSE(ValidateTensor({"a", {3, 0}, 4, {}}, 2, l).ok());
  EXPECT_FALSE(ValidateTensor({"a", {3, 8}, 4, {2, -1, false}}, 2, l).ok());
  EXPECT_FALSE(ValidateTensor({"a", {3, 8}, 4, {0, -1, false}}, 2, l).ok());  // 3 rows < tp=4
  EXPECT_FALSE(ValidateTensor({"a", {8, 8}, 4, {0, 5, false}}, 2, l).ok());   // no layer 5
  EXPECT_FALSE(ValidateTensor({"a", {8, 8}, 4, {}}, 1, l).ok());              // pp > layers
  EXPECT_TRUE(ValidateTensor({"a", {8, 8}, 4, {1, 1, true}}, 2, l).ok());
}

// Placement of `layout` on workers: a random subset of 0..num_workers-1 in random order.
Placement RandomPlacement(const Layout& layout, int num_workers, std::mt19937* rng) {
  std::vector<int> workers(num_workers);
  std::iota(workers.begin(), workers.end(), 0);
  std::shuffle(workers.begin(), workers.end(), *rng);
  workers.resize(layout.world());
  return Placement{layout, workers};
}

TEST(ReshardPlan, GrowingTpMovesOnlyTheNewRanksHalf) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"w", {4, 6}, 4, {1, -1, false}});
  state.tensors.push_back({"b", {6}, 4, {}});
  auto plan = BuildReshardPlan(state, Placement{{1, 1, 1}, {0}}, Placement{{1, 1, 2}, {0, 1}},
                               {0, 0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Worker 1 needs w[:, 3:6] (48 bytes) and all of b (24 bytes); worker 0 keeps its part.
  EXPECT_EQ(plan->bytes_lower_bound, 48 + 24);
  EXPECT_EQ(plan->bytes_moved, 48 + 24);
  EXPECT_EQ(plan->bytes_local, 48 + 24);
  EXPECT_EQ(plan->max_sent, 72);
  EXPECT_EQ(plan->max_received, 72);
  for (const Transfer& t : plan->transfers) {
    EXPECT_EQ(t.src, 0);
    EXPECT_EQ(t.dst, 1);
  }
}

TEST(ReshardPlan, PrefersASenderOnTheSameHost) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"w", {64, 64}, 4, {}});
  // dp=2 on workers 0 (host 0) and 1 (host 1) -> dp=3 adding worker 2 on host 1.
  auto plan = BuildReshardPlan(state, Placement{{2, 1, 1}, {0, 1}},
                               Placement{{3, 1, 1}, {0, 1, 2}}, {0, 1, 1});
  ASSERT_TRUE(plan.ok());
  ASSERT_FALSE(plan->transfers.empty());
  for (const Transfer& t : plan->transfers) EXPECT_EQ(t.src, 1);
  EXPECT_EQ(plan->bytes_same_host, plan->bytes_moved);
}

TEST(ReshardPlan, SpreadsOverReplicasAcrossHosts) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"w", {1024, 256}, 4, {}});  // 1 MiB, replicated
  // dp=4 on hosts 0..3 -> dp=8: four new workers on host 4 each need the whole tensor.
  std::vector<int> hosts{0, 1, 2, 3, 4, 4, 4, 4};
  auto plan = BuildReshardPlan(state, Placement{{4, 1, 1}, {0, 1, 2, 3}},
                               Placement{{8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7}}, hosts);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->bytes_moved, 4 << 20);
  EXPECT_EQ(plan->bytes_lower_bound, 4 << 20);
  EXPECT_EQ(plan->max_sent, 1 << 20);  // each replica carries exactly its quarter
  EXPECT_EQ(plan->max_received, 1 << 20);
}

TEST(ReshardPlan, RefusesMalformedPlacements) {
  StateSpec state;
  state.num_layers = 2;
  state.tensors.push_back({"w", {8, 8}, 4, {0, 1, false}});
  EXPECT_FALSE(BuildReshardPlan(state, {{2, 1, 1}, {0}}, {{1, 1, 1}, {0}}, {0, 0}).ok());
  EXPECT_FALSE(BuildReshardPlan(state, {{2, 1, 1}, {0, 0}}, {{1, 1, 1}, {0}}, {0, 0}).ok());
  EXPECT_FALSE(BuildReshardPlan(state, {{2, 1, 1}, {0, 5}}, {{1, 1, 1}, {0}}, {0, 0}).ok());
  EXPECT_FALSE(BuildReshardPlan(state, {{1, 3, 1}, {0, 1, 2}}, {{1, 1, 1}, {0}}, {0, 0, 0}).ok());
  EXPECT_FALSE(BuildReshardPlan(state, {{1, 1, 16}, std::vector<int>(16)}, {{1, 1, 1}, {0}},
                                std::vector<int>(16, 0))
                   .ok());
}

TEST(ReshardPlan, KeptBytesMatchesThePlanForTheSameWorker) {
  const StateSpec state = GptState({4, 16, 48, 40, 8, 2, true, true});
  const Layout a{2, 2, 2}, b{1, 2, 4};
  const Placement pa{a, {0, 1, 2, 3, 4, 5, 6, 7}}, pb{b, {0, 1, 2, 3, 4, 5, 6, 7}};
  auto plan = BuildReshardPlan(state, pa, pb, std::vector<int>(8, 0));
  ASSERT_TRUE(plan.ok());
  int64_t kept = 0;
  for (int w = 0; w < 8; ++w) {
    const Coordinates ca = CoordinatesOf(a, w);
    kept += KeptBytes(state, a, &ca, b, CoordinatesOf(b, w));
  }
  EXPECT_EQ(kept, plan->bytes_local);
  EXPECT_EQ(KeptBytes(state, a, nullptr, b, CoordinatesOf(b, 0)), 0);
}

// n thread-ranks connected under `prefix` (retried when socket discovery misses a socket).
std::vector<std::unique_ptr<Communicator>> ConnectAll(KeyValueStore* store,
                                                      const std::string& prefix, int n) {
  auto comms = testing::ConnectThreadRanks(store, prefix, n, std::chrono::milliseconds(20000),
                                           std::chrono::milliseconds(20000));
  if (comms.empty()) ADD_FAILURE() << "could not connect " << n << " ranks under " << prefix;
  return comms;
}

// Runs the plan on every worker as a thread over Gloo and returns each worker's final shards.
std::vector<ShardMap> Execute(const ReshardPlan& plan, const std::string& prefix,
                              const ReshardExecutorOptions& options,
                              std::vector<ReshardExecutorStats>* stats) {
  const int n = static_cast<int>(plan.host_of_worker.size());
  InMemoryKeyValueStore store;
  std::vector<ShardMap> shards(n);
  stats->assign(n, {});
  for (int w = 0; w < n; ++w) shards[w] = ShardsOf(plan.state, plan.from, w);
  auto comms = ConnectAll(&store, prefix, n);
  if (comms.empty()) return shards;
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      const Status s = ExecuteReshard(plan, *comms[w], &shards[w], options, &(*stats)[w]);
      EXPECT_TRUE(s.ok()) << "worker " << w << ": " << s;
    });
  }
  for (auto& t : threads) t.join();
  return shards;
}

// A random state: 1-2 dim tensors of random sizes, element sizes and rules.
StateSpec RandomState(std::mt19937* rng) {
  StateSpec state;
  state.num_layers = 4 + (*rng)() % 5;  // >= pp for pp <= 8... checked per layout below
  const int count = 3 + (*rng)() % 6;
  for (int i = 0; i < count; ++i) {
    TensorSpec t;
    t.name = "t" + std::to_string(i);
    const bool two = (*rng)() % 4 != 0;
    if (two) {
      t.shape = {8 + static_cast<int64_t>((*rng)() % 40), 8 + static_cast<int64_t>((*rng)() % 40)};
    } else {
      t.shape = {8 + static_cast<int64_t>((*rng)() % 300)};
    }
    const size_t sizes[] = {1, 2, 4, 8};
    t.element_size = sizes[(*rng)() % 4];
    const int split = static_cast<int>((*rng)() % (t.shape.size() + 1)) - 1;
    t.rule.tp_split_dim = split;
    t.rule.layer = (*rng)() % 3 == 0 ? -1 : static_cast<int>((*rng)() % state.num_layers);
    t.rule.zero = (*rng)() % 2 == 0;
    state.tensors.push_back(t);
  }
  return state;
}

Layout RandomLayout(std::mt19937* rng, int num_layers) {
  while (true) {
    Layout l{1 + static_cast<int>((*rng)() % 8), 1 + static_cast<int>((*rng)() % 8),
             1 + static_cast<int>((*rng)() % 8)};
    if (l.world() <= 8 && l.pp <= num_layers) return l;
  }
}

void CheckAgainstGlobal(const ReshardPlan& plan, const std::vector<ShardMap>& shards) {
  for (size_t w = 0; w < shards.size(); ++w) {
    const ShardMap expected = ShardsOf(plan.state, plan.to, static_cast<int>(w));
    ASSERT_EQ(shards[w].size(), expected.size()) << "worker " << w;
    for (const auto& [name, bytes] : expected) {
      auto it = shards[w].find(name);
      ASSERT_NE(it, shards[w].end()) << "worker " << w << " lacks " << name;
      ASSERT_TRUE(it->second == bytes) << "worker " << w << " tensor " << name << " differs";
    }
  }
}

TEST(ReshardProperty, RandomTensorsAndLayoutsMatchTheGlobalSlicesBitForBit) {
  std::mt19937 rng(20261130);
  int executed = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const StateSpec state = RandomState(&rng);
    const Layout a = RandomLayout(&rng, state.num_layers);
    const Layout b = RandomLayout(&rng, state.num_layers);
    bool fits = true;
    for (const auto& t : state.tensors) {
      fits = fits && ValidateTensor(t, state.num_layers, a).ok() &&
             ValidateTensor(t, state.num_layers, b).ok();
    }
    if (!fits) continue;
    const int n = std::max(a.world(), b.world()) + static_cast<int>(rng() % 2);
    std::vector<int> hosts(n);
    for (int w = 0; w < n; ++w) hosts[w] = w / 2;
    const Placement pa = RandomPlacement(a, n, &rng), pb = RandomPlacement(b, n, &rng);
    ReshardPlanOptions plan_options;
    plan_options.split_bytes = 64;  // exercise replica splitting on small tensors
    auto plan = BuildReshardPlan(state, pa, pb, hosts, plan_options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->bytes_moved, plan->bytes_lower_bound) << a.ToString() << " -> " << b.ToString();

    ReshardExecutorOptions options;
    options.chunk_bytes = 1 + rng() % 700;  // chunks cut rows and rectangles anywhere
    options.group_bytes = static_cast<int64_t>(rng() % 3000);
    options.direct_min_bytes = static_cast<int64_t>(rng() % 400);  // some transfers go direct
    // The four schedules in turn: serial, concurrent, batched through the staging arena, batched
    // over ExchangeV.
    options.concurrent_peers = trial % 4 == 1;
    options.batched = trial % 4 >= 2;
    options.vectored = trial % 4 == 3;
    options.reuse_memory = trial % 5 != 4;
    std::vector<ReshardExecutorStats> stats;
    const auto shards = Execute(*plan, "t" + std::to_string(trial) + "/", options, &stats);
    CheckAgainstGlobal(*plan, shards);
    int64_t sent = 0, received = 0;
    for (const auto& s : stats) {
      sent += s.bytes_sent;
      received += s.bytes_received;
    }
    EXPECT_EQ(sent, plan->bytes_moved);
    EXPECT_EQ(received, plan->bytes_moved);
    ++executed;
  }
  EXPECT_GE(executed, 10);
}

// Worker r holds rank r of `layout`.
Placement IdentityPlacement(const Layout& layout) {
  Placement p{layout, {}};
  for (int r = 0; r < layout.world(); ++r) p.worker_of_rank.push_back(r);
  return p;
}

TEST(ReshardProperty, GptStateThroughEveryDimension) {
  const StateSpec state = GptState({4, 16, 40, 30, 8, 2, true, true});
  // (dp,pp,tp): (2,1,2) -> (1,2,2) -> (4,1,1) -> (1,2,4), the end-to-end sequence.
  const std::vector<Layout> seq{{2, 1, 2}, {1, 2, 2}, {4, 1, 1}, {1, 2, 4}, {2, 2, 2}};
  std::vector<int> hosts(8);
  for (int w = 0; w < 8; ++w) hosts[w] = w / 4;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    auto plan = BuildReshardPlan(state, IdentityPlacement(seq[i]), IdentityPlacement(seq[i + 1]),
                                 hosts);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->bytes_moved, plan->bytes_lower_bound);
    std::vector<ReshardExecutorStats> stats;
    ReshardExecutorOptions options;
    options.chunk_bytes = 4096;
    options.direct_min_bytes = 1024;
    options.concurrent_peers = i % 4 == 0;
    options.batched = i % 4 >= 1 && i % 4 <= 2;
    options.vectored = i % 4 == 2;  // 1: staged, 2: ExchangeV
    const auto shards = Execute(*plan, "gpt" + std::to_string(i) + "/", options, &stats);
    CheckAgainstGlobal(*plan, shards);
    for (size_t w = 0; w < stats.size(); ++w) {
      // ExchangeV moves every byte straight from and into the shards; the staged schedule packs
      // what is strided (here most of it).
      if (options.vectored && options.batched) {
        EXPECT_EQ(stats[w].bytes_staged, 0) << "change " << i << ", worker " << w;
      }
    }
    if (i % 4 == 1) {
      int64_t staged = 0;
      for (const auto& st : stats) staged += st.bytes_staged;
      EXPECT_GT(staged, 0) << "change " << i;
    }
  }
}

// A worker keeps its staging arena from one reshard to the next (ReshardArena), as the
// generation builder does: through a sequence of layout changes, each worker's shards coming from
// the change before and its arena holding what the last one packed, every byte is right, the
// arena keeps memory after a change that staged bytes, and Release() gives it back.
TEST(ReshardExecutor, AKeptArenaServesASequenceOfChanges) {
  const StateSpec state = GptState({4, 16, 40, 30, 8, 2, true, true});
  const std::vector<Layout> seq{{2, 1, 2}, {1, 2, 2}, {4, 1, 1}, {1, 2, 4}, {2, 2, 2}, {1, 1, 8}};
  constexpr int kWorkers = 8;
  std::vector<int> hosts(kWorkers);
  for (int w = 0; w < kWorkers; ++w) hosts[w] = w / 4;
  std::vector<ReshardArena> arenas(kWorkers);
  std::vector<ShardMap> shards(kWorkers);
  for (int w = 0; w < kWorkers; ++w) shards[w] = ShardsOf(state, IdentityPlacement(seq[0]), w);
  int64_t staged = 0;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    auto plan = BuildReshardPlan(state, IdentityPlacement(seq[i]), IdentityPlacement(seq[i + 1]),
                                 hosts);
    ASSERT_TRUE(plan.ok()) << plan.status();
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, "arena" + std::to_string(i) + "/", kWorkers);
    ASSERT_EQ(comms.size(), static_cast<size_t>(kWorkers));
    std::vector<std::thread> threads;
    std::vector<ReshardExecutorStats> stats(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] {
        ReshardExecutorOptions options;
        options.direct_min_bytes = 1 << 20;  // everything staged
        options.vectored = false;            // through the arena, not ExchangeV
        options.arena = &arenas[w];
        const Status s = ExecuteReshard(*plan, *comms[w], &shards[w], options, &stats[w]);
        EXPECT_TRUE(s.ok()) << "change " << i << ", worker " << w << ": " << s;
      });
    }
    for (auto& t : threads) t.join();
    CheckAgainstGlobal(*plan, shards);
    for (int w = 0; w < kWorkers; ++w) {
      staged += stats[w].bytes_staged;
      if (stats[w].bytes_staged > 0) {
        EXPECT_GT(arenas[w].bytes(), 0) << "change " << i << ", worker " << w;
      }
    }
  }
  EXPECT_GT(staged, 0);
  for (auto& arena : arenas) {
    arena.Release();
    EXPECT_EQ(arena.bytes(), 0);
  }
}

TEST(ReshardExecutor, RefusesAMissingOrMisSizedShardBeforeCommunicating) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"w", {4, 4}, 4, {}});
  auto plan = BuildReshardPlan(state, {{1, 1, 1}, {0}}, {{1, 1, 1}, {0}}, {0});
  ASSERT_TRUE(plan.ok());
  InMemoryKeyValueStore store;
  GlooOptions o;
  o.store = &store;
  o.prefix = "single/";
  auto comm = CreateGlooCommunicator(o);
  ASSERT_TRUE(comm.ok());
  ShardMap none;
  EXPECT_EQ(ExecuteReshard(*plan, **comm, &none).code(), StatusCode::kInvalidArgument);
  ShardMap wrong{{"w", HostBytes(63, 0)}};
  EXPECT_EQ(ExecuteReshard(*plan, **comm, &wrong).code(), StatusCode::kInvalidArgument);
  ShardMap right{{"w", HostBytes(64, 7)}};
  EXPECT_TRUE(ExecuteReshard(*plan, **comm, &right).ok());
  EXPECT_EQ(right["w"], HostBytes(64, 7));
}

// A joining worker arrives with its tensors whole (as registered before Start()), which the old
// layout does not count as its shards: the new shards take over that memory when it is large
// enough (no fresh allocation to fault in), and are allocated anew when it is not. Either way
// every byte is right, whatever the stale buffer held.
TEST(ReshardExecutor, AJoinerTakesOverTheMemoryOfItsWholeTensors) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"big", {64, 48}, 4, {}});
  state.tensors.push_back({"small", {32}, 8, {}});
  // dp 1 -> 2: worker 1 joins and receives the replica.
  auto plan = BuildReshardPlan(state, {{1, 1, 1}, {0}}, {{2, 1, 1}, {0, 1}}, {0, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (int mode = 0; mode < 3; ++mode) {  // serial, staged, ExchangeV
    const bool batched = mode > 0;
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, "joiner-" + std::to_string(mode) + "/", 2);
    ASSERT_EQ(comms.size(), 2u);
    std::vector<ShardMap> shards(2);
    shards[0] = ShardsOf(state, plan->from, 0);
    shards[1]["big"] = HostBytes(64 * 48 * 4, 0xab);  // whole, garbage
    shards[1]["small"] = HostBytes(8, 0xcd);         // too small to take over
    const uint8_t* big_memory = shards[1]["big"].data();
    ReshardExecutorOptions options;
    options.batched = batched;
    options.vectored = mode == 2;
    std::vector<std::thread> threads;
    for (int w = 0; w < 2; ++w) {
      threads.emplace_back([&, w] {
        const Status s = ExecuteReshard(*plan, *comms[w], &shards[w], options);
        EXPECT_TRUE(s.ok()) << "worker " << w << ": " << s;
      });
    }
    for (auto& t : threads) t.join();
    CheckAgainstGlobal(*plan, shards);
    EXPECT_EQ(shards[1]["big"].data(), big_memory) << "the whole tensor's memory was not reused";
  }
}

// A tensor whose new region lies inside its old one on a worker (here TP grows from 1 to 2 over
// a DP replica) is formed inside the old shard's memory, after the sends have read it, with no
// new allocation; a tensor that needs bytes from the other worker gets a buffer of its own. With
// reuse_memory off every new shard is allocated. Every byte is right either way.
TEST(ReshardExecutor, AShardThatGrowsThinnerIsFormedInItsOwnMemory) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"col", {64, 48}, 4, {1, -1, false}});  // replicated -> column halves
  state.tensors.push_back({"zero", {40, 30}, 4, {1, -1, true}});  // flat halves -> column halves
  auto plan = BuildReshardPlan(state, {{2, 1, 1}, {0, 1}}, {{1, 1, 2}, {0, 1}}, {0, 1});
  ASSERT_TRUE(plan.ok()) << plan.status();
  int run = 0;
  for (bool reuse : {true, false}) {
    for (int mode = 0; mode < 3; ++mode) {  // serial, staged, ExchangeV
      const bool batched = mode > 0;
      InMemoryKeyValueStore store;
      auto comms = ConnectAll(&store, "in-place-" + std::to_string(run++) + "/", 2);
      ASSERT_EQ(comms.size(), 2u);
      std::vector<ShardMap> shards(2);
      std::vector<const uint8_t*> col_memory(2);
      for (int w = 0; w < 2; ++w) {
        shards[w] = ShardsOf(state, plan->from, w);
        col_memory[w] = shards[w]["col"].data();
      }
      ReshardExecutorOptions options;
      options.batched = batched;
      options.vectored = mode == 2;
      options.reuse_memory = reuse;
      std::vector<ReshardExecutorStats> stats(2);
      std::vector<std::thread> threads;
      for (int w = 0; w < 2; ++w) {
        threads.emplace_back([&, w] {
          const Status s = ExecuteReshard(*plan, *comms[w], &shards[w], options, &stats[w]);
          EXPECT_TRUE(s.ok()) << "worker " << w << ": " << s;
        });
      }
      for (auto& t : threads) t.join();
      CheckAgainstGlobal(*plan, shards);
      for (int w = 0; w < 2; ++w) {
        EXPECT_GT(stats[w].bytes_received, 0) << "worker " << w;  // the zero tensor's half
        if (reuse) {
          EXPECT_EQ(shards[w]["col"].data(), col_memory[w]) << "worker " << w;
          EXPECT_EQ(stats[w].bytes_in_place, 64 * 24 * 4) << "worker " << w;
        } else {
          EXPECT_NE(shards[w]["col"].data(), col_memory[w]) << "worker " << w;
          EXPECT_EQ(stats[w].bytes_in_place, 0) << "worker " << w;
        }
      }
    }
  }
}

// A peer that never takes part: the executor returns the communicator's timeout instead of
// hanging, in every schedule.
TEST(ReshardExecutor, AbsentPeerTimesOut) {
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back({"w", {64, 64}, 4, {}});
  auto plan = BuildReshardPlan(state, {{1, 1, 1}, {0}}, {{2, 1, 1}, {0, 1}}, {0, 1});
  ASSERT_TRUE(plan.ok());
  ASSERT_GT(plan->bytes_moved, 0);
  for (int mode = 0; mode < 4; ++mode) {  // serial, concurrent, staged, ExchangeV
    const bool concurrent = mode == 1;
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, "absent-" + std::to_string(mode) + "/", 2);
    ASSERT_EQ(comms.size(), 2u);
    ShardMap shards = ShardsOf(state, plan->from, 0);
    ReshardExecutorOptions options;
    options.timeout = std::chrono::milliseconds(300);
    options.concurrent_peers = concurrent;
    options.batched = mode >= 2;
    options.vectored = mode == 3;
    const auto start = std::chrono::steady_clock::now();
    const Status s = ExecuteReshard(*plan, *comms[0], &shards, options);  // worker 1 stays idle
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(s.code() == StatusCode::kTimedOut || s.code() == StatusCode::kAborted) << s;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
}

}  // namespace
}  // namespace elastra
