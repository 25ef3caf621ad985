// PlanNcclReuse: when a generation's NCCL world can be made from the previous one, and how; and
// AgreeNcclReuse, the ranks' agreement on it over a real Gloo control world (thread ranks), which
// hands every rank the list to exclude that only the new rank 0 got. The NCCL calls themselves
// need a GPU (tests/gpu); the decision is tested here.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/kv_store.h"
#include "tests/collectives/gloo_thread_ranks.h"
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

TEST(NcclReusePlan, OnlyTheCountOfExcludedRanksReachesRanksOtherThanZero) {
  // What the coordinator sends a member other than the new rank 0: the count, not the list.
  proto::NcclReuse reuse = proto::NcclReuseOf({"a", "b", "c", "d", "e"}, {"a", "c", "e"});
  ASSERT_EQ(reuse.excluded, 2);
  EXPECT_EQ(reuse.exclude, (std::vector<int32_t>{1, 3}));
  reuse.exclude.clear();
  NcclReusePlan p = PlanNcclReuse(reuse, PeerLostError("interrupted"));
  EXPECT_TRUE(p.possible);  // a broken world with ranks to exclude can shrink
  EXPECT_EQ(p.excluded, 2);
  EXPECT_TRUE(p.exclude.empty());
}

// Runs AgreeNcclReuse on n thread ranks over a real Gloo world; plans[r] is rank r's.
std::vector<NcclReusePlan> Agree(std::vector<NcclReusePlan> plans, int old_world) {
  const int n = static_cast<int>(plans.size());
  InMemoryKeyValueStore store;
  auto comms = testing::ConnectThreadRanks(&store, "agree/", n, std::chrono::seconds(20),
                                           std::chrono::seconds(20));
  EXPECT_EQ(static_cast<int>(comms.size()), n);
  if (static_cast<int>(comms.size()) != n) return {};
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      status[r] = AgreeNcclReuse(&plans[r], r, old_world, *comms[r], std::chrono::seconds(20));
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  return plans;
}

// The new rank 0's plan holds the list, the others' only its length (as sent).
std::vector<NcclReusePlan> Plans(int n, std::vector<int> exclude) {
  std::vector<NcclReusePlan> plans(n);
  for (int r = 0; r < n; ++r) {
    plans[r].possible = true;
    plans[r].excluded = static_cast<int>(exclude.size());
    if (r == 0) plans[r].exclude = exclude;
  }
  return plans;
}

TEST(AgreeNcclReuse, EveryRankGetsRankZerosListOfRanksToExclude) {
  const std::vector<int> exclude = {1, 4, 6};
  for (const NcclReusePlan& p : Agree(Plans(5, exclude), 8)) {
    EXPECT_TRUE(p.possible);
    EXPECT_EQ(p.exclude, exclude);
  }
  // Nothing to exclude (a renumbering only): no broadcast, every rank agrees.
  for (const NcclReusePlan& p : Agree(Plans(3, {}), 3)) {
    EXPECT_TRUE(p.possible);
    EXPECT_TRUE(p.exclude.empty());
  }
}

TEST(AgreeNcclReuse, OneRankUnableMeansAFreshWorldOnEveryRank) {
  std::vector<NcclReusePlan> plans = Plans(4, {2, 5});
  plans[3].possible = false;  // say, it no longer holds the old world
  for (const NcclReusePlan& p : Agree(plans, 6)) {
    EXPECT_FALSE(p.possible);
    EXPECT_TRUE(p.exclude.empty());
  }
}

TEST(AgreeNcclReuse, AMalformedOrInconsistentListMeansAFreshWorld) {
  // Rank 0's list is shorter than the count, not ascending, out of the old world; or the ranks
  // were told different counts.
  std::vector<std::vector<NcclReusePlan>> cases;
  cases.push_back(Plans(3, {1, 2}));
  cases.back()[0].exclude = {1};
  cases.push_back(Plans(3, {2, 1}));
  cases.push_back(Plans(3, {1, 9}));
  cases.push_back(Plans(3, {-1, 2}));
  cases.push_back(Plans(3, {1, 2}));
  cases.back()[2].excluded = 3;
  for (size_t c = 0; c < cases.size(); ++c) {
    for (const NcclReusePlan& p : Agree(cases[c], 5)) {
      EXPECT_FALSE(p.possible) << "case " << c;
      EXPECT_TRUE(p.exclude.empty()) << "case " << c;
    }
  }
}

}  // namespace
}  // namespace elastra
