// Tests of the reshard executor's pure phases (state/reshard_schedule.h): tensor groups, each
// worker's transfers by group and peer, regions, transfer geometry, the split into staged and
// direct messages, and the pairwise rounds. No communicator: what the two sides of a pair derive
// must agree, which is checked here on the plans alone.
#include "state/reshard_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "elastra/sharding.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

TensorSpec Tensor(const std::string& name, std::vector<int64_t> shape, size_t element_size,
                  ShardingRule rule = {}) {
  return TensorSpec{name, std::move(shape), element_size, rule};
}

// Full sizes 40, 30, 50, 200 and 10 bytes.
StateSpec FiveTensors() {
  StateSpec state;
  state.tensors = {Tensor("a", {10}, 4), Tensor("b", {3, 5}, 2), Tensor("c", {50}, 1),
                   Tensor("d", {5, 5}, 8), Tensor("e", {10}, 1)};
  return state;
}

TEST(ReshardSchedule, GroupsFillUpToGroupBytesAndALargeTensorStandsAlone) {
  const StateSpec state = FiveTensors();
  const Layout one{1, 1, 1};  // every shard is the whole tensor
  // 40 + 30 fit in 100, + 50 does not; 200 is alone; 10 after it starts a new group.
  EXPECT_EQ(GroupTensors(state, one, 100), (std::vector<size_t>{0, 2, 3, 4, 5}));
  EXPECT_EQ(GroupTensors(state, one, 120), (std::vector<size_t>{0, 3, 4, 5}));
  EXPECT_EQ(GroupTensors(state, one, 1 << 20), (std::vector<size_t>{0, 5}));
  EXPECT_EQ(GroupTensors(state, one, 0), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(GroupTensors(StateSpec{}, one, 100), (std::vector<size_t>{0, 0}));
}

// Groups bound what one worker allocates, not the whole tensors: cut over TP and ZeRO, more
// tensors fit in a group.
TEST(ReshardSchedule, GroupsCountTheLargestShardOfTheNewLayout) {
  StateSpec state;
  state.tensors = {Tensor("w", {4, 8}, 4, {1, -1, false}),   // 128 bytes, 64 at tp 2
                   Tensor("m", {4, 8}, 4, {1, -1, true}),    // 32 at tp 2 x dp 2
                   Tensor("b", {5}, 4, {0, -1, false}),      // 3 of 5 elements at tp 2
                   Tensor("r", {3, 3}, 8, {-1, -1, true})};  // 5 of 9 elements at dp 2
  const Layout to{2, 1, 2};
  EXPECT_EQ(LargestShardBytes(state.tensors[0], to), 64);
  EXPECT_EQ(LargestShardBytes(state.tensors[1], to), 32);
  EXPECT_EQ(LargestShardBytes(state.tensors[2], to), 12);
  EXPECT_EQ(LargestShardBytes(state.tensors[3], to), 40);
  EXPECT_EQ(GroupTensors(state, to, 108), (std::vector<size_t>{0, 3, 4}));
  EXPECT_EQ(GroupTensors(state, Layout{1, 1, 1}, 108), (std::vector<size_t>{0, 1, 2, 4}));
  // Two layers' tensors on two stages: each stage holds one of them, so both fit in one group.
  StateSpec layers;
  layers.num_layers = 2;
  layers.tensors = {Tensor("l0", {10}, 4, {-1, 0, false}), Tensor("l1", {10}, 4, {-1, 1, false})};
  EXPECT_EQ(GroupTensors(layers, Layout{1, 2, 1}, 40), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(GroupTensors(layers, Layout{1, 1, 1}, 40), (std::vector<size_t>{0, 1, 2}));
}

// What a group bounds: the new shards one rank allocates for it, pipeline stages counted apart.
TEST(ReshardSchedule, NoRankAllocatesMoreThanGroupBytesForAGroupOfSeveralTensors) {
  const StateSpec state = GptState({8, 16, 40, 30, 8, 2, true, true});
  int several = 0;
  for (const Layout& l :
       {Layout{1, 1, 1}, Layout{2, 2, 2}, Layout{1, 4, 2}, Layout{4, 1, 1}, Layout{1, 8, 1}}) {
    for (int64_t group_bytes : {int64_t{1000}, int64_t{6000}, int64_t{40000}}) {
      const std::vector<size_t> bounds = GroupTensors(state, l, group_bytes);
      for (size_t g = 0; g + 1 < bounds.size(); ++g) {
        if (bounds[g + 1] - bounds[g] < 2) continue;
        ++several;
        for (int r = 0; r < l.world(); ++r) {
          int64_t bytes = 0;
          for (size_t i = bounds[g]; i < bounds[g + 1]; ++i) {
            const TensorSpec& t = state.tensors[i];
            bytes += LocalRegion(t, state.num_layers, l, CoordinatesOf(l, r)).elements() *
                     static_cast<int64_t>(t.element_size);
          }
          EXPECT_LE(bytes, group_bytes) << l.ToString() << " rank " << r << " group " << g;
        }
      }
    }
  }
  EXPECT_GT(several, 0);
}

// LargestShardBytes is the largest region LocalRegion gives any rank.
TEST(ReshardSchedule, LargestShardBytesIsTheLargestRegionOfAnyRank) {
  const StateSpec state = GptState({4, 16, 40, 30, 8, 2, true, true});
  for (const Layout& l :
       {Layout{1, 1, 1}, Layout{3, 1, 1}, Layout{2, 2, 3}, Layout{1, 4, 5}, Layout{7, 1, 2}}) {
    for (const TensorSpec& t : state.tensors) {
      int64_t largest = 0;
      for (int r = 0; r < l.world(); ++r) {
        const Region region = LocalRegion(t, state.num_layers, l, CoordinatesOf(l, r));
        largest = std::max<int64_t>(largest, region.elements() * t.element_size);
      }
      EXPECT_EQ(LargestShardBytes(t, l), largest) << t.name << " in " << l.ToString();
    }
  }
}

TEST(ReshardSchedule, EveryGroupStaysWithinGroupBytesUnlessItIsOneTensor) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    StateSpec state;
    const int count = 1 + rng() % 12;
    for (int i = 0; i < count; ++i) {
      state.tensors.push_back(
          Tensor("t" + std::to_string(i), {1 + static_cast<int64_t>(rng() % 40)}, 1 + rng() % 8));
    }
    const int64_t group_bytes = rng() % 300;
    const Layout to{1, 1, 1};
    const std::vector<size_t> bounds = GroupTensors(state, to, group_bytes);
    ASSERT_GE(bounds.size(), 2u);
    EXPECT_EQ(bounds.front(), 0u);
    EXPECT_EQ(bounds.back(), state.tensors.size());
    for (size_t g = 0; g + 1 < bounds.size(); ++g) {
      ASSERT_LT(bounds[g], bounds[g + 1]) << "empty group " << g;
      int64_t bytes = 0;
      for (size_t i = bounds[g]; i < bounds[g + 1]; ++i) {
        bytes += FullRect(state.tensors[i].shape).volume() * state.tensors[i].element_size;
      }
      if (bounds[g + 1] - bounds[g] > 1) {
        EXPECT_LE(bytes, group_bytes) << "group " << g;
      }
      // Greedy: the next tensor would not have fitted.
      if (g + 2 < bounds.size()) {
        const TensorSpec& next = state.tensors[bounds[g + 1]];
        EXPECT_GT(bytes + FullRect(next.shape).volume() * next.element_size, group_bytes);
      }
    }
  }
}

