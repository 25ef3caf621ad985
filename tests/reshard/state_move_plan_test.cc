// The state move addressed per worker (state/plan/state_move_plan.h): for several layout changes,
// each worker's plan rebuilt from the NewGeneration addressed to it (sparse tables, its transfers)
// gives the executor exactly what the whole plan from the full tables gives it: the same copies,
// the same transfers per peer in the same order, the same regions, geometries and messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "protocol/codec.h"
#include "state/plan/state_move_plan.h"
#include "state/reshard_schedule.h"

namespace elastra {
namespace {

struct Change {
  std::string name;
  StateSpec state;
  Layout from, to;
  std::vector<std::string> prev;     // by old rank
  std::vector<bool> prev_has_state;  // by old rank
  std::vector<std::string> members;  // by new rank
};

std::vector<proto::Member> Table(const Layout& layout, const std::vector<std::string>& ids,
                                 const std::vector<bool>& has_state) {
  std::vector<proto::Member> out;
  for (size_t r = 0; r < ids.size(); ++r) {
    proto::Member m;
    m.worker_id = ids[r];
    m.host = "h" + std::string(1, ids[r].back());  // workers ending in the same letter share one
    m.coords = CoordinatesOf(layout, static_cast<int>(r));
    m.has_state = r < has_state.size() && has_state[r];
    out.push_back(m);
  }
  return out;
}

std::vector<std::string> Ids(const std::string& prefix, int n, int first = 0) {
  std::vector<std::string> ids;
  for (int i = first; i < first + n; ++i) {
    ids.push_back(prefix + std::to_string(i) + static_cast<char>('a' + i / 4));
  }
  return ids;
}

StateSpec Mixed(bool zero = true) {
  GptConfig g;
  g.layers = 4;
  g.hidden = 16;
  g.ffn_hidden = 24;
  g.vocab = 40;
  g.seq_len = 8;
  g.zero = zero;
  return GptState(g);
}

StateSpec Replicated() {
  StateSpec s;
  s.tensors = {TensorSpec{"w", {64, 64}, 4, {}}, TensorSpec{"b", {64}, 4, {}},
               TensorSpec{"m", {48, 32}, 2, {-1, -1, true}}};
  return s;
}

std::vector<Change> Changes() {
  std::vector<Change> out;
  auto all = [](size_t n) { return std::vector<bool>(n, true); };
  {  // the first generation: rank 0's state goes to everyone
    Change c{"start", Mixed(), Layout{1, 1, 1}, {}, {"w0a"}, {true}, {}};
    c.to = Layout{2, 2, 2};
    c.members = Ids("w", 8);
    out.push_back(c);
  }
  {  // grow dp by a host of joiners
    Change c{"grow", Replicated(), Layout{4, 1, 1}, {}, Ids("w", 4), all(4), {}};
    c.to = Layout{8, 1, 1};
    c.members = Ids("w", 4);
    for (const auto& id : Ids("j", 4, 4)) c.members.push_back(id);
    out.push_back(c);
  }
  {  // shrink dp: ZeRO shards of the leavers must be handed off
    Change c{"shrink", Replicated(), Layout{8, 1, 1}, {}, Ids("w", 8), all(8), Ids("w", 4)};
    c.to = Layout{4, 1, 1};
    out.push_back(c);
  }
  {  // a 3-D layout change with a new rank order
    Change c{"relayout", Mixed(), Layout{2, 2, 2}, {}, Ids("w", 8), all(8), {}};
    c.to = Layout{1, 2, 4};
    c.members = {"w7b", "w1a", "w2a", "w3a", "w4b", "w5b", "w6b", "w0a"};
    out.push_back(c);
  }
  {  // a failure: one rank lost, the survivors and a joiner rebuild from the replicas
    Change c{"failure", Mixed(/*zero=*/false), Layout{2, 2, 2}, {}, Ids("w", 8), all(8), {}};
    c.prev_has_state[5] = false;
    c.to = Layout{2, 2, 2};
    c.members = {"w0a", "w1a", "w2a", "w3a", "w4b", "j8c", "w6b", "w7b"};
    out.push_back(c);
  }
  return out;
}

void ExpectSameTransfers(const std::vector<const Transfer*>& a,
                         const std::vector<const Transfer*>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]->tensor, b[i]->tensor) << what;
    EXPECT_EQ(a[i]->src, b[i]->src) << what;
    EXPECT_EQ(a[i]->dst, b[i]->dst) << what;
    EXPECT_EQ(a[i]->rect, b[i]->rect) << what;
    EXPECT_EQ(a[i]->bytes, b[i]->bytes) << what;
  }
}

