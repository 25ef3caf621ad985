#include "coordinator/kv_store.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace elastra::coordinator {
namespace {

KvStore::Waiter Wait(std::vector<std::string> keys, bool get, TimePoint deadline,
                     uint64_t id = 1) {
  KvStore::Waiter w;
  w.identity = "c";
  w.request_id = id;
  w.keys = std::move(keys);
  w.is_get = get;
  w.deadline = deadline;
  return w;
}

TEST(KvStoreTest, SetGetAdd) {
  FakeClock clock;
  KvStore kv(&clock);
  EXPECT_FALSE(kv.Get("k").has_value());
  ASSERT_TRUE(kv.Set("k", "v", nullptr).ok());
  EXPECT_EQ(kv.Get("k").value(), "v");
  auto a = kv.Add("n", 5, nullptr);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, 5);
  EXPECT_EQ(*kv.Add("n", -2, nullptr), 3);
  EXPECT_EQ(kv.Get("n").value(), "3");
  EXPECT_EQ(kv.Add("k", 1, nullptr).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv.Set("big", std::to_string(INT64_MAX), nullptr).ok());
  EXPECT_EQ(kv.Add("big", 1, nullptr).status().code(), StatusCode::kInvalidArgument);
}

TEST(KvStoreTest, WaitersCompleteWhenAllKeysExist) {
  FakeClock clock;
  KvStore kv(&clock);
  const TimePoint later = clock.Now() + Duration(1000);
  ASSERT_TRUE(kv.AddWaiter(Wait({"a"}, true, later, 1), nullptr).ok());
  ASSERT_TRUE(kv.AddWaiter(Wait({"a", "b"}, false, later, 2), nullptr).ok());
  std::vector<KvStore::Completion> done;
  ASSERT_TRUE(kv.Set("a", "va", &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].waiter.request_id, 1u);
  EXPECT_EQ(done[0].value, "va");
  EXPECT_TRUE(done[0].status.ok());
  done.clear();
  ASSERT_TRUE(kv.Add("b", 1, &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].waiter.request_id, 2u);
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, WaitersTimeOutAtTheirDeadline) {
  FakeClock clock;
  KvStore kv(&clock);
  ASSERT_TRUE(kv.AddWaiter(Wait({"x"}, true, clock.Now() + Duration(100), 1), nullptr).ok());
  ASSERT_TRUE(kv.AddWaiter(Wait({"y"}, true, clock.Now() + Duration(300), 2), nullptr).ok());
  clock.Advance(Duration(99));
  EXPECT_TRUE(kv.ExpireWaiters().empty());
  clock.Advance(Duration(1));
  auto expired = kv.ExpireWaiters();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].waiter.request_id, 1u);
  EXPECT_EQ(expired[0].status.code(), StatusCode::kTimedOut);
  EXPECT_NE(expired[0].status.message().find("'x'"), std::string::npos);
  EXPECT_EQ(kv.waiters(), 1u);
}

TEST(KvStoreTest, AWaiterMissingNothingCompletesAtOnce) {
  FakeClock clock;
  KvStore kv(&clock);
  ASSERT_TRUE(kv.Set("a", "va", nullptr).ok());
  std::vector<KvStore::Completion> done;
  KvStore::Waiter w = Wait({"a", "a"}, false, clock.Now() + Duration(10), 7);
  w.is_get_many = true;
  ASSERT_TRUE(kv.AddWaiter(w, &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].waiter.request_id, 7u);
  EXPECT_EQ(done[0].values, (std::vector<std::string>{"va", "va"}));
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, AKeyListedTwiceIsWaitedForOnce) {
  FakeClock clock;
  KvStore kv(&clock);
  ASSERT_TRUE(kv.AddWaiter(Wait({"b", "a", "b"}, false, clock.Now() + Duration(10), 1), nullptr)
                  .ok());
  std::vector<KvStore::Completion> done;
  ASSERT_TRUE(kv.Set("b", "1", &done).ok());
  EXPECT_TRUE(done.empty());
  ASSERT_TRUE(kv.Set("a", "2", &done).ok());
  ASSERT_EQ(done.size(), 1u);
  // Overwriting a key completes nothing and keeps the store's accounting.
  done.clear();
  ASSERT_TRUE(kv.Set("a", "3", &done).ok());
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(kv.Get("a").value(), "3");
}

