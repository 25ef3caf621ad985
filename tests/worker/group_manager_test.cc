// GroupManager with Gloo ranks as threads over an in-memory store: Rebuild() connects a
// generation's world and groups and replaces the previous generation's; Interrupt(), called from
// another thread as the I/O thread does, breaks a collective blocked on a peer that never comes
// (long before its timeout), and the hand-off communicator while it is registered; Release()
// drops the communicators.
#include "worker/group_manager.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kTimeout{30000};  // what a call not broken by Interrupt() would wait

GroupOptions Options(KeyValueStore* store, const std::string& prefix, int world) {
  GroupOptions o;
  o.store = store;
  o.prefix = prefix;
  o.timeout = kTimeout;
  o.connect_timeout = milliseconds(10000);
  o.backend = Backend::kGloo;
  (void)world;
  return o;
}

// Rebuilds every rank's manager into a generation of `layout` under `prefix`, the ranks as
// threads. Gloo's socket discovery now and then misses a socket when every rank is one process
// (see tests/collectives/gloo_thread_ranks.h): then all ranks try again under a fresh prefix.
// `keep`: the kinds each rank keeps (NewGeneration::keep_groups); a failed attempt loses them.
bool RebuildAll(KeyValueStore* store, std::vector<GroupManager>& managers,
                const std::string& prefix, const Layout& layout,
                const std::vector<uint8_t>& keep = {}, uint64_t generation = 1) {
  const int n = layout.world();
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::vector<Status> built(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        GroupOptions o = Options(store, prefix + "a" + std::to_string(attempt) + "/", n);
        o.generation = generation;
        built[r] = managers[r].Rebuild(o, layout, r, keep.empty() ? 0 : keep[r]);
      });
    }
    for (auto& t : threads) t.join();
    bool all = true;
    for (const Status& s : built) all &= s.ok();
    if (all) return true;
  }
  return false;
}

// Calls Interrupt() on `manager` until `done`, at most `limit`; the time it took.
milliseconds InterruptUntil(GroupManager& manager, const std::atomic<bool>& done,
                            milliseconds limit) {
  const auto start = Clock::now();
  while (!done.load() && Clock::now() - start < limit) {
    manager.Interrupt();
    std::this_thread::sleep_for(milliseconds(5));
  }
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

TEST(GroupManager, RebuildConnectsTheGenerationAndReplacesThePreviousOne) {
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(2);
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{2, 1, 1}));
  std::vector<Communicator*> first_worlds;
  for (int r = 0; r < 2; ++r) {
    GroupManager& m = managers[r];
    EXPECT_EQ(m.world().rank(), r);
    EXPECT_EQ(m.world().size(), 2);
    EXPECT_EQ(&m.control(), &m.world());  // Gloo: the worker's own traffic uses the world
    EXPECT_EQ(&m.dp(), &m.world());       // dp spans the world
    EXPECT_EQ(m.pp().size(), 1);
    EXPECT_EQ(m.tp().size(), 1);
    first_worlds.push_back(&m.world());
  }
  // The next generation: the same two workers as tensor-parallel ranks.
  ASSERT_TRUE(RebuildAll(&store, managers, "g2/", Layout{1, 1, 2}));
  std::vector<int64_t> sums(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      GroupManager& m = managers[r];
      EXPECT_EQ(&m.tp(), &m.world());
      EXPECT_EQ(m.dp().size(), 1);
      sums[r] = r + 1;
      EXPECT_TRUE(m.world().Allreduce(&sums[r], 1, DataType::kInt64, ReduceOp::kSum).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums, (std::vector<int64_t>{3, 3}));
}

TEST(GroupManager, InterruptFromAnotherThreadBreaksABlockedCollective) {
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(2);
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{2, 1, 1}));
  // Rank 0 enters an allreduce that rank 1 never joins (a dead peer).
  std::atomic<bool> done{false};
  Status result;
  std::thread blocked([&] {
    int64_t x = 1;
    result = managers[0].control().Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum);
    done = true;
  });
  const milliseconds took = InterruptUntil(managers[0], done, milliseconds(10000));
  blocked.join();
  EXPECT_FALSE(result.ok());
  EXPECT_LT(took.count(), 10000) << "the call waited instead of being broken";
  for (auto& m : managers) m.Release();
}

