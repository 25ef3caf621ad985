// PlanNcclReuse: when a generation's NCCL world can be made from the previous one, and how. The
// NCCL calls themselves need a GPU (tests/gpu); the decision is pure and tested here.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "worker/group_building.h"

namespace elastra {
namespace {

const std::vector<std::string> kOld = {"a", "b", "c", "d"};

TEST(NcclReusePlan, SameMembersInTheSameOrderReuseAHealthyWorld) {
  NcclReusePlan p = PlanNcclReuse(kOld, kOld, OkStatus());
  EXPECT_TRUE(p.possible);
  EXPECT_TRUE(p.exclude.empty());
  EXPECT_FALSE(p.renumber);
}

TEST(NcclReusePlan, SurvivorsShrinkTheWorldWithoutTheDeparted) {
  // "c" died: the old world is broken (interrupted by the recovery); survivors keep their order.
  NcclReusePlan p = PlanNcclReuse(kOld, {"a", "b", "d"}, PeerLostError("interrupted"));
  EXPECT_TRUE(p.possible);
  EXPECT_EQ(p.exclude, (std::vector<int>{2}));
  EXPECT_FALSE(p.renumber);
  // A planned shrink of a healthy world: two leave.
  p = PlanNcclReuse(kOld, {"b", "d"}, OkStatus());
  EXPECT_TRUE(p.possible);
  EXPECT_EQ(p.exclude, (std::vector<int>{0, 2}));
}

TEST(NcclReusePlan, ANewRankOrderNeedsARenumberingSplit) {
  NcclReusePlan p = PlanNcclReuse(kOld, {"d", "a", "b"}, PeerLostError("interrupted"));
  EXPECT_TRUE(p.possible);
  EXPECT_EQ(p.exclude, (std::vector<int>{2}));
  EXPECT_TRUE(p.renumber);
  p = PlanNcclReuse(kOld, {"b", "a", "c", "d"}, OkStatus());
  EXPECT_TRUE(p.possible);
  EXPECT_TRUE(p.exclude.empty());
  EXPECT_TRUE(p.renumber);
}

TEST(NcclReusePlan, FreshInitWhenTheOldWorldCannotServe) {
  // A new worker was never a rank of the old world.
  EXPECT_FALSE(PlanNcclReuse(kOld, {"a", "b", "c", "d", "e"}, OkStatus()).possible);
  EXPECT_FALSE(PlanNcclReuse(kOld, {"a", "x"}, OkStatus()).possible);
  // A broken world with nobody to exclude (a transient failure): only a shrink could use it.
  EXPECT_FALSE(PlanNcclReuse(kOld, kOld, PeerLostError("interrupted")).possible);
  EXPECT_FALSE(PlanNcclReuse(kOld, kOld, TimedOutError("allreduce")).possible);
  // A released world is gone.
  EXPECT_FALSE(PlanNcclReuse(kOld, {"a", "b"}, AbortedError("Abort() was called")).possible);
  // Malformed lists: a member twice, an empty generation, a duplicate old id.
  EXPECT_FALSE(PlanNcclReuse(kOld, {"a", "a"}, OkStatus()).possible);
  EXPECT_FALSE(PlanNcclReuse(kOld, {}, OkStatus()).possible);
  EXPECT_FALSE(PlanNcclReuse({"a", "a"}, {"a"}, OkStatus()).possible);
}

}  // namespace
}  // namespace elastra