// A GPT state through changes that move every dimension, the workers shuffled and the replicas
// split finely, so that plans have many transfers per pair, copies and adjacent rectangles.
std::vector<ReshardPlan> SomePlans() {
  const StateSpec state = GptState({4, 16, 40, 30, 8, 2, true, true});
  const std::vector<Layout> seq{{2, 1, 2}, {1, 2, 2}, {4, 1, 1}, {1, 2, 4}, {2, 2, 2}, {8, 1, 1}};
  std::mt19937 rng(5);
  std::vector<ReshardPlan> plans;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    const int n = 8;
    auto placement = [&](const Layout& l) {
      std::vector<int> workers(n);
      std::iota(workers.begin(), workers.end(), 0);
      std::shuffle(workers.begin(), workers.end(), rng);
      workers.resize(l.world());
      return Placement{l, workers};
    };
    std::vector<int> hosts(n);
    for (int w = 0; w < n; ++w) hosts[w] = w / 4;
    ReshardPlanOptions options;
    options.split_bytes = 64;
    auto plan = BuildReshardPlan(state, placement(seq[i]), placement(seq[i + 1]), hosts, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (plan.ok()) plans.push_back(std::move(plan).value());
  }
  return plans;
}

TEST(ReshardSchedule, WorkerGroupsHoldEachOfTheWorkersTransfersOnceInPlanOrder) {
  for (const ReshardPlan& plan : SomePlans()) {
    const int n = static_cast<int>(plan.host_of_worker.size());
    const int64_t group_bytes = 4096;
    const std::vector<size_t> bounds = GroupTensors(plan.state, plan.to.layout, group_bytes);
    for (int w = 0; w < n; ++w) {
      const std::vector<GroupWork> groups = WorkerGroups(plan, w, group_bytes);
      ASSERT_EQ(groups.size() + 1, bounds.size());
      std::vector<const Transfer*> sent, received, copied;
      for (size_t g = 0; g < groups.size(); ++g) {
        EXPECT_EQ(groups[g].index, g);
        EXPECT_EQ(groups[g].tensor_begin, bounds[g]);
        EXPECT_EQ(groups[g].tensor_end, bounds[g + 1]);
        auto in_group = [&](const Transfer* t) {
          return static_cast<size_t>(t->tensor) >= bounds[g] &&
                 static_cast<size_t>(t->tensor) < bounds[g + 1];
        };
        for (const auto& [peer, list] : groups[g].sends) {
          for (const Transfer* t : list) {
            EXPECT_TRUE(in_group(t));
            EXPECT_EQ(t->src, w);
            EXPECT_EQ(t->dst, peer);
            sent.push_back(t);
          }
        }
        for (const auto& [peer, list] : groups[g].recvs) {
          for (const Transfer* t : list) {
            EXPECT_TRUE(in_group(t));
            EXPECT_EQ(t->dst, w);
            EXPECT_EQ(t->src, peer);
            received.push_back(t);
          }
        }
        for (const Transfer* t : groups[g].copies) {
          EXPECT_TRUE(in_group(t));
          copied.push_back(t);
        }
      }
      // Every transfer of the worker once; within a peer's list, plan order.
      std::vector<const Transfer*> want_sent, want_received, want_copied;
      for (const Transfer& t : plan.transfers) {
        if (t.src == w) want_sent.push_back(&t);
        if (t.dst == w) want_received.push_back(&t);
      }
      for (const Transfer& t : plan.copies) {
        if (t.dst == w) want_copied.push_back(&t);
      }
      EXPECT_EQ(copied, want_copied);
      std::sort(sent.begin(), sent.end());
      std::sort(received.begin(), received.end());
      EXPECT_EQ(sent, want_sent);
      EXPECT_EQ(received, want_received);
      for (const GroupWork& group : groups) {
        for (const auto* lists : {&group.sends, &group.recvs}) {
          for (const auto& [peer, list] : *lists) {
            EXPECT_TRUE(std::is_sorted(list.begin(), list.end())) << "peer " << peer;
          }
        }
      }
    }
  }
}