TEST(GroupManager, InterruptBreaksTheHandoffCommunicatorOnlyWhileRegistered) {
  InMemoryKeyValueStore store;
  // Two hand-off pairs, as ConnectGroup makes them for a leaving worker.
  auto connect_pair = [&](const std::string& prefix) {
    std::vector<std::unique_ptr<Communicator>> pair(2);
    for (int attempt = 0; attempt < 5; ++attempt) {
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
          auto c = ConnectGroup(Options(&store, prefix + std::to_string(attempt) + "/", 2),
                                "handoff", r, 2);
          pair[r] = c.ok() ? std::move(c).value() : nullptr;
        });
      }
      for (auto& t : threads) t.join();
      if (pair[0] != nullptr && pair[1] != nullptr) break;
    }
    return pair;
  };
  GroupManager manager;

  auto kept = connect_pair("kept");
  ASSERT_TRUE(kept[0] != nullptr && kept[1] != nullptr);
  manager.SetHandoff(kept[0].get());
  manager.SetHandoff(nullptr);  // done with it: an interrupt leaves it alone
  manager.Interrupt();
  std::thread peer([&] { EXPECT_TRUE(kept[1]->Barrier().ok()); });
  EXPECT_TRUE(kept[0]->Barrier().ok());
  peer.join();

  auto broken = connect_pair("broken");
  ASSERT_TRUE(broken[0] != nullptr && broken[1] != nullptr);
  manager.SetHandoff(broken[0].get());
  std::atomic<bool> done{false};
  Status result;
  std::thread blocked([&] {
    int64_t x = 0;
    result = broken[0]->Recv(&x, sizeof(x), /*peer=*/1, /*tag=*/7, kTimeout);
    done = true;
  });
  const milliseconds took = InterruptUntil(manager, done, milliseconds(10000));
  blocked.join();
  EXPECT_FALSE(result.ok());
  EXPECT_LT(took.count(), 10000);
  manager.SetHandoff(nullptr);
}

// Runs `call(rank)` on every rank at once; whether all succeeded.
template <class Call>
bool OnEveryRank(int n, Call call) {
  std::vector<Status> done(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { done[r] = call(r); });
  for (auto& t : threads) t.join();
  bool all = true;
  for (const Status& s : done) all &= s.ok();
  return all;
}

constexpr uint8_t kTpBit = 1 << proto::kTpGroup;

TEST(GroupManager, AnIdleGroupStaysIntactThroughAnInterruptAndIsKept) {
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(4);
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{2, 1, 2}));
  // One tp allreduce and one dp send/receive pair, then every rank is interrupted (a recovery).
  ASSERT_TRUE(OnEveryRank(4, [&](int r) {
    int64_t x = r;
    ELASTRA_RETURN_IF_ERROR(managers[r].tp().Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum));
    Communicator& dp = managers[r].dp();
    return dp.rank() == 0 ? dp.Send(&x, sizeof(x), 1, 3, kTimeout)
                          : dp.Recv(&x, sizeof(x), 0, 3, kTimeout);
  }));
  std::vector<Communicator*> tp_before;
  for (auto& m : managers) {
    const std::vector<proto::GroupHealth> health = m.Interrupt();
    ASSERT_EQ(health.size(), 3u) << "dp, pp (one rank) and tp";
    for (const proto::GroupHealth& h : health) {
      EXPECT_TRUE(h.intact) << "kind " << int{h.kind};
      EXPECT_EQ(h.calls, h.kind == proto::kTpGroup ? 1 : 0);
      if (h.kind == proto::kDpGroup) {
        ASSERT_EQ(h.peers.size(), 1u);
        EXPECT_EQ(h.sent[0] + h.received[0], 1);
      }
    }
    tp_before.push_back(&m.tp());
    int64_t x = 0;
    EXPECT_EQ(m.tp().Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum).code(),
              StatusCode::kAborted)
        << "a stopped group refuses calls without touching the network";
  }
  // The next generation keeps the tp groups and builds the rest.
  ASSERT_TRUE(RebuildAll(&store, managers, "g2/", Layout{2, 1, 2},
                         std::vector<uint8_t>(4, kTpBit), /*generation=*/2));
  std::vector<int64_t> sums(4);
  ASSERT_TRUE(OnEveryRank(4, [&](int r) {
    EXPECT_EQ(&managers[r].tp(), tp_before[r]) << "rank " << r << " built its tp group again";
    sums[r] = r + 1;
    return managers[r].tp().Allreduce(&sums[r], 1, DataType::kInt64, ReduceOp::kSum);
  }));
  EXPECT_EQ(sums, (std::vector<int64_t>{3, 3, 7, 7}));
  for (auto& m : managers) {
    for (const proto::GroupHealth& h : m.Health()) {
      if (h.kind != proto::kTpGroup) continue;
      EXPECT_EQ(h.calls, 2) << "counted across generations";
      // It serves generation 2 now, so that the change after it may keep it again.
      EXPECT_EQ(h.generation, 2u);
    }
  }
  for (auto& m : managers) m.Release();
}

