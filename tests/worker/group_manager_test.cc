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
bool RebuildAll(KeyValueStore* store, std::vector<GroupManager>& managers,
                const std::string& prefix, const Layout& layout) {
  const int n = layout.world();
  for (int attempt = 0; attempt < 5; ++attempt) {
    std::vector<Status> built(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        built[r] = managers[r].Rebuild(
            Options(store, prefix + "a" + std::to_string(attempt) + "/", n), layout, r);
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
