// The reshard planner: see reshard_plan.h and docs/resharding.md.
#include "state/plan/reshard_plan.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

namespace elastra {
namespace {

Status CheckPlacement(const char* which, const Placement& p, size_t num_workers,
                      bool allow_lost = false) {
  const std::string who = std::string(which) + " placement " + p.layout.ToString() + ": ";
  if (p.layout.dp < 1 || p.layout.pp < 1 || p.layout.tp < 1) {
    return InvalidArgumentError(who + "every degree must be >= 1");
  }
  if (static_cast<int>(p.worker_of_rank.size()) != p.layout.world()) {
    return InvalidArgumentError(who + "has " + std::to_string(p.worker_of_rank.size()) +
                                " workers for " + std::to_string(p.layout.world()) + " ranks");
  }
  std::vector<bool> seen(num_workers, false);
  for (int w : p.worker_of_rank) {
    if (w < 0 && allow_lost) continue;  // a lost rank: its shards have no holder here
    if (w < 0 || static_cast<size_t>(w) >= num_workers) {
      return InvalidArgumentError(who + "names unknown worker " + std::to_string(w));
    }
    if (seen[w]) return InvalidArgumentError(who + "names worker " + std::to_string(w) + " twice");
    seen[w] = true;
  }
  return OkStatus();
}

int64_t OverlapElements(const Region& a, const Region& b) {
  if (a.empty() || b.empty() || Intersect(a.box, b.box).empty()) return 0;
  int64_t n = 0;
  for (const Rect& p : a.Pieces()) {
    for (const Rect& q : b.Pieces()) n += Intersect(p, q).volume();
  }
  return n;
}

// Splits `r` into `parts` nearly equal rectangles along rows (columns when it has one row).
std::vector<Rect> SplitRect(const Rect& r, int parts) {
  std::vector<Rect> out;
  const bool by_rows = r.row_end - r.row_begin > 1;
  const int64_t n = by_rows ? r.row_end - r.row_begin : r.col_end - r.col_begin;
  parts = static_cast<int>(std::min<int64_t>(parts, n));
  for (int i = 0; i < parts; ++i) {
    Rect p = r;
    const int64_t b = i * n / parts, e = (i + 1) * n / parts;
    if (by_rows) {
      p.row_begin = r.row_begin + b;
      p.row_end = r.row_begin + e;
    } else {
      p.col_begin = r.col_begin + b;
      p.col_end = r.col_begin + e;
    }
    if (!p.empty()) out.push_back(p);
  }
  return out;
}

}  // namespace

int Placement::RankOfWorker(int worker) const {
  for (size_t r = 0; r < worker_of_rank.size(); ++r) {
    if (worker_of_rank[r] == worker) return static_cast<int>(r);
  }
  return -1;
}

int64_t KeptBytes(const StateSpec& state, const Layout& from, const Coordinates* from_coords,
                  const Layout& to, const Coordinates& to_coords) {
  if (from_coords == nullptr) return 0;
  int64_t kept = 0;
  for (const auto& t : state.tensors) {
    const Region a = LocalRegion(t, state.num_layers, from, *from_coords);
    const Region b = LocalRegion(t, state.num_layers, to, to_coords);
    kept += OverlapElements(a, b) * static_cast<int64_t>(t.element_size);
  }
  return kept;
}

namespace {

// (bytes sent, place in a pool), least first.
using Load = std::pair<int64_t, size_t>;
using MinLoadHeap = std::priority_queue<Load, std::vector<Load>, std::greater<Load>>;
// Pools larger than this get the shared heap even for transfers of one part (a scan of the pool
// per part costs as much as building the heap).
constexpr size_t kSharedHeapPool = 64;

MinLoadHeap BuildLoadHeap(const std::vector<int>& pool, const std::vector<int64_t>& sent) {
  std::vector<Load> loads;
  loads.reserve(pool.size());
  for (size_t i = 0; i < pool.size(); ++i) loads.push_back({sent[pool[i]], i});
  return MinLoadHeap(std::greater<Load>(), std::move(loads));
}

// Pops the place in `pool` of the least-loaded sender, ties to the first in pool order. An entry
// whose load is stale (the sender sent meanwhile through another pool: loads only grow) goes back
// with its load; so the first fresh entry on top is the least (load, place) of the whole pool.
size_t PopLeastLoaded(MinLoadHeap* heap, const std::vector<int>& pool,
                      const std::vector<int64_t>& sent) {
  for (;;) {
    const Load top = heap->top();
    heap->pop();
    const int64_t now = sent[pool[top.second]];
    if (top.first == now) return top.second;
    heap->push({now, top.second});
  }
}

// One heap per replica group of a tensor, built the first time a receiver with no replica on its
// host needs the group's whole pool, then shared by every such receiver.
class SharedSenders {
 public:
  explicit SharedSenders(size_t groups) : heaps_(groups) {}
  MinLoadHeap& For(size_t group, const std::vector<int>& pool, const std::vector<int64_t>& sent) {
    if (!heaps_[group]) heaps_[group] = BuildLoadHeap(pool, sent);
    return *heaps_[group];
  }

