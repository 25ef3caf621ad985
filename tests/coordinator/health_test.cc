#include "coordinator/health.h"

#include <gtest/gtest.h>

namespace elastra::coordinator {
namespace {

TEST(HealthMonitorTest, ExpiresOnlyAfterTimeoutAndOnlyOnce) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(1500));
  h.Beat(0);
  h.Beat(1);
  clock.Advance(Duration(1000));
  h.Beat(1);
  EXPECT_TRUE(h.TakeExpired().empty());
  EXPECT_EQ(h.MillisSinceLast(0), 1000);
  clock.Advance(Duration(500));
  EXPECT_TRUE(h.TakeExpired().empty());  // exactly at the deadline: still alive
  clock.Advance(Duration(1));
  EXPECT_EQ(h.TakeExpired(), (std::vector<uint32_t>{0}));
  EXPECT_TRUE(h.TakeExpired().empty());
  EXPECT_FALSE(h.Watching(0));
  EXPECT_EQ(h.MillisSinceLast(0), -1);
  clock.Advance(Duration(1000));
  EXPECT_EQ(h.TakeExpired(), (std::vector<uint32_t>{1}));
}

TEST(HealthMonitorTest, ForgottenWorkersNeverExpire) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(10));
  h.Beat(3);
  h.Forget(3);
  h.Forget(7);  // never watched
  clock.Advance(Duration(100));
  EXPECT_TRUE(h.TakeExpired().empty());
  EXPECT_FALSE(h.Watching(3));
  EXPECT_FALSE(h.Watching(7));
}

// A beat costs O(1): the superseded beats wait in the queue and are dropped when they reach its
// front; only the last beat of each slot counts, and the expired come sorted.
TEST(HealthMonitorTest, OnlyTheLastBeatCountsAndExpiredAreSorted) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(100));
  for (int i = 0; i < 10; ++i) {
    h.Beat(2);
    h.Beat(1);
    h.Beat(0);
    clock.Advance(Duration(30));
  }
  h.Beat(2);  // 2 keeps beating; 0 and 1 stop
  clock.Advance(Duration(90));
  EXPECT_EQ(h.TakeExpired(), (std::vector<uint32_t>{0, 1}));
  h.Forget(2);
  h.Beat(2);  // watched again
  clock.Advance(Duration(101));
  EXPECT_EQ(h.TakeExpired(), (std::vector<uint32_t>{2}));
  EXPECT_TRUE(h.TakeExpired().empty());
}

// A slot that passed to another worker (the first removed without being forgotten, a second
// given its slot) is judged by the new worker's beats: the old worker's queued beat does not
// expire it.
TEST(HealthMonitorTest, ASlotIsJudgedByTheLastBeatOfWhoeverHoldsIt) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(100));
  h.Beat(5);  // the first holder's last beat
  clock.Advance(Duration(60));
  h.Beat(5);  // the new holder's first beat
  clock.Advance(Duration(60));
  EXPECT_TRUE(h.TakeExpired().empty());  // 120 ms after the old beat, 60 after the new one
  EXPECT_EQ(h.MillisSinceLast(5), 60);
  clock.Advance(Duration(41));
  EXPECT_EQ(h.TakeExpired(), (std::vector<uint32_t>{5}));
}

}  // namespace
}  // namespace elastra::coordinator
