#include "coordinator/health.h"

#include <gtest/gtest.h>

namespace elastra::coordinator {
namespace {

TEST(HealthMonitorTest, ExpiresOnlyAfterTimeoutAndOnlyOnce) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(1500));
  h.Beat("a");
  h.Beat("b");
  clock.Advance(Duration(1000));
  h.Beat("b");
  EXPECT_TRUE(h.TakeExpired().empty());
  EXPECT_EQ(h.MillisSinceLast("a"), 1000);
  clock.Advance(Duration(500));
  EXPECT_TRUE(h.TakeExpired().empty());  // exactly at the deadline: still alive
  clock.Advance(Duration(1));
  EXPECT_EQ(h.TakeExpired(), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(h.TakeExpired().empty());
  EXPECT_FALSE(h.Watching("a"));
  EXPECT_EQ(h.MillisSinceLast("a"), -1);
  clock.Advance(Duration(1000));
  EXPECT_EQ(h.TakeExpired(), (std::vector<std::string>{"b"}));
}

TEST(HealthMonitorTest, ForgottenWorkersNeverExpire) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(10));
  h.Beat("a");
  h.Forget("a");
  clock.Advance(Duration(100));
  EXPECT_TRUE(h.TakeExpired().empty());
}


// A beat costs O(1): the superseded beats wait in the queue and are dropped when they reach its
// front; only the last beat of each id counts, and the expired come sorted.
TEST(HealthMonitorTest, OnlyTheLastBeatCountsAndExpiredAreSorted) {
  FakeClock clock;
  HealthMonitor h(&clock, Duration(100));
  for (int i = 0; i < 10; ++i) {
    h.Beat("c");
    h.Beat("b");
    h.Beat("a");
    clock.Advance(Duration(30));
  }
  h.Beat("c");  // c keeps beating; a and b stop
  clock.Advance(Duration(90));
  EXPECT_EQ(h.TakeExpired(), (std::vector<std::string>{"a", "b"}));
  h.Forget("c");
  h.Beat("c");  // watched again
  clock.Advance(Duration(101));
  EXPECT_EQ(h.TakeExpired(), (std::vector<std::string>{"c"}));
  EXPECT_TRUE(h.TakeExpired().empty());
}

}  // namespace
}  // namespace elastra::coordinator
