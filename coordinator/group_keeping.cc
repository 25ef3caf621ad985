#include "coordinator/group_keeping.h"

#include <algorithm>

#include "common/id_index.h"

namespace elastra::coordinator {
namespace {

// The size of a group of `kind` in `layout`.
int GroupSize(const Layout& layout, uint8_t kind) {
  return kind == proto::kDpGroup ? layout.dp : kind == proto::kPpGroup ? layout.pp : layout.tp;
}

// The global rank of coordinates (d, p, t) (Megatron's order, elastra/layout.h).
int RankAt(const Layout& layout, int d, int p, int t) { return (d * layout.pp + p) * layout.tp + t; }

// The ranks of `layout`'s group of `kind` that holds `rank`, in group-rank order.
void GroupRanksInto(const Layout& layout, int rank, uint8_t kind, std::vector<int>* out) {
  const Coordinates c = CoordinatesOf(layout, rank);
  out->clear();
  for (int i = 0; i < GroupSize(layout, kind); ++i) {
    out->push_back(kind == proto::kDpGroup   ? RankAt(layout, i, c.pp_rank, c.tp_rank)
                   : kind == proto::kPpGroup ? RankAt(layout, c.dp_rank, i, c.tp_rank)
                                             : RankAt(layout, c.dp_rank, c.pp_rank, i));
  }
}

// The count `peer` of `h` lists in `counts` (its sent or received), 0 when it lists none.
int64_t CountFor(const proto::GroupHealth& h, const std::vector<int64_t>& counts, int peer) {
  auto it = std::lower_bound(h.peers.begin(), h.peers.end(), peer);
  if (it == h.peers.end() || *it != peer) return 0;
  const size_t i = static_cast<size_t>(it - h.peers.begin());
  return i < counts.size() ? counts[i] : -1;
}

// Whether the reports `group` (by group rank) say no byte of the group is in flight and no
// member inside a call.
bool Quiet(const std::vector<const proto::GroupHealth*>& group, uint64_t generation) {
  const int64_t calls = group.front()->calls;
  const int size = static_cast<int>(group.size());
  for (int i = 0; i < size; ++i) {
    const proto::GroupHealth& h = *group[i];
    if (!h.intact || h.generation != generation || h.calls != calls) return false;
    if (h.sent.size() != h.peers.size() || h.received.size() != h.peers.size()) return false;
    for (size_t k = 0; k < h.peers.size(); ++k) {
      const int peer = h.peers[k];
      if (peer < 0 || peer >= size || peer == i || (k > 0 && h.peers[k - 1] >= peer)) return false;
      // What i sent to `peer` is what `peer` received from i, and the other way round.
      if (CountFor(*group[peer], group[peer]->received, i) != h.sent[k]) return false;
      if (CountFor(*group[peer], group[peer]->sent, i) != h.received[k]) return false;
    }
  }
  return true;
}

}  // namespace

int32_t CommunicatorsOf(const Layout& layout) {
  int32_t n = 1;
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    const int size = GroupSize(layout, kind);
    if (size > 1 && size != layout.world()) n += layout.world() / size;
  }
  return n;
}

KeptGroups PlanKeptGroups(const Layout& old_layout, const std::vector<std::string>& old_members,
                          uint64_t old_generation, const Layout& new_layout,
                          const std::vector<std::string>& new_members,
                          const GroupHealthOf& health, bool enabled) {
  KeptGroups out;
  const int world = new_layout.world();
  out.keep.assign(new_members.size(), 0);
  out.rebuilt = CommunicatorsOf(new_layout);
  if (!enabled || old_generation == 0 || static_cast<int>(new_members.size()) != world ||
      static_cast<int>(old_members.size()) != old_layout.world()) {
    return out;
  }
  IdIndex old_index;
  old_index.Build(&old_members);
  std::vector<int> new_ranks, old_ranks;
  std::vector<const proto::GroupHealth*> reports;
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    const int size = GroupSize(new_layout, kind);
    if (size <= 1 || size == world || size != GroupSize(old_layout, kind) ||
        size == old_layout.world()) {
      continue;
    }
    // Each group once: from the rank whose coordinate along `kind` is 0.
    for (int r = 0; r < world; ++r) {
      const Coordinates c = CoordinatesOf(new_layout, r);
      const int along = kind == proto::kDpGroup   ? c.dp_rank
                        : kind == proto::kPpGroup ? c.pp_rank
                                                  : c.tp_rank;
      if (along != 0) continue;
      GroupRanksInto(new_layout, r, kind, &new_ranks);
      const size_t first_old = old_index.Find(new_members[new_ranks.front()]);
      if (first_old == IdIndex::kNone) continue;
      GroupRanksInto(old_layout, static_cast<int>(first_old), kind, &old_ranks);
      if (old_ranks.front() != static_cast<int>(first_old)) continue;  // not its first member
      bool same = true;
      reports.clear();
      for (int i = 0; same && i < size; ++i) {
        const std::string& id = new_members[new_ranks[i]];
        same = old_members[old_ranks[i]] == id;
        const proto::GroupHealth* h = same ? health(id, old_ranks[i], kind) : nullptr;
        same = h != nullptr && h->kind == kind;
        reports.push_back(h);
      }
      if (!same || !Quiet(reports, old_generation)) continue;
      for (int nr : new_ranks) out.keep[nr] |= static_cast<uint8_t>(1u << kind);
      ++out.kept;
      --out.rebuilt;
    }
  }
  return out;
}

}  // namespace elastra::coordinator