TEST(GroupManager, AGroupInterruptedInsideACallIsNotIntact) {
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(4);
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{2, 1, 2}));
  // Rank 0 waits in a dp receive that rank 2 never sends (its peer is stuck elsewhere).
  std::atomic<bool> done{false};
  Status result;
  std::thread blocked([&] {
    int64_t x = 0;
    result = managers[0].dp().Recv(&x, sizeof(x), 1, 5, kTimeout);
    done = true;
  });
  // Interrupted once the call is inside (a gate stopped before it would refuse the call and stay
  // intact): a call in flight already reads as not intact.
  auto dp_intact = [&] {
    for (const proto::GroupHealth& h : managers[0].Health()) {
      if (h.kind == proto::kDpGroup) return h.intact;
    }
    return true;
  };
  while (dp_intact()) std::this_thread::sleep_for(milliseconds(1));
  const milliseconds took = InterruptUntil(managers[0], done, milliseconds(10000));
  blocked.join();
  EXPECT_FALSE(result.ok());
  EXPECT_LT(took.count(), 10000) << "the call waited instead of being broken";
  for (const proto::GroupHealth& h : managers[0].Health()) {
    EXPECT_EQ(h.intact, h.kind != proto::kDpGroup) << "kind " << int{h.kind};
  }
  for (auto& m : managers) m.Release();
}

// A standby warms up before it is needed: its gloo device exists before any build, its first
// build uses it, and once the workers release their communicators nothing holds it any more.
TEST(GroupManager, AStandbyWarmsUpTheDeviceItsFirstBuildUses) {
  ASSERT_FALSE(GlooSharedDeviceExists("127.0.0.1")) << "no communicator in this process yet";
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(2);
  GroupOptions warm;
  warm.bind_host = "127.0.0.1";
  managers[1].WarmUp(warm);
  const auto deadline = Clock::now() + kTimeout;
  while (!GlooSharedDeviceExists("127.0.0.1") && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(1));
  }
  ASSERT_TRUE(GlooSharedDeviceExists("127.0.0.1")) << "the warm-up made no device";
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{2, 1, 1}));
  std::vector<int64_t> sums{1, 2};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_TRUE(
          managers[r].world().Allreduce(&sums[r], 1, DataType::kInt64, ReduceOp::kSum).ok());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(sums, (std::vector<int64_t>{3, 3}));
  for (GroupManager& m : managers) m.Release();
  EXPECT_FALSE(GlooSharedDeviceExists("127.0.0.1")) << "the warm-up's handle outlived the build";
}

TEST(GroupManagerDeathTest, ReleaseDropsTheCommunicators) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  InMemoryKeyValueStore store;
  std::vector<GroupManager> managers(1);
  ASSERT_TRUE(RebuildAll(&store, managers, "g1/", Layout{1, 1, 1}));
  EXPECT_EQ(managers[0].world().size(), 1);
  managers[0].Release();
  EXPECT_DEATH(managers[0].world(), "no communicator");
  EXPECT_DEATH(managers[0].control(), "no communicator");
}

}  // namespace
}  // namespace elastra
