// EventLoop (sim.h): the simulation's events run in time order, ties in the order they were
// scheduled, whether scheduled before the run or by the events themselves; RunUntil stops at its
// bound with the later events still pending.
#include "bench/scale/sim.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace elastra::scale {
namespace {

TEST(EventLoop, RunsEventsInTimeOrderAndTiesInTheOrderScheduled) {
  EventLoop loop(1);
  std::mt19937_64 rng(7);
  // (time, the order scheduled) of each event, as scheduled; and the order they ran in.
  std::vector<std::pair<SimTime, int>> scheduled;
  std::vector<int> ran;
  std::function<void(SimTime, int)> schedule = [&](SimTime t, int depth) {
    const int id = static_cast<int>(scheduled.size());
    scheduled.push_back({t, id});
    loop.At(t, [&, id, t, depth] {
      EXPECT_EQ(loop.now(), t);
      ran.push_back(id);
      // Some events schedule more, at their own time (a tie after every pending one) or later.
      if (depth < 2 && rng() % 3 == 0) schedule(t + static_cast<SimTime>(rng() % 4), depth + 1);
    });
  };
  for (int i = 0; i < 20000; ++i) schedule(static_cast<SimTime>(rng() % 500), 0);
  loop.RunFor(1000);
  ASSERT_EQ(ran.size(), scheduled.size());
  std::vector<std::pair<SimTime, int>> want = scheduled;
  std::sort(want.begin(), want.end());  // by time, then by the order scheduled
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(ran[i], want[i].second) << "event " << i;
  EXPECT_EQ(loop.events_run(), scheduled.size());
}

TEST(EventLoop, RunUntilStopsAtItsBoundOrWhenDone) {
  EventLoop loop(1);
  int count = 0;
  for (int t = 10; t <= 100; t += 10) loop.At(t, [&count] { ++count; });
  EXPECT_FALSE(loop.RunUntil([&count] { return count == 100; }, 35));
  EXPECT_EQ(count, 3);
  EXPECT_EQ(loop.now(), 35);
  EXPECT_TRUE(loop.RunUntil([&count] { return count == 5; }, 1000));
  EXPECT_EQ(loop.now(), 50);
  loop.RunFor(1000);
  EXPECT_EQ(count, 10);
  // An event scheduled in the past runs now.
  loop.At(0, [&count] { ++count; });
  loop.RunFor(0);
  EXPECT_EQ(count, 11);
}

}  // namespace
}  // namespace elastra::scale