void ExpectSameMessages(const ReshardPlan& full, const std::vector<TransferGeometry>& fg,
                        const std::vector<const Transfer*>& ft, const ReshardPlan& mine,
                        const std::vector<TransferGeometry>& mg,
                        const std::vector<const Transfer*>& mt, bool sending,
                        const std::string& what) {
  for (int64_t direct_min : {int64_t{0}, int64_t{64}, int64_t{1} << 40}) {
    const PeerMessages a = LayoutPeerMessages(full, fg, ft, sending, direct_min);
    const PeerMessages b = LayoutPeerMessages(mine, mg, mt, sending, direct_min);
    EXPECT_EQ(a.staged_bytes, b.staged_bytes) << what;
    ExpectSameTransfers(a.staged, b.staged, what);
    ASSERT_EQ(a.runs.size(), b.runs.size()) << what;
    for (size_t i = 0; i < a.runs.size(); ++i) {
      EXPECT_EQ(a.runs[i].tensor, b.runs[i].tensor) << what;
      EXPECT_EQ(a.runs[i].bytes, b.runs[i].bytes) << what;
      EXPECT_EQ(a.runs[i].direct, b.runs[i].direct) << what;
      EXPECT_EQ(a.runs[i].offset, b.runs[i].offset) << what;
    }
  }
}

TEST(StateMovePlan, SamePartComparesEveryTensorsRegion) {
  StateSpec state;
  state.num_layers = 2;
  state.tensors = {TensorSpec{"l0.w", {8, 4}, 4, ShardingRule{1, 0, false}},
                   TensorSpec{"l1.w", {8, 4}, 4, ShardingRule{-1, 1, false}}};
  // Replicated over dp: any rank of dp=2 holds what any rank of dp=3 holds.
  EXPECT_TRUE(SamePart(state, Layout{2, 1, 1}, 1, Layout{3, 1, 1}, 0));
  // Another pipeline stage or tensor-parallel rank holds another part.
  EXPECT_FALSE(SamePart(state, Layout{2, 1, 1}, 0, Layout{1, 2, 1}, 0));
  EXPECT_FALSE(SamePart(state, Layout{1, 1, 2}, 0, Layout{1, 1, 2}, 1));
  EXPECT_TRUE(SamePart(state, Layout{2, 1, 2}, 3, Layout{1, 1, 2}, 1));
  // ZeRO-1: the optimizer state is split over dp, so dp ranks differ.
  StateSpec zero = state;
  zero.tensors[1].rule.zero = true;
  EXPECT_FALSE(SamePart(zero, Layout{2, 1, 1}, 0, Layout{2, 1, 1}, 1));
  EXPECT_TRUE(SamePart(zero, Layout{2, 1, 1}, 1, Layout{2, 1, 1}, 1));
  // Nothing to compare, or a place that is no rank of a valid layout.
  EXPECT_FALSE(SamePart(StateSpec{}, Layout{1, 1, 1}, 0, Layout{1, 1, 1}, 0));
  EXPECT_FALSE(SamePart(state, Layout{2, 1, 1}, 2, Layout{2, 1, 1}, 0));
  EXPECT_FALSE(SamePart(state, Layout{0, 1, 1}, 0, Layout{1, 1, 1}, 0));
  EXPECT_FALSE(SamePart(state, Layout{1, 4, 1}, 0, Layout{1, 1, 1}, 0));  // pp over the layers
  EXPECT_FALSE(SamePart(state, Layout{65536, 65536, 1}, 0, Layout{1, 1, 1}, 0));
}