 private:
  std::vector<std::optional<MinLoadHeap>> heaps_;
};

// One tensor's regions at every rank of a layout. A region depends on the rank's DP coordinate
// only under ZeRO (sharding.h): otherwise one LocalRegion per (stage, TP rank), not per rank,
// which at 16,384 data-parallel ranks is 16,384 times fewer.
class RegionTable {
 public:
  RegionTable(const TensorSpec& t, int num_layers, const Layout& layout,
              const std::vector<Coordinates>& coords)
      : per_rank_(t.rule.zero), tp_(layout.tp), coords_(&coords) {
    if (per_rank_) {
      regions_.reserve(coords.size());
      for (const Coordinates& c : coords) regions_.push_back(LocalRegion(t, num_layers, layout, c));
      return;
    }
    regions_.reserve(static_cast<size_t>(layout.pp) * layout.tp);
    for (int stage = 0; stage < layout.pp; ++stage) {
      for (int tp = 0; tp < layout.tp; ++tp) {
        Coordinates c;
        c.pp_rank = stage;
        c.tp_rank = tp;
        regions_.push_back(LocalRegion(t, num_layers, layout, c));
      }
    }
  }
  // Ranks of one class hold the same region; classes are numbered from 0 to classes() - 1.
  size_t ClassOf(int rank) const {
    if (per_rank_) return static_cast<size_t>(rank);
    const Coordinates& c = (*coords_)[rank];
    return static_cast<size_t>(c.pp_rank) * tp_ + c.tp_rank;
  }
  size_t classes() const { return regions_.size(); }
  const Region& ofClass(size_t c) const { return regions_[c]; }
  const Region& at(int rank) const { return regions_[ClassOf(rank)]; }

 private:
  bool per_rank_;
  int tp_;
  const std::vector<Coordinates>* coords_;
  std::vector<Region> regions_;
};

// The replicas of one group by host: a counting sort of the group's workers by their host,
// stable, so a host's replicas keep the group's order. Built the first time a receiver looks
// for replicas on its own host, instead of a scan of the whole group per receiver (quadratic in
// a grow by many hosts at thousands of replicas).
class ReplicasByHost {
 public:
  void Build(const std::vector<int>& replicas, const std::vector<int>& host_of_worker,
             int num_hosts) {
    first_.assign(static_cast<size_t>(num_hosts) + 1, 0);
    for (int w : replicas) ++first_[host_of_worker[w] + 1];
    for (size_t h = 1; h < first_.size(); ++h) first_[h] += first_[h - 1];
    sorted_.resize(replicas.size());
    std::vector<size_t> next(first_.begin(), first_.end() - 1);
    for (int w : replicas) sorted_[next[host_of_worker[w]]++] = w;
  }
  bool built() const { return !first_.empty(); }  // Build leaves at least one entry
  // The group's replicas on `host`, in the group's order.
  void On(int host, std::vector<int>* out) const {
    out->assign(sorted_.begin() + static_cast<std::ptrdiff_t>(first_[host]),
                sorted_.begin() + static_cast<std::ptrdiff_t>(first_[host + 1]));
  }

 private:
  std::vector<size_t> first_;  // first_[h]: where host h's replicas begin in sorted_
  std::vector<int> sorted_;
};

// Both inputs name known workers, each at most once (the old placement may have lost ranks), and
// every tensor fits both layouts.
Status CheckInputs(const StateSpec& state, const Placement& from, const Placement& to,
                   size_t num_workers) {
  ELASTRA_RETURN_IF_ERROR(CheckPlacement("from", from, num_workers, /*allow_lost=*/true));
  ELASTRA_RETURN_IF_ERROR(CheckPlacement("to", to, num_workers));
  for (const auto& t : state.tensors) {
    ELASTRA_RETURN_IF_ERROR(ValidateTensor(t, state.num_layers, from.layout));
    ELASTRA_RETURN_IF_ERROR(ValidateTensor(t, state.num_layers, to.layout));
  }
  return OkStatus();
}

// Where one tensor's bytes can come from: its distinct non-empty regions in the old layout,
// each with the live workers holding it (its replicas, a group). Two distinct regions of one
// tensor in one layout are disjoint (see sharding.h).
class SourceGroups {
 public:
  SourceGroups(const RegionTable& from_region, const Placement& from) {
    Collect(from_region, from);
    for (const auto& g : groups_) pieces_.push_back(g.first.Pieces());
    IndexByBox();
  }

