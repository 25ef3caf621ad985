#include "coordinator/kv_store.h"

#include <gtest/gtest.h>

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
  ASSERT_TRUE(kv.AddWaiter(Wait({"a"}, true, later, 1)).ok());
  ASSERT_TRUE(kv.AddWaiter(Wait({"a", "b"}, false, later, 2)).ok());
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
  ASSERT_TRUE(kv.AddWaiter(Wait({"x"}, true, clock.Now() + Duration(100), 1)).ok());
  ASSERT_TRUE(kv.AddWaiter(Wait({"y"}, true, clock.Now() + Duration(300), 2)).ok());
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