TEST(StateMovePlan, EachWorkersPlanFromItsMessageEqualsTheWholePlan) {
  for (const Change& c : Changes()) {
    SCOPED_TRACE(c.name);
    const auto members = Table(c.to, c.members, std::vector<bool>(c.members.size(), true));
    const auto prev = Table(c.from, c.prev, c.prev_has_state);
    auto full = PlanStateMove(c.state, c.to, members, c.from, prev);
    ASSERT_TRUE(full.ok()) << full.status();
    const MoveAddresser addresser(c.state, c.to, members, c.from, prev, full,
                                  proto::MovePlan::kMove);
    std::vector<std::string> recipients = c.members;
    for (const auto& id : c.prev) {
      if (std::find(c.members.begin(), c.members.end(), id) == c.members.end()) {
        recipients.push_back(id);  // a leaver
      }
    }
    int transfers_seen = 0;
    for (const std::string& id : recipients) {
      SCOPED_TRACE(id);
      proto::NewGeneration gen;
      gen.generation = 2;
      gen.layout = c.to;
      gen.prev_layout = c.from;
      addresser.Address(id, &gen);
      // Through the wire, as the worker gets it.
      auto decoded = proto::DecodePayload<proto::NewGeneration>(proto::EncodePayload(gen));
      ASSERT_TRUE(decoded.ok());
      auto mine = StateMoveOf(*decoded, c.state, id);
      ASSERT_TRUE(mine.ok()) << mine.status();
      const int me = full->WorkerIndex(id);
      EXPECT_EQ(mine->WorkerIndex(id), me);
      EXPECT_EQ(mine->needs_leavers, full->needs_leavers);
      EXPECT_EQ(mine->workers.size(), full->workers.size());
      EXPECT_EQ(mine->plan.host_of_worker.size(), full->plan.host_of_worker.size());
      if (me < 0 || (me >= full->new_members && !full->needs_leavers)) {
        EXPECT_TRUE(mine->plan.transfers.empty());
        continue;
      }
      // The table holds this worker and its peers only.
      EXPECT_LE(gen.members.size() + gen.prev_members.size(),
                2 + 2 * gen.move.transfers.size());
      const ReshardPlan& fp = full->plan;
      const ReshardPlan& mp = mine->plan;
      const WorkerRegions fr = RegionsOfWorker(fp, me), mr = RegionsOfWorker(mp, me);
      for (size_t i = 0; i < c.state.tensors.size(); ++i) {
        EXPECT_EQ(fr.old_region[i].box, mr.old_region[i].box);
        EXPECT_EQ(fr.old_region[i].flat_begin, mr.old_region[i].flat_begin);
        EXPECT_EQ(fr.old_region[i].flat_end, mr.old_region[i].flat_end);
        EXPECT_EQ(fr.new_region[i].box, mr.new_region[i].box);
        EXPECT_EQ(fr.new_region[i].flat_end, mr.new_region[i].flat_end);
        EXPECT_EQ(fr.same[i], mr.same[i]);
      }
      const auto fgeo = TransferGeometries(fp, me), mgeo = TransferGeometries(mp, me);
      for (int64_t group_bytes : {int64_t{0}, int64_t{4096}, int64_t{1} << 40}) {
        const auto fgroups = WorkerGroups(fp, me, group_bytes);
        const auto mgroups = WorkerGroups(mp, me, group_bytes);
        ASSERT_EQ(fgroups.size(), mgroups.size());
        for (size_t g = 0; g < fgroups.size(); ++g) {
          const std::string what = c.name + " " + id + " group " + std::to_string(g);
          ExpectSameTransfers(fgroups[g].copies, mgroups[g].copies, what + " copies");
          ASSERT_EQ(fgroups[g].sends.size(), mgroups[g].sends.size()) << what;
          ASSERT_EQ(fgroups[g].recvs.size(), mgroups[g].recvs.size()) << what;
          for (const auto& [peer, list] : fgroups[g].sends) {
            ASSERT_TRUE(mgroups[g].sends.count(peer)) << what;
            ExpectSameTransfers(list, mgroups[g].sends.at(peer), what + " sends");
            ExpectSameMessages(fp, fgeo, list, mp, mgeo, mgroups[g].sends.at(peer), true, what);
            EXPECT_EQ(mine->workers[peer], full->workers[peer]) << what;
            transfers_seen += static_cast<int>(list.size());
          }
          for (const auto& [peer, list] : fgroups[g].recvs) {
            ASSERT_TRUE(mgroups[g].recvs.count(peer)) << what;
            ExpectSameTransfers(list, mgroups[g].recvs.at(peer), what + " receives");
            ExpectSameMessages(fp, fgeo, list, mp, mgeo, mgroups[g].recvs.at(peer), false, what);
            EXPECT_EQ(mine->workers[peer], full->workers[peer]) << what;
          }
        }
      }
    }
    if (!full->plan.transfers.empty()) EXPECT_GT(transfers_seen, 0);
  }
}