// What w sends to v in group g is exactly what v expects from w, in the same order.
TEST(ReshardSchedule, BothSidesOfAPairListTheSameTransfers) {
  for (const ReshardPlan& plan : SomePlans()) {
    const int n = static_cast<int>(plan.host_of_worker.size());
    std::vector<std::vector<GroupWork>> groups(n);
    for (int w = 0; w < n; ++w) groups[w] = WorkerGroups(plan, w, 2048);
    for (int w = 0; w < n; ++w) {
      for (size_t g = 0; g < groups[w].size(); ++g) {
        for (const auto& [v, list] : groups[w][g].sends) {
          auto it = groups[v][g].recvs.find(w);
          ASSERT_NE(it, groups[v][g].recvs.end()) << w << " -> " << v << " group " << g;
          EXPECT_EQ(it->second, list);
        }
      }
    }
  }
}

TEST(ReshardSchedule, RegionsOfAWorkerThatStaysPutAreTheSame) {
  StateSpec state;
  state.tensors = {Tensor("w", {4, 6}, 4, {1, -1, false}), Tensor("b", {6}, 4)};
  const Layout tp2{1, 1, 2};
  // Worker 1 keeps tp rank 1; worker 0 leaves and worker 2 takes tp rank 0.
  auto plan = BuildReshardPlan(state, {tp2, {0, 1}}, {tp2, {2, 1}}, {0, 0, 0});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const WorkerRegions stays = RegionsOfWorker(*plan, 1);
  EXPECT_EQ(stays.same, (std::vector<char>{1, 1}));
  EXPECT_EQ(stays.old_region[0].box, (Rect{0, 4, 3, 6}));
  const WorkerRegions leaves = RegionsOfWorker(*plan, 0);
  EXPECT_EQ(leaves.same, (std::vector<char>{0, 0}));
  EXPECT_FALSE(leaves.old_region[0].empty());
  EXPECT_TRUE(leaves.new_region[0].empty());
  const WorkerRegions joins = RegionsOfWorker(*plan, 2);
  EXPECT_EQ(joins.same, (std::vector<char>{0, 0}));
  EXPECT_TRUE(joins.old_region[0].empty());
  EXPECT_EQ(joins.new_region[0].box, (Rect{0, 4, 0, 3}));
}