  size_t size() const { return groups_.size(); }
  const std::vector<int>& replicas(size_t gi) const { return groups_[gi].second; }
  const std::vector<Rect>& pieces(size_t gi) const { return pieces_[gi]; }

  // The groups whose region may overlap `x`, in a deterministic order.
  std::vector<size_t> Candidates(const Rect& x) const {
    std::vector<size_t> out;
    for (const auto& [box, list] : by_box_) {
      const Rect y = Intersect(x, box);
      if (y.empty()) continue;
      const int64_t w = box.col_end - box.col_begin;
      const int64_t lo = (y.row_begin - box.row_begin) * w + (y.col_begin - box.col_begin);
      const int64_t hi = (y.row_end - 1 - box.row_begin) * w + (y.col_end - 1 - box.col_begin) + 1;
      auto first = std::partition_point(
          list.begin(), list.end(), [&](size_t gi) { return groups_[gi].first.flat_end <= lo; });
      for (auto it = first; it != list.end() && groups_[*it].first.flat_begin < hi; ++it) {
        out.push_back(*it);
      }
    }
    return out;
  }

 private:
  // The groups, in the order of their first live rank; each lists its workers in rank order.
  void Collect(const RegionTable& from_region, const Placement& from) {
    // Each class's group, found once per class: kNone until a live rank of the class is seen.
    constexpr size_t kNone = static_cast<size_t>(-1);
    std::vector<size_t> group_of_class(from_region.classes(), kNone);
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, size_t> index;
    for (int r = 0; r < from.layout.world(); ++r) {
      const size_t c = from_region.ClassOf(r);
      const Region& g = from_region.ofClass(c);
      if (g.empty() || from.worker_of_rank[r] < 0) continue;
      if (group_of_class[c] == kNone) {
        auto key = std::make_tuple(g.box.row_begin, g.box.row_end, g.box.col_begin, g.box.col_end,
                                   g.flat_begin, g.flat_end);
        auto [it, added] = index.try_emplace(key, groups_.size());
        if (added) groups_.push_back({g, {}});
        group_of_class[c] = it->second;
      }
      groups_[group_of_class[c]].second.push_back(from.worker_of_rank[r]);
    }
  }

  // Groups by box, each list ordered by flat range (disjoint within one box), so the groups a
  // rectangle touches are found by binary search instead of a scan over every group.
  void IndexByBox() {
    for (size_t gi = 0; gi < groups_.size(); ++gi) {
      const Rect& box = groups_[gi].first.box;
      auto it = std::find_if(by_box_.begin(), by_box_.end(),
                             [&](const auto& e) { return e.first == box; });
      if (it == by_box_.end()) {
        by_box_.push_back({box, {}});
        it = by_box_.end() - 1;
      }
      it->second.push_back(gi);
    }
    for (auto& [box, list] : by_box_) {
      std::sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return groups_[a].first.flat_begin < groups_[b].first.flat_begin;
      });
    }
  }

  std::vector<std::pair<Region, std::vector<int>>> groups_;
  std::vector<std::vector<Rect>> pieces_;  // by group: its region's rectangles
  std::vector<std::pair<Rect, std::vector<size_t>>> by_box_;
};

// Builds a ReshardPlan tensor by tensor. For each rank of the new layout: what its worker holds
// already stays (a local copy), and the rest comes from the old region's replicas, from the
// receiver's host where it has one, split over several senders when large, each part from the
// least-loaded sender so far.
class PlanBuilder {
 public:
  PlanBuilder(const StateSpec& state, const Placement& from, const Placement& to,
              const std::vector<int>& host_of_worker, const ReshardPlanOptions& options)
      : state_(state),
        from_(from),
        to_(to),
        host_of_worker_(host_of_worker),
        options_(options),
        from_rank_of_worker_(host_of_worker.size(), -1),
        from_coords_(from.layout.world()),
        to_coords_(to.layout.world()),
        sent_(host_of_worker.size(), 0),
        received_(host_of_worker.size(), 0) {
    plan_.state = state;
    plan_.from = from;
    plan_.to = to;
    plan_.host_of_worker = host_of_worker;
    for (int r = 0; r < from.layout.world(); ++r) {
      if (from.worker_of_rank[r] >= 0) from_rank_of_worker_[from.worker_of_rank[r]] = r;
    }
    for (int r = 0; r < from.layout.world(); ++r) from_coords_[r] = CoordinatesOf(from.layout, r);
    for (int r = 0; r < to.layout.world(); ++r) to_coords_[r] = CoordinatesOf(to.layout, r);
    for (int h : host_of_worker) num_hosts_ = std::max(num_hosts_, h + 1);
  }