TEST(StateMovePlan, ShrinkThatNeedsLeaversAddressesThemTheirSends) {
  Change c = Changes()[2];
  const auto members = Table(c.to, c.members, std::vector<bool>(c.members.size(), true));
  const auto prev = Table(c.from, c.prev, c.prev_has_state);
  auto full = PlanStateMove(c.state, c.to, members, c.from, prev);
  ASSERT_TRUE(full.ok());
  ASSERT_TRUE(full->needs_leavers);  // the ZeRO tensor's shards live on the leavers too
  const MoveAddresser addresser(c.state, c.to, members, c.from, prev, full,
                                proto::MovePlan::kMove);
  proto::NewGeneration gen;
  gen.layout = c.to;
  gen.prev_layout = c.from;
  addresser.Address("w7b", &gen);
  EXPECT_TRUE(gen.members.size() >= 1);
  ASSERT_FALSE(gen.move.transfers.empty());
  for (const auto& t : gen.move.transfers) EXPECT_EQ(t.src, full->WorkerIndex("w7b"));
}

TEST(StateMovePlan, LostShardsAndRefusedPlansReachTheWorker) {
  Change c = Changes()[4];
  c.state = Mixed(/*zero=*/true);  // rank 5's ZeRO shards had no other holder
  const auto members = Table(c.to, c.members, std::vector<bool>(c.members.size(), true));
  const auto prev = Table(c.from, c.prev, c.prev_has_state);
  auto full = PlanStateMove(c.state, c.to, members, c.from, prev);
  ASSERT_EQ(full.status().code(), StatusCode::kFailedPrecondition) << full.status();
  const MoveAddresser lost(c.state, c.to, members, c.from, prev, full, proto::MovePlan::kMove);
  proto::NewGeneration gen;
  gen.layout = c.to;
  gen.prev_layout = c.from;
  lost.Address("w0a", &gen);
  EXPECT_EQ(gen.move.plan, proto::MovePlan::kLost);
  EXPECT_EQ(StateMoveOf(gen, c.state, "w0a").status().code(), StatusCode::kFailedPrecondition);
  // A worker that registered other tensors than the coordinator planned for refuses the plan.
  const auto held = Table(c.from, c.prev, std::vector<bool>(8, true));
  const MoveAddresser fine(c.state, c.to, members, c.from, held,
                           PlanStateMove(c.state, c.to, members, c.from, held),
                           proto::MovePlan::kMove);
  fine.Address("w0a", &gen);
  EXPECT_EQ(gen.move.plan, proto::MovePlan::kMove);
  EXPECT_TRUE(StateMoveOf(gen, c.state, "w0a").ok());
  StateSpec other = c.state;
  other.tensors.pop_back();
  EXPECT_EQ(StateMoveOf(gen, other, "w0a").status().code(), StatusCode::kInvalidArgument);
  // Nothing planned (a job resumed from disk): no move to run.
  const MoveAddresser none(c.state, c.to, members, c.from, prev,
                           StatusOr<StateMove>(UnavailableError("resumed")),
                           proto::MovePlan::kNone);
  none.Address("w0a", &gen);
  EXPECT_EQ(StateMoveOf(gen, c.state, "w0a").status().code(), StatusCode::kInvalidArgument);
}