// Whether the bytes of `r` are one run in `region`'s buffer, element by element.
bool ConsecutiveIn(const Rect& r, const Region& region) {
  int64_t expect = region.LocalOffset(r.row_begin, r.col_begin);
  for (int64_t row = r.row_begin; row < r.row_end; ++row) {
    for (int64_t col = r.col_begin; col < r.col_end; ++col) {
      if (region.LocalOffset(row, col) != expect++) return false;
    }
  }
  return true;
}

Region RegionOf(const ReshardPlan& plan, const Placement& p, int worker, int tensor) {
  return LocalRegion(plan.state.tensors[tensor], plan.state.num_layers, p.layout,
                     CoordinatesOf(p.layout, p.RankOfWorker(worker)));
}

TEST(ReshardSchedule, GeometryMatchesTheRegionsElementByElement) {
  int contiguous = 0, strided = 0;
  for (const ReshardPlan& plan : SomePlans()) {
    const int n = static_cast<int>(plan.host_of_worker.size());
    for (int w = 0; w < n; ++w) {
      const std::vector<TransferGeometry> geometry = TransferGeometries(plan, w);
      ASSERT_EQ(geometry.size(), plan.transfers.size());
      for (size_t i = 0; i < plan.transfers.size(); ++i) {
        const Transfer& t = plan.transfers[i];
        if (t.src != w && t.dst != w) continue;
        const Region from = RegionOf(plan, plan.from, t.src, t.tensor);
        const Region to = RegionOf(plan, plan.to, t.dst, t.tensor);
        const int64_t esize = plan.state.tensors[t.tensor].element_size;
        const bool both = ConsecutiveIn(t.rect, from) && ConsecutiveIn(t.rect, to);
        EXPECT_EQ(geometry[i].src_contiguous, ConsecutiveIn(t.rect, from)) << "transfer " << i;
        EXPECT_EQ(geometry[i].dst_contiguous, ConsecutiveIn(t.rect, to)) << "transfer " << i;
        EXPECT_EQ(geometry[i].both_contiguous, both) << "transfer " << i;
        EXPECT_EQ(geometry[i].src_offset,
                  from.LocalOffset(t.rect.row_begin, t.rect.col_begin) * esize);
        EXPECT_EQ(geometry[i].dst_offset,
                  to.LocalOffset(t.rect.row_begin, t.rect.col_begin) * esize);
        (both ? contiguous : strided) += 1;
      }
    }
  }
  EXPECT_GT(contiguous, 0);
  EXPECT_GT(strided, 0);
}

