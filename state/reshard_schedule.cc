// The reshard executor's pure phases: see reshard_schedule.h.
#include "state/reshard_schedule.h"

#include <algorithm>

namespace elastra {
namespace {

// A transfer's rectangle is one run of bytes in a shard when it is a single row or spans the
// whole width of the region's box.
bool Contiguous(const Rect& r, const Region& region) {
  return r.row_end - r.row_begin == 1 ||
         (r.col_begin == region.box.col_begin && r.col_end == region.box.col_end);
}

}  // namespace

int64_t LargestShardBytes(const TensorSpec& t, const Layout& layout) {
  const Rect full = FullRect(t.shape);
  int64_t rows = full.row_end, cols = full.col_end;
  if (t.rule.tp_split_dim >= 0 && layout.tp > 1) {
    // As LocalRegion: a 1-D tensor's dimension 0 is the columns of its matrix view.
    int64_t& n = (t.shape.size() == 1 || t.rule.tp_split_dim == 1) ? cols : rows;
    n = (n + layout.tp - 1) / layout.tp;
  }
  int64_t elements = rows * cols;
  if (t.rule.zero && layout.dp > 1) elements = (elements + layout.dp - 1) / layout.dp;
  return elements * static_cast<int64_t>(t.element_size);
}

std::vector<size_t> GroupTensors(const StateSpec& state, const Layout& to, int64_t group_bytes) {
  const auto& tensors = state.tensors;
  // Per pipeline stage: a layer-owned tensor is held by one stage only.
  const int stages = std::max(to.pp, 1);
  std::vector<int64_t> acc(static_cast<size_t>(stages), 0);
  std::vector<size_t> bounds{0};
  for (size_t i = 0; i < tensors.size(); ++i) {
    const int64_t b = LargestShardBytes(tensors[i], to);
    int first = 0, last = stages;
    if (tensors[i].rule.layer >= 0) {
      first = StageOfLayer(state.num_layers, stages, tensors[i].rule.layer);
      last = first + 1;
    }
    bool full = false;
    for (int s = first; s < last; ++s) full |= acc[s] > 0 && acc[s] + b > group_bytes;
    if (full) {
      bounds.push_back(i);
      std::fill(acc.begin(), acc.end(), 0);
    }
    for (int s = first; s < last; ++s) acc[s] += b;
  }
  bounds.push_back(tensors.size());
  return bounds;
}

std::vector<GroupWork> WorkerGroups(const ReshardPlan& plan, int worker, int64_t group_bytes) {
  const std::vector<size_t> bounds = GroupTensors(plan.state, plan.to.layout, group_bytes);
  std::vector<GroupWork> groups(bounds.size() - 1);
  std::vector<size_t> group_of(plan.state.tensors.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].index = g;
    groups[g].tensor_begin = bounds[g];
    groups[g].tensor_end = bounds[g + 1];
    for (size_t i = bounds[g]; i < bounds[g + 1]; ++i) group_of[i] = g;
  }
  for (const Transfer& t : plan.transfers) {
    if (t.src == worker) groups[group_of[t.tensor]].sends[t.dst].push_back(&t);
    if (t.dst == worker) groups[group_of[t.tensor]].recvs[t.src].push_back(&t);
  }
  for (const Transfer& t : plan.copies) {
    if (t.dst == worker) groups[group_of[t.tensor]].copies.push_back(&t);
  }
  return groups;
}

WorkerRegions RegionsOfWorker(const ReshardPlan& plan, int worker) {
  const auto& tensors = plan.state.tensors;
  const int from_rank = plan.from.RankOfWorker(worker);
  const int to_rank = plan.to.RankOfWorker(worker);
  WorkerRegions r;
  r.old_region.resize(tensors.size());
  r.new_region.resize(tensors.size());
  r.same.assign(tensors.size(), 0);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (from_rank >= 0) {
      r.old_region[i] = LocalRegion(tensors[i], plan.state.num_layers, plan.from.layout,
                                    CoordinatesOf(plan.from.layout, from_rank));
    }
    if (to_rank >= 0) {
      r.new_region[i] = LocalRegion(tensors[i], plan.state.num_layers, plan.to.layout,
                                    CoordinatesOf(plan.to.layout, to_rank));
    }
    const Region& a = r.old_region[i];
    const Region& b = r.new_region[i];
    r.same[i] = !a.empty() && !b.empty() && a.box == b.box && a.flat_begin == b.flat_begin &&
                a.flat_end == b.flat_end;
  }
  return r;
}