TEST(KvStoreTest, AWaiterMissesADroppedKeyAgain) {
  FakeClock clock;
  KvStore kv(&clock);
  ASSERT_TRUE(
      kv.AddWaiter(Wait({"g1/a", "g2/b"}, false, clock.Now() + Duration(10), 1), nullptr).ok());
  std::vector<KvStore::Completion> done;
  ASSERT_TRUE(kv.Set("g1/a", "x", &done).ok());
  kv.DropGenerationsBefore(2);
  ASSERT_TRUE(kv.Set("g2/b", "y", &done).ok());
  EXPECT_TRUE(done.empty());
  EXPECT_EQ(kv.waiters(), 1u);
  ASSERT_TRUE(kv.Set("g1/a", "z", &done).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, EqualDeadlinesExpireInTheOrderTheWaitersCame) {
  FakeClock clock;
  KvStore kv(&clock);
  const TimePoint at = clock.Now() + Duration(5);
  for (uint64_t id : {3, 1, 2}) ASSERT_TRUE(kv.AddWaiter(Wait({"k"}, true, at, id), nullptr).ok());
  ASSERT_TRUE(kv.AddWaiter(Wait({"k", "j"}, true, at - Duration(1), 4), nullptr).ok());
  clock.Advance(Duration(5));
  auto expired = kv.ExpireWaiters();
  ASSERT_EQ(expired.size(), 4u);
  EXPECT_EQ(expired[0].waiter.request_id, 3u);
  EXPECT_EQ(expired[1].waiter.request_id, 1u);
  EXPECT_EQ(expired[2].waiter.request_id, 2u);
  EXPECT_EQ(expired[3].waiter.request_id, 4u);
  // An expired waiter is gone from the index: the key appearing later completes nothing.
  std::vector<KvStore::Completion> done;
  ASSERT_TRUE(kv.Set("k", "v", &done).ok());
  EXPECT_TRUE(done.empty());
}

// A generation's rendezvous at 4,096 ranks: each rank sets its address for each of its peers
// (rank +- 2^k) and waits for each peer's address for it. Every rank completes exactly once,
// with the values its peers set, when the last of its keys appears.
TEST(KvStoreTest, ARendezvousOfThousandsOfRanksCompletesEachRankOnce) {
  FakeClock clock;
  KvStore kv(&clock);
  const int n = 4096;
  auto key = [](int from, int to) {
    return "g3/mesh/" + std::to_string(from) + "/" + std::to_string(to);
  };
  auto peers = [&](int r) {
    std::set<int> p;
    for (int d = 1; d < n; d *= 2) {
      p.insert((r + d) % n);
      p.insert((r - d + n) % n);
    }
    return std::vector<int>(p.begin(), p.end());
  };
  std::vector<int> completed(n, 0);
  std::vector<KvStore::Completion> done;
  auto collect = [&] {
    for (auto& c : done) {
      ASSERT_TRUE(c.status.ok());
      const int r = static_cast<int>(c.waiter.request_id);
      ++completed[r];
      const auto p = peers(r);
      ASSERT_EQ(c.values.size(), p.size());
      for (size_t i = 0; i < p.size(); ++i) EXPECT_EQ(c.values[i], key(p[i], r));
    }
    done.clear();
  };
  for (int r = 0; r < n; ++r) {
    for (int p : peers(r)) ASSERT_TRUE(kv.Set(key(r, p), key(r, p), &done).ok());
    collect();
    KvStore::Waiter w = Wait({}, false, clock.Now() + Duration(1000), r);
    for (int p : peers(r)) w.keys.push_back(key(p, r));
    w.is_get_many = true;
    ASSERT_TRUE(kv.AddWaiter(std::move(w), &done).ok());
    collect();
    // Rank r has all its keys once every peer set its own: peers below r already did.
    const auto p = peers(r);
    EXPECT_EQ(completed[r], p.back() < r ? 1 : 0) << "rank " << r;
  }
  for (int r = 0; r < n; ++r) EXPECT_EQ(completed[r], 1) << "rank " << r;
  EXPECT_EQ(kv.waiters(), 0u);
}

TEST(KvStoreTest, DropsOldGenerationKeysOnly) {
  FakeClock clock;
  KvStore kv(&clock);
  for (auto k : {"g1/a", "g2/a", "g3/a", "g10/a", "other", "g/x", "gx/y"}) {
    ASSERT_TRUE(kv.Set(k, "v", nullptr).ok());
  }
  kv.DropGenerationsBefore(3);
  EXPECT_FALSE(kv.Contains("g1/a"));
  EXPECT_FALSE(kv.Contains("g2/a"));
  EXPECT_TRUE(kv.Contains("g3/a"));
  EXPECT_TRUE(kv.Contains("g10/a"));
  EXPECT_TRUE(kv.Contains("other"));
  EXPECT_TRUE(kv.Contains("g/x"));
  EXPECT_TRUE(kv.Contains("gx/y"));
  EXPECT_EQ(KeyGeneration("g12/x").value(), 12u);
  EXPECT_FALSE(KeyGeneration("g12x/").has_value());
}

TEST(KvStoreTest, BoundsTotalBytes) {
  FakeClock clock;
  KvStore kv(&clock);
  std::string chunk(16u << 20, 'x');
  Status last;
  for (int i = 0; i < 20 && last.ok(); ++i) last = kv.Set("k" + std::to_string(i), chunk, nullptr);
  EXPECT_EQ(last.code(), StatusCode::kResourceExhausted);
  // Overwriting an existing key with a smaller value still works.
  EXPECT_TRUE(kv.Set("k0", "small", nullptr).ok());
}

}  // namespace
}  // namespace elastra::coordinator
