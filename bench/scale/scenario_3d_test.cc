// RunScale3D (scenario_3d.h) at 256 workers, dp = 4 x pp = 8 x tp = 8 and a host of 8 spares:
// every change keeps tp and pp, and rebuilds only the communicators whose members changed, as the
// coordinator's status history counts them.
#include "bench/scale/scenario_3d.h"

#include <gtest/gtest.h>

namespace elastra::scale {
namespace {

TEST(Scale3D, ChangesKeepTpAndPpAndRebuildOnlyTheGroupsThatChanged) {
  ScaleParams p;
  p.job.rendezvous_sample = 16;
  p.journal_root = ::testing::TempDir();
  const ScaleRun run = RunScale3D(256, p);
  for (const auto& e : run.events) EXPECT_TRUE(e.ok) << e.name << ": " << e.detail;
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(KeepsModelParallelism(run));
  const Layout full{4, 8, 8}, short_one{3, 8, 8};
  // At dp = 4: the world, 64 dp groups of 4, 32 pp groups and 32 tp groups of 8.
  const EventResult& first = *run.Find("first_generation");
  EXPECT_EQ(first.layout, full);
  EXPECT_EQ(first.groups_rebuilt, 129);
  EXPECT_EQ(first.groups_kept, 0);
  // A spare takes the lost rank: its tp, pp and dp groups and the world are built, the rest kept.
  const EventResult& worker = *run.Find("worker_lost");
  EXPECT_EQ(worker.layout, full);
  EXPECT_EQ(worker.groups_rebuilt, 4);
  EXPECT_EQ(worker.groups_kept, 125);
  EXPECT_EQ(worker.standby, 7);
  // A host (one tp group) lost with 7 spares left: dp drops by one. Every dp group changes size
  // and is built with the world; the 3 whole replicas keep their pp and tp groups (also those the
  // spare's rank built at worker_lost: the simulated workers report a kept group as the
  // generation's it runs, sim_job.cc GroupsOf). The broken replica's 56 survivors join the 7
  // spares as standbys.
  const EventResult& host = *run.Find("host_lost");
  EXPECT_EQ(host.layout, short_one);
  EXPECT_EQ(host.groups_rebuilt, 1 + 64);
  EXPECT_EQ(host.groups_kept, 3 * (8 + 8));
  EXPECT_EQ(host.standby, 63);
  // A replacement starts on the free slot of the worker that died, and dp is back to 4: the new
  // replica's 16 groups, the 64 dp groups (their size changed) and the world are built, and at
  // most the 3 x 16 pp and tp groups of the replicas that stayed are kept. TP groups stay inside
  // hosts (the planner's first rule): when the spare's replica stayed, the spare goes back to its
  // own host, with the 7 standby spares, and the replacement takes its rank, so that tp group and
  // its pp group are built too. Which dp index each stage's host takes is a tie for the rank
  // assignment (every replica holds the same bytes, and nothing in it prefers a worker's old dp
  // index), so a replica's stages may land on different dp indices and its pp groups be built
  // again; its tp groups, each one host, are kept but for the one the spare left.
  const EventResult& regrow = *run.Find("regrow");
  EXPECT_EQ(regrow.layout, full);
  EXPECT_EQ(regrow.groups_rebuilt + regrow.groups_kept, 129);
  EXPECT_GE(regrow.groups_rebuilt, 1 + 64 + 16);
  EXPECT_GE(regrow.groups_kept, 3 * 8 - 1);
  EXPECT_EQ(regrow.standby, 0);
  for (const char* change : {"worker_lost", "host_lost", "regrow"}) {
    EXPECT_GT(run.Find(change)->decision_s, 0) << change;
    EXPECT_LT(run.Find(change)->decision_s, run.Find(change)->time_s) << change;
  }
}

}  // namespace
}  // namespace elastra::scale