TEST(StateMovePlan, APlanWithoutCopiesAddressesEveryWorkerTheSameMessage) {
  // The coordinator plans without listing copies (each worker lists its own): the transfers,
  // the bytes and every recipient's message are those of the plan with copies.
  ReshardPlanOptions no_copies;
  no_copies.copies = false;
  for (const Change& c : Changes()) {
    SCOPED_TRACE(c.name);
    const auto members = Table(c.to, c.members, std::vector<bool>(c.members.size(), true));
    const auto prev = Table(c.from, c.prev, c.prev_has_state);
    auto with = PlanStateMove(c.state, c.to, members, c.from, prev);
    auto without = PlanStateMove(c.state, c.to, members, c.from, prev, no_copies);
    ASSERT_TRUE(with.ok() && without.ok());
    EXPECT_FALSE(with->plan.copies.empty());
    EXPECT_TRUE(without->plan.copies.empty());
    EXPECT_EQ(with->plan.bytes_local, without->plan.bytes_local);
    EXPECT_EQ(with->plan.bytes_moved, without->plan.bytes_moved);
    ASSERT_EQ(with->plan.transfers.size(), without->plan.transfers.size());
    for (size_t i = 0; i < with->plan.transfers.size(); ++i) {
      const Transfer &x = with->plan.transfers[i], &y = without->plan.transfers[i];
      EXPECT_EQ(std::make_tuple(x.tensor, x.src, x.dst, x.bytes),
                std::make_tuple(y.tensor, y.src, y.dst, y.bytes));
      EXPECT_EQ(x.rect, y.rect);
    }
    const MoveAddresser a(c.state, c.to, members, c.from, prev, with, proto::MovePlan::kMove);
    const MoveAddresser b(c.state, c.to, members, c.from, prev, without, proto::MovePlan::kMove);
    EXPECT_EQ(a.ScalarsSource(), b.ScalarsSource());
    std::vector<std::string> recipients = c.members;
    recipients.insert(recipients.end(), c.prev.begin(), c.prev.end());
    for (const std::string& id : recipients) {
      proto::NewGeneration ga, gb;
      a.Address(id, &ga);
      b.Address(id, &gb);
      EXPECT_EQ(proto::EncodePayload(ga), proto::EncodePayload(gb)) << id;
    }
  }
}

// What a grow by one host costs in bytes: every recipient gets its own entries, and entries
// beyond those only for the transfers it takes part in, whose number does not grow with the job.
TEST(StateMovePlan, EntriesBeyondEachRecipientsOwnAreBoundedByTheTransfers) {
  for (int n : {8, 64, 512}) {
    const Layout from{n, 1, 1}, to{n + 8, 1, 1};
    std::vector<std::string> old_ids, new_ids;
    for (int i = 0; i < n; ++i) old_ids.push_back("w" + std::to_string(i));
    new_ids = old_ids;
    for (int i = 0; i < 8; ++i) new_ids.push_back("j" + std::to_string(i));
    StateSpec state;
    state.tensors = {TensorSpec{"w", {256, 256}, 4, {}}};
    const auto members = Table(to, new_ids, std::vector<bool>(new_ids.size(), true));
    const auto prev = Table(from, old_ids, std::vector<bool>(n, true));
    auto planned = PlanStateMove(state, to, members, from, prev);
    ASSERT_TRUE(planned.ok());
    const size_t transfers = planned->plan.transfers.size();
    EXPECT_LE(transfers, 8u * 4u) << "a whole tensor split in 256 KiB parts per joiner";
    const MoveAddresser a(state, to, members, from, prev, planned, proto::MovePlan::kMove);
    size_t beyond = 0, own_only = 0;
    for (const auto& id : new_ids) {
      proto::NewGeneration gen;
      a.Address(id, &gen);
      const bool joiner = id[0] == 'j';
      const size_t own = joiner ? 1 : 2;
      ASSERT_GE(gen.members.size() + gen.prev_members.size(), own);
      beyond += gen.members.size() + gen.prev_members.size() - own;
      own_only += gen.members.size() + gen.prev_members.size() == own ? 1 : 0;
      if (joiner) EXPECT_FALSE(gen.move.transfers.empty());
    }
    EXPECT_LE(beyond, 2 * transfers) << n;
    EXPECT_GE(own_only, static_cast<size_t>(n) - transfers) << n;
  }
}

}  // namespace
}  // namespace elastra