// Two row bands of one row-split tensor, next to each other in both shards: one direct run when
// they are large enough together, else both staged.
TEST(ReshardSchedule, AdjacentContiguousTransfersMergeIntoOneDirectRun) {
  StateSpec state;
  state.tensors = {Tensor("w", {4, 8}, 4, {0, -1, false})};
  ReshardPlan plan;
  plan.state = state;
  plan.from = {{1, 1, 2}, {0, 1}};  // worker 1 holds rows 2..3
  plan.to = {{1, 1, 1}, {0}};       // worker 0 holds everything
  plan.host_of_worker = {0, 0};
  plan.transfers = {{0, 1, 0, Rect{2, 3, 0, 8}, 32}, {0, 1, 0, Rect{3, 4, 0, 8}, 32}};
  const std::vector<const Transfer*> list{&plan.transfers[0], &plan.transfers[1]};

  const std::vector<TransferGeometry> geometry = TransferGeometries(plan, 0);
  EXPECT_TRUE(geometry[0].both_contiguous);
  EXPECT_EQ(geometry[0].src_offset, 0);
  EXPECT_EQ(geometry[0].dst_offset, 64);
  EXPECT_EQ(geometry[1].src_offset, 32);
  EXPECT_EQ(geometry[1].dst_offset, 96);

  const PeerMessages send = LayoutPeerMessages(plan, geometry, list, /*sending=*/true, 64);
  EXPECT_TRUE(send.staged.empty());
  EXPECT_EQ(send.staged_bytes, 0);
  ASSERT_EQ(send.runs.size(), 1u);
  EXPECT_EQ(send.runs[0].tensor, 0);
  EXPECT_EQ(send.runs[0].offset, 0);  // in the sender's shard
  EXPECT_EQ(send.runs[0].bytes, 64);
  const PeerMessages recv = LayoutPeerMessages(plan, geometry, list, /*sending=*/false, 64);
  ASSERT_EQ(recv.runs.size(), 1u);
  EXPECT_EQ(recv.runs[0].offset, 64);  // in the receiver's shard
  EXPECT_EQ(recv.runs[0].bytes, 64);

  const PeerMessages small = LayoutPeerMessages(plan, geometry, list, /*sending=*/true, 65);
  EXPECT_TRUE(small.runs.empty());
  EXPECT_EQ(small.staged, list);
  EXPECT_EQ(small.staged_bytes, 64);
}

