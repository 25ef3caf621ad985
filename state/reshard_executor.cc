// The reshard executor: see reshard_executor.h.
#include "state/reshard_executor.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <type_traits>
#include <utility>

#include "state/reshard_memory.h"
#include "state/reshard_schedule.h"
#include "state/reshard_transfer.h"

namespace elastra {
namespace {

using reshard_internal::Clock;
using reshard_internal::CopyRect;
using reshard_internal::DeviceMemory;
using reshard_internal::HostMemory;
using reshard_internal::ReshardTransfer;
using reshard_internal::SecondsSince;
using reshard_internal::SparePool;
using reshard_internal::Staging;
using reshard_internal::WholeRows;

}  // namespace

struct ReshardArena::Impl {
  Staging<HostMemory> staging;
};

ReshardArena::ReshardArena() : impl_(std::make_unique<Impl>()) {}
ReshardArena::~ReshardArena() = default;
int64_t ReshardArena::bytes() const { return impl_->staging.size; }
void ReshardArena::Release() { impl_->staging = Staging<HostMemory>{}; }

struct ReshardArenaAccess {
  static Staging<HostMemory>* Of(ReshardArena* arena) {
    return arena == nullptr ? nullptr : &arena->impl_->staging;
  }
};

namespace {

// The staging arena the caller keeps across reshards, or nullptr (host shards only).
template <class Memory>
Staging<Memory>* KeptArena(const ReshardExecutorOptions& options) {
  if constexpr (std::is_same_v<Memory, HostMemory>) {
    return ReshardArenaAccess::Of(options.arena);
  } else {
    return nullptr;
  }
}

// One worker's part of a reshard plan. Run() reads as its steps: check the old shards, work out
// this worker's groups and messages from the plan (reshard_schedule.h), then per group allocate
// the new shards, copy what stays on this worker, move the rest over the communicator by one of
// three schedules, and install the new shards in place of the old.
template <class Memory>
class ReshardRun {
 public:
  using Shards = std::map<std::string, typename Memory::Buffer>;

  ReshardRun(const ReshardPlan& plan, Communicator& comm, Shards* shards, Memory& memory,
             const ReshardExecutorOptions& options, ReshardExecutorStats* stats)
      : plan_(plan),
        tensors_(plan.state.tensors),
        shards_(shards),
        memory_(memory),
        options_(options),
        stats_(stats),
        me_(comm.rank()),
        regions_(RegionsOfWorker(plan, me_)),
        transfer_(plan, comm, shards, memory, options, stats, regions_,
                  KeptArena<Memory>(options)) {}

  Status Run() {
    const auto start = Clock::now();
    ELASTRA_RETURN_IF_ERROR(CheckOldShards());
    // Identical on every worker (they depend on the plan only), which is how both sides of a
    // pair agree on the messages between them.
    const std::vector<GroupWork> groups = WorkerGroups(plan_, me_, options_.group_bytes);
    transfer_.Plan();
    FindInPlace(groups);
    SpareUnreadShards(groups);
    stats_->seconds_plan += SecondsSince(start);
    for (const GroupWork& group : groups) {
      Shards fresh;
      ELASTRA_RETURN_IF_ERROR(AllocateNewShards(group, &fresh));
      ELASTRA_RETURN_IF_ERROR(CopyLocal(group, fresh));
      ELASTRA_RETURN_IF_ERROR(transfer_.Move(group, fresh));
      CompactInPlace(group, &fresh);
      InstallNewShards(group, fresh);
    }
    const auto t0 = Clock::now();
    spare_.Clear();
    stats_->seconds_allocate += SecondsSince(t0);
    return OkStatus();
  }

 private:
  // Every shard the old layout gives this worker is there with its size: bad input is refused
  // before any communication (kInvalidArgument).
  Status CheckOldShards() const {
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Region& old_region = regions_.old_region[i];
      if (old_region.empty()) continue;
      auto it = shards_->find(tensors_[i].name);
      const int64_t want = old_region.elements() * static_cast<int64_t>(tensors_[i].element_size);
      if (it == shards_->end()) {
        return InvalidArgumentError("reshard: missing shard of tensor '" + tensors_[i].name + "'");
      }
      if (static_cast<int64_t>(it->second.size()) != want) {
        return InvalidArgumentError("reshard: shard of '" + tensors_[i].name + "' has " +
                                    std::to_string(it->second.size()) + " bytes, expected " +
                                    std::to_string(want));
      }
    }
    return OkStatus();
  }

