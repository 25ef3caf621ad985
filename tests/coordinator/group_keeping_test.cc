// PlanKeptGroups (coordinator/group_keeping.h): which groups of a new generation are the
// committed generation's, from the layouts, the members and what each member reported.
#include "coordinator/group_keeping.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace elastra::coordinator {
namespace {

constexpr uint8_t kDp = 1 << proto::kDpGroup, kPp = 1 << proto::kPpGroup,
                  kTp = 1 << proto::kTpGroup;

std::vector<std::string> Ids(int n, const std::string& prefix = "w") {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) ids.push_back(prefix + std::to_string(i));
  return ids;
}

// Every worker reports each of its groups intact, built in `generation`, 7 collectives done.
class Reports {
 public:
  explicit Reports(uint64_t generation) : generation_(generation) {}
  proto::GroupHealth& At(const std::string& id, uint8_t kind) {
    auto [it, added] = reports_.try_emplace({id, kind});
    if (added) {
      it->second.kind = kind;
      it->second.generation = generation_;
      it->second.intact = true;
      it->second.calls = 7;
    }
    return it->second;
  }
  GroupHealthOf Of() {
    return [this](const std::string& id, size_t, uint8_t kind) { return &At(id, kind); };
  }

 private:
  uint64_t generation_;
  std::map<std::tuple<std::string, uint8_t>, proto::GroupHealth> reports_;
};

TEST(GroupKeepingTest, CommunicatorsCountTheWorldAndEveryGroupOfMoreThanOneRank) {
  EXPECT_EQ(CommunicatorsOf(Layout{4, 1, 1}), 1) << "every group is the world";
  EXPECT_EQ(CommunicatorsOf(Layout{2, 1, 2}), 5) << "world, 2 dp and 2 tp groups";
  EXPECT_EQ(CommunicatorsOf(Layout{2, 2, 2}), 13);
  EXPECT_EQ(CommunicatorsOf(Layout{1, 1, 1}), 1);
}

TEST(GroupKeepingTest, AStandbyInTheLostRanksPlaceRebuildsItsThreeGroupsAndTheWorld) {
  const Layout layout{2, 2, 2};
  const std::vector<std::string> old_members = Ids(8);
  std::vector<std::string> members = old_members;
  members[7] = "spare";  // rank 7: dp 1, pp 1, tp 1
  Reports reports(3);
  const KeptGroups kept =
      PlanKeptGroups(layout, old_members, 3, layout, members, reports.Of(), true);
  EXPECT_EQ(kept.rebuilt, 4) << "rank 7's dp, pp and tp groups and the world";
  EXPECT_EQ(kept.kept, 9);
  ASSERT_EQ(kept.keep.size(), 8u);
  EXPECT_EQ(kept.keep[7], 0) << "the spare keeps nothing";
  EXPECT_EQ(kept.keep[6], kDp | kPp) << "its tp group {6, 7} changed";
  EXPECT_EQ(kept.keep[5], kDp | kTp) << "its pp group {5, 7} changed";
  EXPECT_EQ(kept.keep[3], kPp | kTp) << "its dp group {3, 7} changed";
  EXPECT_EQ(kept.keep[0], kDp | kPp | kTp);
}

TEST(GroupKeepingTest, AGroupIsRebuiltWhenOneMemberWasInsideACall) {
  const Layout layout{2, 1, 2};
  const std::vector<std::string> old_members = Ids(4);
  std::vector<std::string> members = old_members;
  members[3] = "spare";
  Reports reports(3);
  reports.At("w0", proto::kTpGroup).intact = false;  // interrupted inside a tp collective
  const KeptGroups kept =
      PlanKeptGroups(layout, old_members, 3, layout, members, reports.Of(), true);
  EXPECT_EQ(kept.keep[0], kDp) << "tp group {0, 1} was not quiet";
  EXPECT_EQ(kept.keep[1], 0);
  EXPECT_EQ(kept.keep[2], kDp);
  EXPECT_EQ(kept.kept, 1);
  EXPECT_EQ(kept.rebuilt, 4);
}

TEST(GroupKeepingTest, CollectivesCountedDifferentlyOrMessagesInFlightRebuildTheGroup) {
  const Layout layout{2, 2, 1};  // pp groups {0, 1} and {2, 3}, dp groups {0, 2} and {1, 3}
  const std::vector<std::string> members = Ids(4);
  {
    Reports reports(3);
    reports.At("w2", proto::kDpGroup).calls = 8;  // w2 finished a collective w0 never entered
    const KeptGroups kept = PlanKeptGroups(layout, members, 3, layout, members, reports.Of(), true);
    EXPECT_EQ(kept.keep[0], kPp);
    EXPECT_EQ(kept.keep[1], kDp | kPp);
  }
  {
    // Stage 0 sent two activations to stage 1, which received both: balanced, kept. In the other
    // replica stage 1 received only one of two: a message is in flight.
    Reports reports(3);
    auto sent = [&](const std::string& from, const std::string& to, int64_t n, int64_t got) {
      proto::GroupHealth& s = reports.At(from, proto::kPpGroup);
      s.peers = {1};
      s.sent = {n};
      s.received = {0};
      proto::GroupHealth& r = reports.At(to, proto::kPpGroup);
      r.peers = {0};
      r.sent = {0};
      r.received = {got};
    };
    sent("w0", "w1", 2, 2);
    sent("w2", "w3", 2, 1);
    const KeptGroups kept = PlanKeptGroups(layout, members, 3, layout, members, reports.Of(), true);
    EXPECT_EQ(kept.keep[0], kDp | kPp);
    EXPECT_EQ(kept.keep[2], kDp) << "a message of pp group {2, 3} is in flight";
  }
}

TEST(GroupKeepingTest, NothingIsKeptAcrossGenerationsOrOrdersOrWhenDisabled) {
  const Layout layout{2, 1, 2};
  const std::vector<std::string> members = Ids(4);
  Reports reports(3);
  EXPECT_EQ(PlanKeptGroups(layout, members, 3, layout, members, reports.Of(), true).kept, 4);
  EXPECT_EQ(PlanKeptGroups(layout, members, 3, layout, members, reports.Of(), false).kept, 0)
      << "disabled";
  EXPECT_EQ(PlanKeptGroups(layout, members, 4, layout, members, reports.Of(), true).kept, 0)
      << "the groups were built in generation 3, not the committed 4";
  std::vector<std::string> swapped = members;
  std::swap(swapped[0], swapped[1]);  // tp group {0, 1} in the other order
  const KeptGroups kept = PlanKeptGroups(layout, members, 3, layout, swapped, reports.Of(), true);
  EXPECT_EQ(kept.keep[0], 0) << "w1 is now rank 0: its dp group {w1, w2} is new";
  EXPECT_EQ(kept.keep[3], kTp) << "w2 and w3's tp group is unchanged; dp {w0, w3} is new";
  EXPECT_EQ(kept.kept, 1);
  // Another layout of the same workers: every group is new.
  EXPECT_EQ(PlanKeptGroups(layout, members, 3, Layout{1, 1, 4}, members, reports.Of(), true).kept,
            0);
}

}  // namespace
}  // namespace elastra::coordinator