std::vector<TransferGeometry> TransferGeometries(const ReshardPlan& plan, int worker) {
  const auto& tensors = plan.state.tensors;
  const int n = static_cast<int>(plan.host_of_worker.size());
  // Regions of the workers this one trades with, each computed once, on first use.
  std::vector<std::vector<Region>> cache_from(n), cache_to(n);
  auto region_of = [&](bool old_layout, int w, int tensor) -> const Region& {
    auto& cache = old_layout ? cache_from[w] : cache_to[w];
    const Placement& p = old_layout ? plan.from : plan.to;
    if (cache.empty()) {
      cache.resize(tensors.size());
      const int rank = p.RankOfWorker(w);
      for (size_t i = 0; rank >= 0 && i < tensors.size(); ++i) {
        cache[i] =
            LocalRegion(tensors[i], plan.state.num_layers, p.layout, CoordinatesOf(p.layout, rank));
      }
    }
    return cache[tensor];
  };
  std::vector<TransferGeometry> geometry(plan.transfers.size());
  for (size_t i = 0; i < plan.transfers.size(); ++i) {
    const Transfer& t = plan.transfers[i];
    if (t.src != worker && t.dst != worker) continue;
    const Region& from = region_of(true, t.src, t.tensor);
    const Region& to = region_of(false, t.dst, t.tensor);
    const int64_t esize = tensors[t.tensor].element_size;
    geometry[i].src_contiguous = Contiguous(t.rect, from);
    geometry[i].dst_contiguous = Contiguous(t.rect, to);
    geometry[i].both_contiguous = geometry[i].src_contiguous && geometry[i].dst_contiguous;
    geometry[i].src_offset = from.LocalOffset(t.rect.row_begin, t.rect.col_begin) * esize;
    geometry[i].dst_offset = to.LocalOffset(t.rect.row_begin, t.rect.col_begin) * esize;
  }
  return geometry;
}

PeerMessages LayoutPeerMessages(const ReshardPlan& plan,
                                const std::vector<TransferGeometry>& geometry,
                                const std::vector<const Transfer*>& transfers, bool sending,
                                int64_t direct_min_bytes) {
  auto geo = [&](const Transfer* t) -> const TransferGeometry& {
    return geometry[static_cast<size_t>(t - plan.transfers.data())];
  };
  PeerMessages m;
  for (size_t i = 0; i < transfers.size();) {
    const Transfer* t = transfers[i];
    const TransferGeometry& first = geo(t);
    size_t j = i + 1;
    int64_t run = t->bytes;
    if (first.both_contiguous) {
      while (j < transfers.size() && transfers[j]->tensor == t->tensor &&
             geo(transfers[j]).both_contiguous &&
             geo(transfers[j]).src_offset == first.src_offset + run &&
             geo(transfers[j]).dst_offset == first.dst_offset + run) {
        run += transfers[j]->bytes;
        ++j;
      }
    }
    if ((first.src_contiguous || first.dst_contiguous) && run >= direct_min_bytes) {
      RunMessage r;
      r.tensor = t->tensor;
      r.bytes = run;
      r.direct = sending ? first.src_contiguous : first.dst_contiguous;
      r.offset = sending ? first.src_offset : first.dst_offset;
      r.transfers.assign(transfers.begin() + static_cast<std::ptrdiff_t>(i),
                         transfers.begin() + static_cast<std::ptrdiff_t>(j));
      m.runs.push_back(std::move(r));
    } else {
      for (size_t k = i; k < j; ++k) {
        m.staged.push_back(transfers[k]);
        m.staged_bytes += transfers[k]->bytes;
      }
    }
    i = j;
  }
  return m;
}

std::vector<int> PairwisePartners(int worker, int n) {
  int pow2 = 1;
  while (pow2 < n) pow2 *= 2;
  std::vector<int> partners;
  for (int k = 1; k < pow2; ++k) {
    if ((worker ^ k) < n) partners.push_back(worker ^ k);
  }
  return partners;
}

}  // namespace elastra