  // The group's new shards into `fresh`, except those whose region does not change (kept as
  // they are in InstallNewShards).
  Status AllocateNewShards(const GroupWork& group, Shards* fresh) {
    const auto t0 = Clock::now();
    int64_t fresh_bytes = 0;
    for (size_t i = group.tensor_begin; i < group.tensor_end; ++i) {
      if (regions_.new_region[i].empty()) continue;
      if (regions_.same[i]) continue;  // kept as it is
      if (in_place_[i]) continue;      // formed inside the old shard (CompactInPlace)
      const std::string& name = tensors_[i].name;
      const int64_t bytes = regions_.new_region[i].elements() * tensors_[i].element_size;
      // A buffer held for a tensor of which the old layout gives this worker nothing (a joining
      // worker's whole tensor from before Start()) is no source: the new shard takes its memory
      // over. Fresh memory would first have to be faulted in, on the downtime's critical path
      // (about 35 ms per 64 MiB on our test machines, against 6 ms to copy it).
      if (auto stale = shards_->find(name);
          regions_.old_region[i].empty() && stale != shards_->end()) {
        if (auto reused = Memory::Reuse(stale->second, static_cast<size_t>(bytes))) {
          fresh->emplace(name, std::move(*reused));
          fresh_bytes += bytes;
          stats_->bytes_reused += bytes;
          continue;
        }
      }
      if (auto spare = spare_.Take(static_cast<size_t>(bytes))) {
        fresh->emplace(name, std::move(*spare));
        fresh_bytes += bytes;
        stats_->bytes_reused += bytes;
        continue;
      }
      auto buffer = memory_.Allocate(static_cast<size_t>(bytes));
      if (!buffer.ok()) return buffer.status().WithContext("reshard: new shard of " + name);
      fresh->emplace(name, std::move(buffer).value());
      fresh_bytes += bytes;
      stats_->bytes_allocated += bytes;
    }
    stats_->peak_new_shard_bytes = std::max(stats_->peak_new_shard_bytes, fresh_bytes);
    stats_->seconds_allocate += SecondsSince(t0);
    return OkStatus();
  }

  // The rectangles this worker keeps, from its old shards into the new ones, row by row.
  Status CopyLocal(const GroupWork& group, Shards& fresh) {
    const auto t0 = Clock::now();
    for (const Transfer* t : group.copies) {
      if (regions_.same[t->tensor]) {
        stats_->bytes_copied += t->bytes;  // already in place
        continue;
      }
      if (in_place_[t->tensor]) continue;  // after the sends (CompactInPlace)
      const std::string& name = tensors_[t->tensor].name;
      ELASTRA_RETURN_IF_ERROR(CopyRect(memory_, t->rect, tensors_[t->tensor].element_size,
                                       Memory::Data((*shards_)[name]),
                                       regions_.old_region[t->tensor], Memory::Data(fresh[name]),
                                       regions_.new_region[t->tensor]));
      stats_->bytes_copied += t->bytes;
    }
    ELASTRA_RETURN_IF_ERROR(memory_.Wait());
    stats_->seconds_local += SecondsSince(t0);
    return OkStatus();
  }

  // Tensors whose new region lies inside the old one on this worker (its part grows thinner:
  // more TP or DP ranks, or pipeline stages): the new shard needs nothing from other workers, and
  // is formed inside the old shard's buffer once the group's sends have read it. The copies
  // cover exactly new ∩ old (reshard_plan.h), so they cover the new region when it is a subset.
  void FindInPlace(const std::vector<GroupWork>& groups) {
    in_place_.assign(tensors_.size(), 0);
    if (!Memory::kInPlace || !options_.reuse_memory) return;
    std::vector<int64_t> local(tensors_.size(), 0);
    for (const GroupWork& group : groups) {
      for (const Transfer* t : group.copies) local[t->tensor] += t->bytes;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const Region& to = regions_.new_region[i];
      if (to.empty() || regions_.old_region[i].empty() || regions_.same[i]) continue;
      in_place_[i] = local[i] == to.elements() * static_cast<int64_t>(tensors_[i].element_size);
    }
  }

  // The in-place tensors of the group: each kept row moved down to its place in the new shard,
  // in the order of the new shard. Both shards list the matrix's elements row-major, so an
  // element's place in the new shard is at most its place in the old, and moving the rows in
  // ascending order never overwrites a row not yet moved (rows that follow each other in both
  // shards move as one segment: memmove handles the overlap within it). The buffer then becomes
  // the new shard.
  void CompactInPlace(const GroupWork& group, Shards* fresh) {
    const auto t0 = Clock::now();
    struct Segment {
      int64_t to, from, bytes;
    };
    std::map<int, std::vector<Segment>> segments;  // by tensor
    for (const Transfer* t : group.copies) {
      if (!in_place_[t->tensor]) continue;
      const Rect& r = t->rect;
      const int64_t esize = tensors_[t->tensor].element_size;
      const Region& from = regions_.old_region[t->tensor];
      const Region& to = regions_.new_region[t->tensor];
      // One segment per row, or one for the rectangle where it is whole rows in both shards.
      const int64_t rows = WholeRows(r, from) && WholeRows(r, to) ? r.row_end - r.row_begin : 1;
      for (int64_t row = r.row_begin; row < r.row_end; row += rows) {
        segments[t->tensor].push_back({to.LocalOffset(row, r.col_begin) * esize,
                                       from.LocalOffset(row, r.col_begin) * esize,
                                       rows * (r.col_end - r.col_begin) * esize});
      }
      stats_->bytes_copied += t->bytes;
    }
    for (auto& [tensor, list] : segments) {
      std::sort(list.begin(), list.end(),
                [](const Segment& a, const Segment& b) { return a.to < b.to; });
      const std::string& name = tensors_[tensor].name;
      auto it = shards_->find(name);
      uint8_t* base = Memory::Data(it->second);
      for (const Segment& s : list) {
        if (s.to != s.from) Memory::MoveWithin(base + s.to, base + s.from, s.bytes);
      }
      const int64_t bytes = regions_.new_region[tensor].elements() * tensors_[tensor].element_size;
      Memory::Shrink(it->second, static_cast<size_t>(bytes));
      fresh->emplace(name, std::move(it->second));
      shards_->erase(it);
      stats_->bytes_in_place += bytes;
    }
    stats_->seconds_local += SecondsSince(t0);
  }