  // The copies and transfers of tensor `ti` to every rank of the new layout that holds part of
  // it. kFailedPrecondition when part of it has no live holder.
  Status AddTensor(size_t ti) {
    const TensorSpec& t = state_.tensors[ti];
    const RegionTable from_region(t, state_.num_layers, from_.layout, from_coords_);
    const RegionTable to_region(t, state_.num_layers, to_.layout, to_coords_);
    const SourceGroups sources(from_region, from_);
    TensorWork w{static_cast<int>(ti),
                 t,
                 static_cast<int64_t>(t.element_size),
                 from_region,
                 sources,
                 std::vector<ReplicasByHost>(sources.size()),
                 SharedSenders(sources.size())};
    for (int b = 0; b < to_.layout.world(); ++b) {
      const Region& need = to_region.at(b);
      if (need.empty()) continue;
      ELASTRA_RETURN_IF_ERROR(AddReceiver(w, to_.worker_of_rank[b], need));
    }
    return OkStatus();
  }

  // The plan, with its largest per-worker totals.
  ReshardPlan Finish() {
    for (size_t w = 0; w < sent_.size(); ++w) {
      plan_.max_sent = std::max(plan_.max_sent, sent_[w]);
      plan_.max_received = std::max(plan_.max_received, received_[w]);
    }
    return std::move(plan_);
  }

 private:
  // One tensor's work in progress.
  struct TensorWork {
    int tensor;
    const TensorSpec& spec;
    int64_t esize;
    const RegionTable& from_region;
    const SourceGroups& sources;
    std::vector<ReplicasByHost> by_host;  // by group, built on first use
    SharedSenders shared;
  };

  // Worker `dst` needs `need` of the tensor.
  Status AddReceiver(TensorWork& w, int dst, const Region& need) {
    const int own_rank = from_rank_of_worker_[dst];
    const Region* held = own_rank >= 0 ? &w.from_region.at(own_rank) : nullptr;
    if (held != nullptr && held->box == need.box && held->flat_begin == need.flat_begin &&
        held->flat_end == need.flat_end) {
      KeepWhole(w, dst, need);
      return OkStatus();
    }
    std::vector<Rect> own;
    if (held != nullptr) own = held->Pieces();

    // The lower bound, counted independently of the transfers below.
    plan_.bytes_lower_bound +=
        (need.elements() - (held != nullptr ? OverlapElements(need, *held) : 0)) * w.esize;

    for (const Rect& piece : need.Pieces()) {
      for (const Rect& x : KeepOwn(w, dst, piece, own)) {
        ELASTRA_RETURN_IF_ERROR(Fetch(w, dst, x));
      }
    }
    return OkStatus();
  }

  // It holds exactly what it needs (most ranks of most changes): its pieces stay in place, as
  // the general case would find piece by piece.
  void KeepWhole(const TensorWork& w, int dst, const Region& need) {
    if (!options_.copies) {
      plan_.bytes_local += need.elements() * w.esize;  // the pieces cover the flat range
      return;
    }
    for (const Rect& keep : need.Pieces()) {
      plan_.copies.push_back({w.tensor, dst, dst, keep, keep.volume() * w.esize});
      plan_.bytes_local += keep.volume() * w.esize;
    }
  }

  // The parts of `piece` that `dst` holds already (`own`) stay as local copies; returns the
  // rest, which must come from other workers.
  std::vector<Rect> KeepOwn(const TensorWork& w, int dst, const Rect& piece,
                            const std::vector<Rect>& own) {
    std::vector<Rect> rest{piece};
    for (const Rect& o : own) {
      const Rect keep = Intersect(piece, o);
      if (!keep.empty()) {
        if (options_.copies) {
          plan_.copies.push_back({w.tensor, dst, dst, keep, keep.volume() * w.esize});
        }
        plan_.bytes_local += keep.volume() * w.esize;
      }
      std::vector<Rect> next;
      for (const Rect& r : rest) {
        for (const Rect& s : Subtract(r, o)) next.push_back(s);
      }
      rest.swap(next);
    }
    return rest;
  }