// A column band of a column-split tensor is the sender's whole shard but strided in the
// receiver's (the whole tensor): a message of its own, straight from the sender's shard, unpacked
// from a staging buffer by the receiver.
TEST(ReshardSchedule, ATransferContiguousOnOneSideGoesDirectOnThatSideOnly) {
  StateSpec state;
  state.tensors = {Tensor("w", {4, 8}, 4, {1, -1, false})};
  ReshardPlan plan;
  plan.state = state;
  plan.from = {{1, 1, 2}, {0, 1}};  // worker 1 holds columns 4..7
  plan.to = {{1, 1, 1}, {0}};
  plan.host_of_worker = {0, 0};
  plan.transfers = {{0, 1, 0, Rect{0, 4, 4, 8}, 64}};
  const std::vector<const Transfer*> list{&plan.transfers[0]};
  const std::vector<TransferGeometry> at_sender = TransferGeometries(plan, 1);
  EXPECT_TRUE(at_sender[0].src_contiguous);
  EXPECT_FALSE(at_sender[0].dst_contiguous);
  EXPECT_FALSE(at_sender[0].both_contiguous);
  EXPECT_EQ(at_sender[0].dst_offset, 16);
  const PeerMessages out = LayoutPeerMessages(plan, at_sender, list, /*sending=*/true, 64);
  EXPECT_TRUE(out.staged.empty());
  ASSERT_EQ(out.runs.size(), 1u);
  EXPECT_TRUE(out.runs[0].direct);
  EXPECT_EQ(out.runs[0].offset, 0);
  EXPECT_EQ(out.runs[0].bytes, 64);
  const PeerMessages in =
      LayoutPeerMessages(plan, TransferGeometries(plan, 0), list, /*sending=*/false, 64);
  EXPECT_TRUE(in.staged.empty());
  ASSERT_EQ(in.runs.size(), 1u);
  EXPECT_FALSE(in.runs[0].direct) << "strided in the receiver's shard: unpacked";
  EXPECT_EQ(in.runs[0].transfers, list);
  EXPECT_EQ(in.runs[0].bytes, 64);
  // Below the threshold it joins the staged stream on both sides.
  const PeerMessages small = LayoutPeerMessages(plan, at_sender, list, /*sending=*/true, 65);
  EXPECT_TRUE(small.runs.empty());
  EXPECT_EQ(small.staged_bytes, 64);
}

// Column 2 of a [4, 6] tensor from TP 2 (columns 0..2) to TP 3 (columns 2..3): strided in both
// shards, so staged whatever its size.
TEST(ReshardSchedule, ATransferStridedOnBothSidesIsStagedWhateverItsSize) {
  StateSpec state;
  state.tensors = {Tensor("w", {4, 6}, 4, {1, -1, false})};
  ReshardPlan plan;
  plan.state = state;
  plan.from = {{1, 1, 2}, {0, 1}};
  plan.to = {{1, 1, 3}, {2, 3, 4}};
  plan.host_of_worker = {0, 0, 0, 0, 0};
  plan.transfers = {{0, 0, 3, Rect{0, 4, 2, 3}, 16}};
  const std::vector<TransferGeometry> geometry = TransferGeometries(plan, 0);
  EXPECT_FALSE(geometry[0].src_contiguous);
  EXPECT_FALSE(geometry[0].dst_contiguous);
  const PeerMessages m =
      LayoutPeerMessages(plan, geometry, {&plan.transfers[0]}, /*sending=*/true, 0);
  EXPECT_TRUE(m.runs.empty());
  EXPECT_EQ(m.staged.size(), 1u);
  EXPECT_EQ(m.staged_bytes, 16);
}

// The sender and the receiver of a pair cut the same transfers into the same messages: the
// staged stream of the same size, the same runs in the same order. Nothing else tells
// them apart on the wire.
TEST(ReshardSchedule, SenderAndReceiverLayOutTheSameMessages) {
  int direct = 0, staged = 0;
  for (const ReshardPlan& plan : SomePlans()) {
    const int n = static_cast<int>(plan.host_of_worker.size());
    std::vector<std::vector<GroupWork>> groups(n);
    std::vector<std::vector<TransferGeometry>> geometry(n);
    for (int w = 0; w < n; ++w) {
      groups[w] = WorkerGroups(plan, w, 4096);
      geometry[w] = TransferGeometries(plan, w);
    }
    for (int64_t direct_min : {int64_t{0}, int64_t{40}, int64_t{200}, int64_t{1} << 40}) {
      for (int w = 0; w < n; ++w) {
        for (size_t g = 0; g < groups[w].size(); ++g) {
          for (const auto& [v, list] : groups[w][g].sends) {
            const PeerMessages out = LayoutPeerMessages(plan, geometry[w], list, true, direct_min);
            const PeerMessages in =
                LayoutPeerMessages(plan, geometry[v], groups[v][g].recvs.at(w), false, direct_min);
            EXPECT_EQ(out.staged, in.staged);
            EXPECT_EQ(out.staged_bytes, in.staged_bytes);
            ASSERT_EQ(out.runs.size(), in.runs.size());
            int64_t total = out.staged_bytes;
            for (size_t k = 0; k < out.runs.size(); ++k) {
              EXPECT_EQ(out.runs[k].tensor, in.runs[k].tensor);
              EXPECT_EQ(out.runs[k].bytes, in.runs[k].bytes);
              EXPECT_EQ(out.runs[k].transfers, in.runs[k].transfers);
              EXPECT_GE(out.runs[k].bytes, direct_min);
              total += out.runs[k].bytes;
            }
            int64_t want = 0;
            for (const Transfer* t : list) want += t->bytes;
            EXPECT_EQ(total, want);
            direct += static_cast<int>(out.runs.size());
            staged += static_cast<int>(out.staged.size());
          }
        }
      }
    }
  }
  EXPECT_GT(direct, 0);
  EXPECT_GT(staged, 0);
}

