// MedianOf (scenario.h): several runs of one size become one, each event as its median run
// measured it, and an event that failed in any run fails in the result. MeasureLoneHeartbeats
// (lone_heartbeats.h) forms its generation before it times anything.
#include "bench/scale/scenario.h"

#include "bench/scale/lone_heartbeats.h"

#include <gtest/gtest.h>

namespace elastra::scale {
namespace {

// A run of 1,024 workers whose grow cost `grow_ms` (and failed unless `grow_ok`), whose heartbeats
// cost `heartbeat_ms` at 10 ms a second of window, and whose restart replayed in `replay_ms`.
ScaleRun RunOf(double grow_ms, double heartbeat_ms, double replay_ms, bool grow_ok = true) {
  ScaleRun r;
  r.n = 1024;
  r.wall_s = 1;
  r.replay_cpu_ms = replay_ms;
  for (const auto& name : EventNames()) {
    EventResult e;
    e.name = name;
    e.ok = true;
    e.cost.cpu_ms = 1;
    e.window_s = 1;
    r.events.push_back(e);
  }
  for (auto& e : r.events) {
    if (e.name == "grow") {
      e.cost.cpu_ms = grow_ms;
      e.ok = grow_ok;
      if (!grow_ok) e.detail = "resize: no room";
    }
    if (e.name == "heartbeats") {
      e.cost.cpu_ms = heartbeat_ms;
      e.window_s = heartbeat_ms / 10;  // the same CPU per second in every run: 10 ms/s
    }
    if (e.name == "restart") e.cost.cpu_ms = replay_ms + 1;
  }
  return r;
}

TEST(MedianOf, EachEventIsItsMedianRunAndTheReplayGoesWithItsRestart) {
  ScaleRun m = MedianOf({RunOf(30, 5, 300), RunOf(10, 20, 100), RunOf(20, 10, 200)});
  EXPECT_EQ(m.Find("grow")->cost.cpu_ms, 20);
  EXPECT_EQ(m.Find("restart")->cost.cpu_ms, 201);
  EXPECT_EQ(m.replay_cpu_ms, 200) << "the replay of the restart taken";
  EXPECT_EQ(m.wall_s, 3) << "the runs' wall time adds up";
  EXPECT_TRUE(m.ok());
  // An even count takes the lower of the two middle runs.
  EXPECT_EQ(MedianOf({RunOf(40, 5, 1), RunOf(10, 5, 1)}).Find("grow")->cost.cpu_ms, 10);
}

TEST(MedianOf, HeartbeatsAreComparedByTheirCpuPerSecondOfWindow) {
  ScaleRun a = RunOf(1, 10, 1), b = RunOf(1, 10, 1), c = RunOf(1, 10, 1);
  a.events[2].cost.cpu_ms = 30;  // 30 ms over 1 s: the dearest
  a.events[2].window_s = 1;
  b.events[2].cost.cpu_ms = 40;  // 40 ms over 4 s: the cheapest
  b.events[2].window_s = 4;
  c.events[2].cost.cpu_ms = 20;  // 20 ms over 1 s: the median
  c.events[2].window_s = 1;
  ASSERT_EQ(a.events[2].name, "heartbeats");
  EXPECT_EQ(MedianOf({a, b, c}).Find("heartbeats")->cost.cpu_ms, 20);
}

TEST(MedianOf, AnEventThatFailedInAnyRunFails) {
  ScaleRun m = MedianOf({RunOf(10, 5, 1), RunOf(20, 5, 1, /*grow_ok=*/false), RunOf(30, 5, 1)});
  ASSERT_NE(m.Find("grow"), nullptr);
  EXPECT_FALSE(m.Find("grow")->ok);
  EXPECT_EQ(m.Find("grow")->detail, "resize: no room");
  EXPECT_FALSE(m.ok());
  EXPECT_TRUE(m.Find("shrink")->ok);
}

// The lone heartbeats' core forms its first generation through its own handlers (-1 otherwise)
// before the heartbeats are timed.
TEST(LoneHeartbeats, TheGenerationFormsAndEachHeartbeatIsTimed) {
  EXPECT_GT(MeasureLoneHeartbeats(/*workers=*/24, /*heartbeats=*/500, /*passes=*/3, /*seed=*/1), 0);
}

}  // namespace
}  // namespace elastra::scale