  // `x` to `dst` from the groups that hold it: from the replicas on its host where there are
  // any, else from the whole group. kFailedPrecondition when part of `x` has no live holder.
  Status Fetch(TensorWork& w, int dst, const Rect& x) {
    int64_t covered = 0;
    for (size_t gi : w.sources.Candidates(x)) {
      const std::vector<int>& replicas = w.sources.replicas(gi);
      if (!w.by_host[gi].built()) w.by_host[gi].Build(replicas, host_of_worker_, num_hosts_);
      std::vector<int> near;
      w.by_host[gi].On(host_of_worker_[dst], &near);
      const std::vector<int>& pool = near.empty() ? replicas : near;
      for (const Rect& q : w.sources.pieces(gi)) {
        const Rect y = Intersect(x, q);
        if (y.empty()) continue;
        covered += y.volume();
        SendFromPool(w, gi, pool, /*whole_group=*/near.empty(), dst, y);
      }
    }
    if (covered < x.volume()) {
      return FailedPreconditionError(
          "tensor '" + w.spec.name + "': rows [" + std::to_string(x.row_begin) + ", " +
          std::to_string(x.row_end) + ") x cols [" + std::to_string(x.col_begin) + ", " +
          std::to_string(x.col_end) + ") have no live holder (lost with a failed worker)");
    }
    return OkStatus();
  }

  // `y` to `dst` from group `gi`'s `pool` (the whole group, or its replicas on dst's host): in
  // parts of at most split_bytes over several senders, when the pool has more than one.
  void SendFromPool(TensorWork& w, size_t gi, const std::vector<int>& pool, bool whole_group,
                    int dst, const Rect& y) {
    const int64_t bytes = y.volume() * w.esize;
    int parts = 1;
    if (pool.size() > 1 && bytes > options_.split_bytes) {
      parts = static_cast<int>(std::min<int64_t>(
          pool.size(), (bytes + options_.split_bytes - 1) / options_.split_bytes));
    }
    // Each part from the least-loaded sender of the pool (ties: the first in pool order): a
    // heap of (bytes sent, place in the pool), O(pool + parts log pool) where a scan per part
    // was O(parts x pool), quadratic at thousands of replicas. The group's whole pool (no
    // replica on the receiver's host: at scale, every receiver of a grow) has one heap per
    // tensor, built once and shared by the receivers (SharedSenders); a pool of the receiver's
    // host, one of its own.
    MinLoadHeap own;
    MinLoadHeap* senders = nullptr;
    if (whole_group && (parts > 1 || pool.size() > kSharedHeapPool)) {
      senders = &w.shared.For(gi, pool, sent_);
    } else if (parts > 1) {
      own = BuildLoadHeap(pool, sent_);
      senders = &own;
    }
    for (const Rect& part : SplitRect(y, parts)) {
      int src = pool[0];
      size_t at = 0;  // src's place in the pool, when from a heap
      if (senders != nullptr) {
        at = PopLeastLoaded(senders, pool, sent_);
        src = pool[at];
      } else {
        for (int s : pool) {
          if (sent_[s] < sent_[src]) src = s;
        }
      }
      AddTransfer(w, src, dst, part);
      if (senders != nullptr) senders->push({sent_[src], at});
    }
  }

  void AddTransfer(const TensorWork& w, int src, int dst, const Rect& part) {
    const int64_t pb = part.volume() * w.esize;
    plan_.transfers.push_back({w.tensor, src, dst, part, pb});
    plan_.bytes_moved += pb;
    if (host_of_worker_[src] == host_of_worker_[dst]) plan_.bytes_same_host += pb;
    sent_[src] += pb;
    received_[dst] += pb;
  }

  const StateSpec& state_;
  const Placement& from_;
  const Placement& to_;
  const std::vector<int>& host_of_worker_;
  const ReshardPlanOptions& options_;
  ReshardPlan plan_;
  std::vector<int> from_rank_of_worker_;  // -1 where the worker held no old rank
  std::vector<Coordinates> from_coords_, to_coords_;
  std::vector<int64_t> sent_, received_;  // bytes by worker
  int num_hosts_ = 0;
};

}  // namespace

StatusOr<ReshardPlan> BuildReshardPlan(const StateSpec& state, const Placement& from,
                                       const Placement& to, const std::vector<int>& host_of_worker,
                                       const ReshardPlanOptions& options) {
  ELASTRA_RETURN_IF_ERROR(CheckInputs(state, from, to, host_of_worker.size()));
  PlanBuilder builder(state, from, to, host_of_worker, options);
  for (size_t ti = 0; ti < state.tensors.size(); ++ti) {
    ELASTRA_RETURN_IF_ERROR(builder.AddTensor(ti));
  }
  return builder.Finish();
}

}  // namespace elastra
