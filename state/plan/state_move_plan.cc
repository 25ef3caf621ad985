// The state move of a generation change, planned once and addressed: see state_move_plan.h.
#include "state/plan/state_move_plan.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

#include "common/id_index.h"

namespace elastra {

int StateMove::WorkerIndex(const std::string& id) const {
  for (size_t i = 0; i < workers.size(); ++i) {
    if (workers[i] == id) return static_cast<int>(i);
  }
  return -1;
}

StatusOr<StateMove> PlanStateMove(const StateSpec& state, const Layout& layout,
                                  const std::vector<proto::Member>& members,
                                  const Layout& prev_layout,
                                  const std::vector<proto::Member>& prev_members,
                                  const ReshardPlanOptions& options) {
  for (bool with_leavers : {false, true}) {
    StateMove move;
    std::unordered_map<std::string, int> hosts;
    std::vector<int> host_of_worker;
    const size_t most = members.size() + (with_leavers ? prev_members.size() : 0);
    move.workers.reserve(most);
    host_of_worker.reserve(most);
    auto add = [&](const std::string& id, const std::string& host) {
      move.workers.push_back(id);
      auto [it, added] = hosts.try_emplace(host, static_cast<int>(hosts.size()));
      host_of_worker.push_back(it->second);
    };
    for (const auto& m : members) add(m.worker_id, m.host);
    move.new_members = static_cast<int>(members.size());
    // The new members by position (the leavers appended below are not indexed): a flat index,
    // not a hash node per worker (docs/scale.md).
    IdIndex index;
    index.Build(&move.workers);
    Placement from;
    from.layout = prev_layout;
    from.worker_of_rank.reserve(prev_members.size());
    for (const auto& m : prev_members) {
      const size_t i = index.Find(m.worker_id);
      if (i != IdIndex::kNone) {
        from.worker_of_rank.push_back(m.has_state ? static_cast<int>(i) : -1);
      } else if (with_leavers && m.has_state) {  // a leaver holding state: it sends its part
        from.worker_of_rank.push_back(static_cast<int>(move.workers.size()));
        add(m.worker_id, m.host);
      } else {
        from.worker_of_rank.push_back(-1);
      }
    }
    Placement to;
    to.layout = layout;
    to.worker_of_rank.resize(members.size());
    std::iota(to.worker_of_rank.begin(), to.worker_of_rank.end(), 0);
    auto plan = BuildReshardPlan(state, from, to, host_of_worker, options);
    if (!plan.ok()) {
      if (!with_leavers && plan.status().code() == StatusCode::kFailedPrecondition) continue;
      return plan.status();
    }
    move.plan = std::move(plan).value();
    move.needs_leavers = with_leavers;
    return move;
  }
  return InternalError("unreachable");
}

std::vector<Transfer> LocalCopies(const StateSpec& state, const Layout& from,
                                  const Coordinates* from_coords, const Layout& to,
                                  const Coordinates& to_coords, int worker) {
  std::vector<Transfer> copies;
  for (size_t ti = 0; ti < state.tensors.size(); ++ti) {
    const TensorSpec& t = state.tensors[ti];
    const Region need = LocalRegion(t, state.num_layers, to, to_coords);
    if (need.empty() || from_coords == nullptr) continue;
    const std::vector<Rect> own = LocalRegion(t, state.num_layers, from, *from_coords).Pieces();
    const int64_t esize = static_cast<int64_t>(t.element_size);
    for (const Rect& piece : need.Pieces()) {
      for (const Rect& o : own) {
        const Rect keep = Intersect(piece, o);
        if (!keep.empty()) {
          copies.push_back({static_cast<int>(ti), worker, worker, keep, keep.volume() * esize});
        }
      }
    }
  }
  return copies;
}

// ---------------------------------------------------------------------------------------------
// The coordinator's side.

MoveAddresser::MoveAddresser(const StateSpec& state, Layout layout,
                             std::vector<proto::Member> members, Layout prev_layout,
                             std::vector<proto::Member> prev_members, StatusOr<StateMove> planned,
                             proto::MovePlan plan_kind)
    : state_(state),
      layout_(layout),
      prev_layout_(prev_layout),
      members_(std::move(members)),
      prev_members_(std::move(prev_members)),
      planned_(std::move(planned)),
      plan_kind_(plan_kind) {
  member_ids_.reserve(members_.size());
  for (const proto::Member& m : members_) member_ids_.push_back(m.worker_id);
  member_index_.Build(&member_ids_);
  for (const proto::Member& m : prev_members_) {
    if (member_index_.Find(m.worker_id) == IdIndex::kNone) other_ids_.push_back(m.worker_id);
  }
  other_index_.Build(&other_ids_);
  ranks_.assign(member_ids_.size() + other_ids_.size(), Ranks{});
  for (size_t r = 0; r < members_.size(); ++r) {
    members_[r].rank = static_cast<int32_t>(r);
    members_[r].worker = static_cast<int32_t>(r);
    Ranks& ranks = ranks_[Slot(members_[r].worker_id)];
    if (ranks.new_rank < 0) ranks.new_rank = static_cast<int>(r);
  }
  const StateMove* move = planned_.ok() ? &*planned_ : nullptr;
  if (move != nullptr) {
    for (size_t w = 0; w < move->workers.size(); ++w) {
      const int slot = Slot(move->workers[w]);  // every plan worker is a member or a previous one
      if (slot < 0) continue;
      Ranks& ranks = ranks_[slot];
      if (ranks.plan_index < 0) ranks.plan_index = static_cast<int>(w);
    }
    old_rank_of_worker_.assign(move->workers.size(), -1);
    const auto& from = move->plan.from.worker_of_rank;
    for (size_t r = 0; r < from.size(); ++r) {
      if (from[r] >= 0) old_rank_of_worker_[from[r]] = static_cast<int>(r);
    }
    transfers_of_worker_.resize(move->workers.size());
    const auto& transfers = move->plan.transfers;
    for (size_t i = 0; i < transfers.size(); ++i) {
      transfers_of_worker_[transfers[i].src].push_back(static_cast<int>(i));
      if (transfers[i].dst != transfers[i].src) {
        transfers_of_worker_[transfers[i].dst].push_back(static_cast<int>(i));
      }
    }
  }
  for (size_t r = 0; r < prev_members_.size(); ++r) {
    proto::Member& m = prev_members_[r];
    m.rank = static_cast<int32_t>(r);
    Ranks& ranks = ranks_[Slot(m.worker_id)];
    if (ranks.old_rank < 0) ranks.old_rank = static_cast<int>(r);
    ranks.held = ranks.held || m.has_state;
    if (move != nullptr && m.has_state) m.worker = ranks.plan_index;
  }
}

int MoveAddresser::Slot(const std::string& id, int rank) const {
  const size_t i =
      member_index_.Find(id, rank >= 0 ? static_cast<size_t>(rank) : IdIndex::kNone);
  if (i != IdIndex::kNone) return static_cast<int>(i);
  const size_t j = other_index_.Find(id);
  if (j != IdIndex::kNone) return static_cast<int>(member_ids_.size() + j);
  return -1;
}

int32_t MoveAddresser::ScalarsSource() const {
  for (size_t r = 0; r < members_.size(); ++r) {
    if (ranks_[Slot(members_[r].worker_id)].held) return static_cast<int32_t>(r);
  }
  return 0;
}

void MoveAddresser::Address(const std::string& id, proto::NewGeneration* gen, int rank) const {
  // Into the message's own vectors and two of this object's, which keep their capacity: a
  // coordinator addresses 16,384 recipients a change, most with one entry in each table.
  std::vector<int>& new_ranks = new_ranks_;
  std::vector<int>& old_ranks = old_ranks_;
  new_ranks.clear();
  old_ranks.clear();
  const int slot = Slot(id, rank);
  const Ranks ranks = slot >= 0 ? ranks_[slot] : Ranks{};
  if (ranks.new_rank >= 0) new_ranks.push_back(ranks.new_rank);
  if (ranks.old_rank >= 0) old_ranks.push_back(ranks.old_rank);
  proto::StateMovePart& part = gen->move;
  std::vector<proto::MoveTransfer> transfers = std::move(part.transfers);  // keeps its capacity
  transfers.clear();
  part = proto::StateMovePart{};
  part.transfers = std::move(transfers);
  part.plan = plan_kind_;
  part.tensors = static_cast<int32_t>(state_.tensors.size());
  if (plan_kind_ != proto::MovePlan::kNone && !planned_.ok()) {
    const bool lost = planned_.status().code() == StatusCode::kFailedPrecondition;
    part.plan = lost ? proto::MovePlan::kLost : proto::MovePlan::kInvalid;
    part.error = std::string(planned_.status().message());
  } else if (plan_kind_ == proto::MovePlan::kMove) {
    const StateMove& move = *planned_;
    part.needs_leavers = move.needs_leavers;
    part.workers = static_cast<int32_t>(move.workers.size());
    const int me = ranks.plan_index;
    // A leaver whose shards the staying workers hold anyway takes no part.
    if (me >= 0 && (me < move.new_members || move.needs_leavers)) {
      for (int i : transfers_of_worker_[me]) {
        const Transfer& t = move.plan.transfers[i];
        part.transfers.push_back({t.tensor, t.src, t.dst, t.rect.row_begin, t.rect.row_end,
                                  t.rect.col_begin, t.rect.col_end});
        if (t.src == me) {
          new_ranks.push_back(t.dst);  // a new member's plan index is its new rank
        } else {
          old_ranks.push_back(old_rank_of_worker_[t.src]);
        }
      }
    }
  }
  auto table = [](std::vector<int>& ranks, const std::vector<proto::Member>& all,
                  std::vector<proto::Member>* out) {
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    out->clear();
    for (int r : ranks) {
      if (r >= 0 && r < static_cast<int>(all.size())) out->push_back(all[r]);
    }
  };
  table(new_ranks, members_, &gen->members);
  table(old_ranks, prev_members_, &gen->prev_members);
}

// ---------------------------------------------------------------------------------------------
// The worker's side.

StatusOr<StateMove> StateMoveOf(const proto::NewGeneration& gen, const StateSpec& state,
                                const std::string& worker_id) {
  const proto::StateMovePart& part = gen.move;
  switch (part.plan) {
    case proto::MovePlan::kNone:
      return InvalidArgumentError("the coordinator planned no state move for generation " +
                                  std::to_string(gen.generation));
    case proto::MovePlan::kLost: return FailedPreconditionError(part.error);
    case proto::MovePlan::kInvalid: return InvalidArgumentError(part.error);
    case proto::MovePlan::kMove: break;
  }
  if (part.tensors != static_cast<int32_t>(state.tensors.size())) {
    return InvalidArgumentError("the coordinator planned the state move for " +
                                std::to_string(part.tensors) + " tensors, this worker has " +
                                std::to_string(state.tensors.size()));
  }
  const int world = gen.layout.world();
  const int prev_world = gen.prev_layout.world();
  if (part.workers < world || part.workers > world + prev_world) {
    return InvalidArgumentError("a state move of " + std::to_string(part.workers) +
                                " workers for a generation of " + std::to_string(world));
  }
  StateMove move;
  move.new_members = world;
  move.needs_leavers = part.needs_leavers;
  move.workers.assign(part.workers, "");
  ReshardPlan& plan = move.plan;
  plan.state = state;
  plan.from.layout = gen.prev_layout;
  plan.from.worker_of_rank.assign(prev_world, -1);
  plan.to.layout = gen.layout;
  plan.to.worker_of_rank.assign(world, -1);
  plan.host_of_worker.assign(part.workers, -1);
  std::map<std::string, int> hosts;
  auto place = [&](const proto::Member& m, int worker) -> Status {
    if (worker < 0 || worker >= part.workers) {
      return InvalidArgumentError("member " + m.worker_id + " has plan index " +
                                  std::to_string(worker));
    }
    move.workers[worker] = m.worker_id;
    plan.host_of_worker[worker] =
        hosts.emplace(m.host, static_cast<int>(hosts.size())).first->second;
    return OkStatus();
  };
  std::vector<int> old_rank_of_worker(part.workers, -1);
  int me = -1, my_new_rank = -1, my_old_rank = -1;
  for (const auto& m : gen.members) {
    if (m.rank < 0 || m.rank >= world) return InvalidArgumentError("member rank out of range");
    ELASTRA_RETURN_IF_ERROR(place(m, m.rank));
    plan.to.worker_of_rank[m.rank] = m.rank;
    if (m.worker_id == worker_id) me = my_new_rank = m.rank;
  }
  for (const auto& m : gen.prev_members) {
    if (m.rank < 0 || m.rank >= prev_world) {
      return InvalidArgumentError("previous member rank out of range");
    }
    if (!m.has_state || m.worker < 0) continue;
    ELASTRA_RETURN_IF_ERROR(place(m, m.worker));
    plan.from.worker_of_rank[m.rank] = m.worker;
    old_rank_of_worker[m.worker] = m.rank;
    if (m.worker_id == worker_id) {
      me = m.worker;
      my_old_rank = m.rank;
    }
  }
  if (me < 0) return move;  // takes no part: nothing to copy, send or receive
  Coordinates from_coords;
  if (my_old_rank >= 0) from_coords = CoordinatesOf(gen.prev_layout, my_old_rank);
  if (my_new_rank >= 0) {
    plan.copies = LocalCopies(state, gen.prev_layout, my_old_rank >= 0 ? &from_coords : nullptr,
                              gen.layout, CoordinatesOf(gen.layout, my_new_rank), me);
  }
  for (const Transfer& c : plan.copies) plan.bytes_local += c.bytes;
  for (const proto::MoveTransfer& w : part.transfers) {
    if (w.tensor < 0 || w.tensor >= static_cast<int32_t>(state.tensors.size()) || w.src < 0 ||
        w.src >= part.workers || w.dst < 0 || w.dst >= part.workers || w.src == w.dst ||
        (w.src != me && w.dst != me) || w.dst >= world || plan.to.worker_of_rank[w.dst] != w.dst ||
        old_rank_of_worker[w.src] < 0) {
      return InvalidArgumentError("a transfer of the state move names unknown workers");
    }
    Transfer t;
    t.tensor = w.tensor;
    t.src = w.src;
    t.dst = w.dst;
    t.rect = Rect{w.row_begin, w.row_end, w.col_begin, w.col_end};
    t.bytes = t.rect.volume() * static_cast<int64_t>(state.tensors[w.tensor].element_size);
    plan.bytes_moved += t.bytes;
    plan.transfers.push_back(t);
  }
  return move;
}

bool SamePart(const StateSpec& state, const Layout& a, int a_rank, const Layout& b, int b_rank) {
  if (state.tensors.empty()) return false;
  for (const Layout* l : {&a, &b}) {
    if (!IsValidLayout(*l)) return false;
  }
  if (a_rank < 0 || a_rank >= a.world() || b_rank < 0 || b_rank >= b.world()) return false;
  const Coordinates at_a = CoordinatesOf(a, a_rank), at_b = CoordinatesOf(b, b_rank);
  for (const TensorSpec& t : state.tensors) {
    if (!ValidateTensor(t, state.num_layers, a).ok() ||
        !ValidateTensor(t, state.num_layers, b).ok()) {
      return false;
    }
    const Region x = LocalRegion(t, state.num_layers, a, at_a);
    const Region y = LocalRegion(t, state.num_layers, b, at_b);
    if (!(x.box == y.box) || x.flat_begin != y.flat_begin || x.flat_end != y.flat_end) {
      return false;
    }
  }
  return true;
}

}  // namespace elastra