// Round k pairs w with w XOR k, which pairs back with w in the same round: each worker meets every
// other worker once, in increasing k, so two workers reach each other at the same point.
TEST(ReshardSchedule, PairwisePartnersMeetEveryWorkerOnceInRoundOrder) {
  for (int n : {1, 2, 3, 5, 8, 13}) {
    for (int w = 0; w < n; ++w) {
      const std::vector<int> partners = PairwisePartners(w, n);
      std::set<int> seen(partners.begin(), partners.end());
      EXPECT_EQ(seen.size(), partners.size());
      EXPECT_EQ(static_cast<int>(seen.size()), n - 1) << "n " << n << " worker " << w;
      EXPECT_EQ(seen.count(w), 0u);
      for (size_t i = 1; i < partners.size(); ++i) {
        EXPECT_LT(w ^ partners[i - 1], w ^ partners[i]) << "n " << n << " worker " << w;
      }
    }
  }
  EXPECT_EQ(PairwisePartners(2, 5), (std::vector<int>{3, 0, 1, 4}));  // k = 1, 2, 3, 6
}

TEST(ReshardSchedule, EachPartOfASplitTransferComesFromTheLeastLoadedReplica) {
  // One replicated tensor held by 6 workers, each on its own host, grown to dp=9: the 3 new
  // workers each take it in parts from the 6 replicas. Every part must come from the replica that
  // has sent the least so far, the first in the old rank order among equals.
  StateSpec state;
  state.num_layers = 1;
  state.tensors.push_back(Tensor("w", {96, 8}, 4, ShardingRule{-1, -1, false}));
  state.tensors.push_back(Tensor("b", {40}, 4, ShardingRule{-1, -1, false}));
  const int n = 9;
  std::vector<int> hosts(n);
  std::iota(hosts.begin(), hosts.end(), 0);
  // Old rank r on worker 5 - r: the pool order (old ranks) differs from worker ids.
  const Placement from{Layout{6, 1, 1}, {5, 4, 3, 2, 1, 0}};
  const Placement to{Layout{9, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7, 8}};
  ReshardPlanOptions options;
  options.split_bytes = 100;
  auto plan = BuildReshardPlan(state, from, to, hosts, options);
  ASSERT_TRUE(plan.ok()) << plan.status();
  std::vector<int64_t> sent(n, 0);
  int split = 0;
  for (const Transfer& t : plan->transfers) {
    int best = -1;
    for (int w : from.worker_of_rank) {
      if (best < 0 || sent[w] < sent[best]) best = w;
    }
    EXPECT_EQ(t.src, best) << "tensor " << t.tensor << " to worker " << t.dst;
    sent[t.src] += t.bytes;
    ++split;
  }
  EXPECT_GT(split, 3 * 2);  // the tensors were split into parts
  const auto [lo, hi] = std::minmax_element(sent.begin(), sent.begin() + 6);
  EXPECT_LE(*hi - *lo, 96 * 8 * 4 / 6 + 4 * 8);  // balanced within about one part
}

}  // namespace
}  // namespace elastra