  // Old shards nothing reads any more become spare memory for new shards: faulting in fresh
  // memory costs far more than the copies into it (4 KiB pages: about 40 times a memcpy of the
  // same bytes on our test machines), while the old shards' pages are all in place already.
  void Spare(const std::string& name) {
    auto it = shards_->find(name);
    if (it == shards_->end()) return;
    if (options_.reuse_memory && Memory::Capacity(it->second) > 0) {
      spare_.Add(std::move(it->second));
    }
    shards_->erase(it);
  }

  // Old shards that no transfer or local copy of this worker reads (another replica serves
  // them, or the region was all its own and goes nowhere) are spare from the start.
  void SpareUnreadShards(const std::vector<GroupWork>& groups) {
    if (!options_.reuse_memory) return;
    std::vector<char> read(tensors_.size(), 0);
    for (const GroupWork& group : groups) {
      for (const Transfer* t : group.copies) read[t->tensor] = 1;
      for (const auto& [peer, list] : group.sends) {
        for (const Transfer* t : list) read[t->tensor] = 1;
      }
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (regions_.old_region[i].empty() || regions_.same[i] || read[i]) continue;
      Spare(tensors_[i].name);
    }
  }

  // The group's old shards become spare and its new ones take their place; shards whose region
  // did not change stay as they are.
  void InstallNewShards(const GroupWork& group, Shards& fresh) {
    const auto t0 = Clock::now();
    for (size_t i = group.tensor_begin; i < group.tensor_end; ++i) {
      if (!regions_.same[i]) Spare(tensors_[i].name);
    }
    for (auto& [name, bytes] : fresh) (*shards_)[name] = std::move(bytes);
    stats_->seconds_allocate += SecondsSince(t0);
  }

  const ReshardPlan& plan_;
  const std::vector<TensorSpec>& tensors_;
  Shards* shards_;
  Memory& memory_;
  const ReshardExecutorOptions& options_;
  ReshardExecutorStats* stats_;
  const int me_;
  const WorkerRegions regions_;
  ReshardTransfer<Memory> transfer_;  // the messages to and from the other workers
  SparePool<Memory> spare_;           // old shards no longer read, for new shards
  std::vector<char> in_place_;        // by tensor: see FindInPlace
};

template <class Memory>
Status Execute(const ReshardPlan& plan, Communicator& comm,
               std::map<std::string, typename Memory::Buffer>* shards, Memory& memory,
               const ReshardExecutorOptions& options, ReshardExecutorStats* stats) {
  ReshardExecutorStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = ReshardExecutorStats{};
  const int n = static_cast<int>(plan.host_of_worker.size());
  if (comm.size() < n) {
    return InvalidArgumentError("reshard: communicator has " + std::to_string(comm.size()) +
                                " ranks, the plan " + std::to_string(n) + " workers");
  }
  if (options.chunk_bytes == 0) return InvalidArgumentError("reshard: chunk_bytes must be > 0");
  if (comm.rank() >= n) return OkStatus();  // not part of this change
  return ReshardRun<Memory>(plan, comm, shards, memory, options, stats).Run();
}

}  // namespace

Status ExecuteReshard(const ReshardPlan& plan, Communicator& comm, ShardMap* shards,
                      const ReshardExecutorOptions& options, ReshardExecutorStats* stats) {
  HostMemory memory;
  memory.huge_pages = options.huge_pages;
  return Execute(plan, comm, shards, memory, options, stats);
}

Status ExecuteDeviceReshard(const ReshardPlan& plan, Communicator& comm, int device,
                            DeviceShardMap* shards, const ReshardExecutorOptions& options,
                            ReshardExecutorStats* stats) {
  if (options.concurrent_peers) {
    return InvalidArgumentError(
        "reshard: device shards move in pairwise rounds (concurrent_peers must be false)");
  }
  for (const auto& [name, buffer] : *shards) {
    if (buffer.size() > 0 && buffer.device() != device) {
      return InvalidArgumentError("reshard: shard of '" + name + "' is on device " +
                                  std::to_string(buffer.device()) + ", not " +
                                  std::to_string(device));
    }
  }
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCopier> copier, DeviceCopier::Create(device));
  DeviceMemory memory{copier.get()};
  Status s = Execute(plan, comm, shards, memory, options, stats);
  Status waited = copier->Wait();
  return s.ok() ? waited : s;
}

}  // namespace elastra
