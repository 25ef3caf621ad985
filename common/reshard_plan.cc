// The reshard planner: see reshard_plan.h and docs/resharding.md.
#include "common/reshard_plan.h"

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

}  // namespace

StatusOr<ReshardPlan> BuildReshardPlan(const StateSpec& state, const Placement& from,
                                       const Placement& to, const std::vector<int>& host_of_worker,
                                       const ReshardPlanOptions& options) {
  const size_t num_workers = host_of_worker.size();
  ELASTRA_RETURN_IF_ERROR(CheckPlacement("from", from, num_workers, /*allow_lost=*/true));
  ELASTRA_RETURN_IF_ERROR(CheckPlacement("to", to, num_workers));
  for (const auto& t : state.tensors) {
    ELASTRA_RETURN_IF_ERROR(ValidateTensor(t, state.num_layers, from.layout));
    ELASTRA_RETURN_IF_ERROR(ValidateTensor(t, state.num_layers, to.layout));
  }

  ReshardPlan plan;
  plan.state = state;
  plan.from = from;
  plan.to = to;
  plan.host_of_worker = host_of_worker;

  std::vector<int> from_rank_of_worker(num_workers, -1);
  for (int r = 0; r < from.layout.world(); ++r) {
    if (from.worker_of_rank[r] >= 0) from_rank_of_worker[from.worker_of_rank[r]] = r;
  }
  std::vector<Coordinates> from_coords(from.layout.world()), to_coords(to.layout.world());
  for (int r = 0; r < from.layout.world(); ++r) from_coords[r] = CoordinatesOf(from.layout, r);
  for (int r = 0; r < to.layout.world(); ++r) to_coords[r] = CoordinatesOf(to.layout, r);

  std::vector<int64_t> sent(num_workers, 0), received(num_workers, 0);
  int num_hosts = 0;
  for (int h : host_of_worker) num_hosts = std::max(num_hosts, h + 1);

  for (size_t ti = 0; ti < state.tensors.size(); ++ti) {
    const TensorSpec& t = state.tensors[ti];
    const int64_t esize = static_cast<int64_t>(t.element_size);
    // Distinct non-empty regions of the old layout and the workers holding each (replicas).
    // Two distinct regions of one tensor in one layout are disjoint (see sharding.h).
    const RegionTable from_region(t, state.num_layers, from.layout, from_coords);
    const RegionTable to_region(t, state.num_layers, to.layout, to_coords);
    std::vector<std::pair<Region, std::vector<int>>> groups;
    {
      // Each class's group, found once per class: kNone until a live rank of the class is seen.
      constexpr size_t kNone = static_cast<size_t>(-1);
      std::vector<size_t> group_of_class(from_region.classes(), kNone);
      std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, size_t> index;
      for (int r = 0; r < from.layout.world(); ++r) {
        const size_t c = from_region.ClassOf(r);
        const Region& g = from_region.ofClass(c);
        if (g.empty() || from.worker_of_rank[r] < 0) continue;
        if (group_of_class[c] == kNone) {
          auto key = std::make_tuple(g.box.row_begin, g.box.row_end, g.box.col_begin,
                                     g.box.col_end, g.flat_begin, g.flat_end);
          auto [it, added] = index.try_emplace(key, groups.size());
          if (added) groups.push_back({g, {}});
          group_of_class[c] = it->second;
        }
        groups[group_of_class[c]].second.push_back(from.worker_of_rank[r]);
      }
    }
    std::vector<ReplicasByHost> by_host(groups.size());
    std::vector<std::vector<Rect>> group_pieces;
    for (const auto& g : groups) group_pieces.push_back(g.first.Pieces());
    // Groups by box, each list ordered by flat range (disjoint within one box), so the groups a
    // rectangle touches are found by binary search instead of a scan over every group.
    std::vector<std::pair<Rect, std::vector<size_t>>> by_box;
    for (size_t gi = 0; gi < groups.size(); ++gi) {
      const Rect& box = groups[gi].first.box;
      auto it = std::find_if(by_box.begin(), by_box.end(),
                             [&](const auto& e) { return e.first == box; });
      if (it == by_box.end()) {
        by_box.push_back({box, {}});
        it = by_box.end() - 1;
      }
      it->second.push_back(gi);
    }
    for (auto& [box, list] : by_box) {
      std::sort(list.begin(), list.end(), [&](size_t a, size_t b) {
        return groups[a].first.flat_begin < groups[b].first.flat_begin;
      });
    }
    // The groups whose region may overlap `x`, in a deterministic order.
    auto candidates = [&](const Rect& x) {
      std::vector<size_t> out;
      for (const auto& [box, list] : by_box) {
        const Rect y = Intersect(x, box);
        if (y.empty()) continue;
        const int64_t w = box.col_end - box.col_begin;
        const int64_t lo = (y.row_begin - box.row_begin) * w + (y.col_begin - box.col_begin);
        const int64_t hi = (y.row_end - 1 - box.row_begin) * w + (y.col_end - 1 - box.col_begin) + 1;
        auto first = std::partition_point(list.begin(), list.end(), [&](size_t gi) {
          return groups[gi].first.flat_end <= lo;
        });
        for (auto it = first; it != list.end() && groups[*it].first.flat_begin < hi; ++it) {
          out.push_back(*it);
        }
      }
      return out;
    };

    SharedSenders shared(groups.size());
    for (int b = 0; b < to.layout.world(); ++b) {
      const Region& need = to_region.at(b);
      if (need.empty()) continue;
      const int dst = to.worker_of_rank[b];
      const int own_rank = from_rank_of_worker[dst];
      const Region* held = own_rank >= 0 ? &from_region.at(own_rank) : nullptr;
      if (held != nullptr && held->box == need.box && held->flat_begin == need.flat_begin &&
          held->flat_end == need.flat_end) {
        // It holds exactly what it needs (most ranks of most changes): its pieces stay in place,
        // as the general case below would find piece by piece.
        if (!options.copies) {
          plan.bytes_local += need.elements() * esize;  // the pieces cover the flat range
          continue;
        }
        for (const Rect& keep : need.Pieces()) {
          plan.copies.push_back({static_cast<int>(ti), dst, dst, keep, keep.volume() * esize});
          plan.bytes_local += keep.volume() * esize;
        }
        continue;
      }
      std::vector<Rect> own;
      if (held != nullptr) own = held->Pieces();

      // The lower bound, counted independently of the transfers below.
      plan.bytes_lower_bound +=
          (need.elements() - (held != nullptr ? OverlapElements(need, *held) : 0)) * esize;

      for (const Rect& piece : need.Pieces()) {
        std::vector<Rect> rest{piece};
        for (const Rect& o : own) {
          const Rect keep = Intersect(piece, o);
          if (!keep.empty()) {
            if (options.copies) {
              plan.copies.push_back({static_cast<int>(ti), dst, dst, keep, keep.volume() * esize});
            }
            plan.bytes_local += keep.volume() * esize;
          }
          std::vector<Rect> next;
          for (const Rect& r : rest) {
            for (const Rect& s : Subtract(r, o)) next.push_back(s);
          }
          rest.swap(next);
        }
        for (const Rect& x : rest) {
          int64_t covered = 0;
          for (size_t gi : candidates(x)) {
            const std::vector<int>& replicas = groups[gi].second;
            if (!by_host[gi].built()) by_host[gi].Build(replicas, host_of_worker, num_hosts);
            std::vector<int> near;
            by_host[gi].On(host_of_worker[dst], &near);
            const std::vector<int>& pool = near.empty() ? replicas : near;
            for (const Rect& q : group_pieces[gi]) {
              const Rect y = Intersect(x, q);
              if (y.empty()) continue;
              covered += y.volume();
              const int64_t bytes = y.volume() * esize;
              int parts = 1;
              if (pool.size() > 1 && bytes > options.split_bytes) {
                parts = static_cast<int>(std::min<int64_t>(
                    pool.size(), (bytes + options.split_bytes - 1) / options.split_bytes));
              }
              // Each part from the least-loaded sender of the pool (ties: the first in pool
              // order): a heap of (bytes sent, place in the pool), O(pool + parts log pool)
              // where a scan per part was O(parts x pool), quadratic at thousands of replicas.
              // The group's whole pool (no replica on the receiver's host: at scale, every
              // receiver of a grow) has one heap per tensor, built once and shared by the
              // receivers (SharedSenders); a pool of the receiver's host, one of its own.
              MinLoadHeap own;
              MinLoadHeap* senders = nullptr;
              if (near.empty() && (parts > 1 || pool.size() > kSharedHeapPool)) {
                senders = &shared.For(gi, pool, sent);
              } else if (parts > 1) {
                own = BuildLoadHeap(pool, sent);
                senders = &own;
              }
              for (const Rect& part : SplitRect(y, parts)) {
                int src = pool[0];
                size_t at = 0;  // src's place in the pool, when from a heap
                if (senders != nullptr) {
                  at = PopLeastLoaded(senders, pool, sent);
                  src = pool[at];
                } else {
                  for (int w : pool) {
                    if (sent[w] < sent[src]) src = w;
                  }
                }
                const int64_t pb = part.volume() * esize;
                plan.transfers.push_back({static_cast<int>(ti), src, dst, part, pb});
                plan.bytes_moved += pb;
                if (host_of_worker[src] == host_of_worker[dst]) plan.bytes_same_host += pb;
                sent[src] += pb;
                received[dst] += pb;
                if (senders != nullptr) senders->push({sent[src], at});
              }
            }
          }
          if (covered < x.volume()) {
            return FailedPreconditionError(
                "tensor '" + t.name + "': rows [" + std::to_string(x.row_begin) + ", " +
                std::to_string(x.row_end) + ") x cols [" + std::to_string(x.col_begin) + ", " +
                std::to_string(x.col_end) + ") have no live holder (lost with a failed worker)");
          }
        }
      }
    }
  }
  for (size_t w = 0; w < num_workers; ++w) {
    plan.max_sent = std::max(plan.max_sent, sent[w]);
    plan.max_received = std::max(plan.max_received, received[w]);
  }
  return plan;
}

}  // namespace elastra
