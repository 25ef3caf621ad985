// The reshard executor: see reshard_executor.h.
#include "state/reshard_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "state/device_copy.h"
#include "state/reshard_schedule.h"

namespace elastra {
namespace {

// Host shards: std::vector buffers, memcpy, nothing to wait for.
struct HostMemory {
  using Buffer = std::vector<uint8_t>;
  // Staging buffers are never zero-filled.
  struct Scratch {
    std::unique_ptr<uint8_t[]> bytes;
    uint8_t* data() { return bytes.get(); }
  };
  static uint8_t* Data(Buffer& b) { return b.data(); }
  StatusOr<Buffer> Allocate(size_t n) { return Buffer(n, 0); }
  // `old` as an n-byte buffer when its memory suffices (contents undefined), else nullopt.
  static std::optional<Buffer> Reuse(Buffer& old, size_t n) {
    if (old.capacity() < n) return std::nullopt;
    old.resize(n);
    return std::move(old);
  }
  StatusOr<Scratch> AllocateScratch(size_t n) {
    return Scratch{std::unique_ptr<uint8_t[]>(new uint8_t[n])};
  }
  Status Copy(void* dst, const void* src, size_t n) {
    std::memcpy(dst, src, n);
    return OkStatus();
  }
  Status Wait() { return OkStatus(); }
};

// Device shards: DeviceBuffers on one device, copies queued on the copier's stream. Wait() comes
// before every Send/Recv (the communicator's stream does not order itself after the copier's) and
// before the new shards are handed over.
struct DeviceMemory {
  using Buffer = DeviceBuffer;
  using Scratch = DeviceBuffer;
  DeviceCopier* copier;
  static uint8_t* Data(Buffer& b) { return static_cast<uint8_t*>(b.data()); }
  StatusOr<Buffer> Allocate(size_t n) { return DeviceBuffer::Allocate(copier->device(), n); }
  static std::optional<Buffer> Reuse(Buffer& old, size_t n) {
    if (old.size() != n) return std::nullopt;
    return std::move(old);
  }
  StatusOr<Scratch> AllocateScratch(size_t n) { return Allocate(n); }
  Status Copy(void* dst, const void* src, size_t n) { return copier->Copy(dst, src, n); }
  Status Wait() { return copier->Wait(); }
};

// Walks the bytes of a list of rectangles row by row, in plan order, as one stream: packs them
// from (or unpacks them into) local shard buffers.
template <class Memory>
class RectStream {
 public:
  struct Item {
    const Transfer* transfer;
    uint8_t* base;   // the local shard buffer
    Region region;   // the local region of that buffer
  };

  RectStream(std::vector<Item> items, Memory* memory)
      : items_(std::move(items)), memory_(memory) {
    for (const auto& it : items_) total_ += it.transfer->bytes;
  }
  int64_t total() const { return total_; }

  // Moves the next `n` bytes of the stream between `buffer` and the shards; `pack` copies from
  // the shards into the buffer.
  Status Transfer(uint8_t* buffer, int64_t n, bool pack) {
    while (n > 0) {
      const Item& it = items_[item_];
      const Rect& r = it.transfer->rect;
      const int64_t esize = it.transfer->bytes / r.volume();
      const int64_t row_bytes = (r.col_end - r.col_begin) * esize;
      const int64_t row = r.row_begin + row_;
      const int64_t take = std::min(n, row_bytes - offset_);
      uint8_t* local = it.base + it.region.LocalOffset(row, r.col_begin) * esize + offset_;
      ELASTRA_RETURN_IF_ERROR(pack ? memory_->Copy(buffer, local, take)
                                   : memory_->Copy(local, buffer, take));
      buffer += take;
      n -= take;
      offset_ += take;
      if (offset_ == row_bytes) {
        offset_ = 0;
        if (++row_ == r.row_end - r.row_begin) {
          row_ = 0;
          ++item_;
        }
      }
    }
    return OkStatus();
  }

 private:
  std::vector<Item> items_;
  Memory* memory_;
  int64_t total_ = 0;
  size_t item_ = 0;
  int64_t row_ = 0;
  int64_t offset_ = 0;
};

template <class Memory>
Status Execute(const ReshardPlan& plan, Communicator& comm,
               std::map<std::string, typename Memory::Buffer>* shards, Memory& memory,
               const ReshardExecutorOptions& options, ReshardExecutorStats* stats) {
  using Shards = std::map<std::string, typename Memory::Buffer>;
  using Stream = RectStream<Memory>;
  ReshardExecutorStats local_stats;
  if (stats == nullptr) stats = &local_stats;
  *stats = ReshardExecutorStats{};
  const int me = comm.rank();
  const int n = static_cast<int>(plan.host_of_worker.size());
  if (comm.size() < n) {
    return InvalidArgumentError("reshard: communicator has " + std::to_string(comm.size()) +
                                " ranks, the plan " + std::to_string(n) + " workers");
  }
  if (options.chunk_bytes == 0) return InvalidArgumentError("reshard: chunk_bytes must be > 0");
  if (me >= n) return OkStatus();  // not part of this change

  const auto& tensors = plan.state.tensors;
  const WorkerRegions regions = RegionsOfWorker(plan, me);
  const std::vector<Region>& old_region = regions.old_region;
  const std::vector<Region>& new_region = regions.new_region;
  // Tensors whose region does not change on this worker keep their buffer untouched.
  const std::vector<char>& same = regions.same;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (old_region[i].empty()) continue;
    auto it = shards->find(tensors[i].name);
    const int64_t want = old_region[i].elements() * static_cast<int64_t>(tensors[i].element_size);
    if (it == shards->end()) {
      return InvalidArgumentError("reshard: missing shard of tensor '" + tensors[i].name + "'");
    }
    if (static_cast<int64_t>(it->second.size()) != want) {
      return InvalidArgumentError("reshard: shard of '" + tensors[i].name + "' has " +
                                  std::to_string(it->second.size()) + " bytes, expected " +
                                  std::to_string(want));
    }
  }

  // Group boundaries and this worker's transfers by group and peer: identical on every worker
  // (they depend on the plan only).
  const std::vector<GroupWork> groups = WorkerGroups(plan, me, options.group_bytes);
  // For each of this worker's transfers: contiguous in both shards, and its byte offsets in the
  // sender's and the receiver's shard. Decided up front, on this thread, and alike on both sides
  // since it depends on the plan only.
  const std::vector<TransferGeometry> geometry = TransferGeometries(plan, me);

  const std::vector<int> partners = PairwisePartners(me, n);
  struct Counters {
    int64_t bytes = 0;
    int64_t messages = 0;
  };
  // Staging buffers: allocated on first use, no larger than needed.
  struct Staging {
    typename Memory::Scratch scratch;
    int64_t size = 0;
    StatusOr<uint8_t*> Get(Memory& memory, int64_t n) {
      if (n > size) {
        ELASTRA_ASSIGN_OR_RETURN(scratch, memory.AllocateScratch(static_cast<size_t>(n)));
        size = n;
      }
      return static_cast<uint8_t*>(scratch.data());
    }
  };
  Staging send_buf, recv_buf;
  const int64_t chunk = static_cast<int64_t>(options.chunk_bytes);

  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  for (const GroupWork& group : groups) {
    const size_t g = group.index;
    auto t0 = Clock::now();
    Shards fresh;
    int64_t fresh_bytes = 0;
    for (size_t i = group.tensor_begin; i < group.tensor_end; ++i) {
      if (new_region[i].empty()) continue;
      if (same[i]) continue;  // kept as it is below
      const int64_t bytes = new_region[i].elements() * tensors[i].element_size;
      // A buffer held for a tensor of which the old layout gives this worker nothing (a joining
      // worker's whole tensor from before Start()) is no source: the new shard takes its memory
      // over. Fresh memory would first have to be faulted in, on the downtime's critical path
      // (about 35 ms per 64 MiB on our test machines, against 6 ms to copy it).
      if (auto stale = shards->find(tensors[i].name);
          old_region[i].empty() && stale != shards->end()) {
        if (auto reused = Memory::Reuse(stale->second, static_cast<size_t>(bytes))) {
          fresh.emplace(tensors[i].name, std::move(*reused));
          fresh_bytes += bytes;
          continue;
        }
      }
      auto buffer = memory.Allocate(static_cast<size_t>(bytes));
      if (!buffer.ok()) return buffer.status().WithContext("reshard: new shard of " + tensors[i].name);
      fresh.emplace(tensors[i].name, std::move(buffer).value());
      fresh_bytes += bytes;
    }
    stats->peak_new_shard_bytes = std::max(stats->peak_new_shard_bytes, fresh_bytes);
    stats->seconds_allocate += since(t0);
    t0 = Clock::now();
    // Local copies, rectangle row by row.
    for (const Transfer* t : group.copies) {
      if (same[t->tensor]) {
        stats->bytes_copied += t->bytes;  // already in place
        continue;
      }
      const Rect& r = t->rect;
      const int64_t esize = tensors[t->tensor].element_size;
      const Region& from = old_region[t->tensor];
      const Region& to = new_region[t->tensor];
      const uint8_t* src = Memory::Data((*shards)[tensors[t->tensor].name]);
      uint8_t* dst = Memory::Data(fresh[tensors[t->tensor].name]);
      const int64_t row_bytes = (r.col_end - r.col_begin) * esize;
      for (int64_t row = r.row_begin; row < r.row_end; ++row) {
        ELASTRA_RETURN_IF_ERROR(memory.Copy(dst + to.LocalOffset(row, r.col_begin) * esize,
                                            src + from.LocalOffset(row, r.col_begin) * esize,
                                            row_bytes));
      }
      stats->bytes_copied += t->bytes;
    }
    ELASTRA_RETURN_IF_ERROR(memory.Wait());
    stats->seconds_local += since(t0);
    t0 = Clock::now();
    const uint32_t tag = static_cast<uint32_t>(g & 0xffffff);

    // One direction of one pair: the staged transfers as a stream cut into chunk-sized
    // messages, then each direct transfer as one message.
    struct Direction {
      std::vector<typename Stream::Item> staged;
      std::vector<std::pair<uint8_t*, int64_t>> direct;
    };
    // The messages to or from one peer (LayoutPeerMessages), bound to this worker's shards.
    auto build = [&](const std::vector<const Transfer*>& list, bool sending) {
      const PeerMessages m =
          LayoutPeerMessages(plan, geometry, list, sending, options.direct_min_bytes);
      Direction d;
      for (const Transfer* t : m.staged) {
        const std::string& name = tensors[t->tensor].name;
        d.staged.push_back(
            sending ? typename Stream::Item{t, Memory::Data((*shards)[name]), old_region[t->tensor]}
                    : typename Stream::Item{t, Memory::Data(fresh[name]), new_region[t->tensor]});
      }
      for (const DirectRun& r : m.direct) {
        const std::string& name = tensors[r.tensor].name;
        d.direct.push_back(
            {(sending ? Memory::Data((*shards)[name]) : Memory::Data(fresh[name])) + r.offset,
             r.bytes});
      }
      stats->bytes_staged += m.staged_bytes;
      return d;
    };
    auto send_to = [&](int peer, Direction d, Staging& staging, Counters* c) -> Status {
      Stream stream(std::move(d.staged), &memory);
      for (int64_t left = stream.total(); left > 0;) {
        const int64_t m = std::min(chunk, left);
        ELASTRA_ASSIGN_OR_RETURN(uint8_t* buf, staging.Get(memory, m));
        ELASTRA_RETURN_IF_ERROR(stream.Transfer(buf, m, /*pack=*/true));
        ELASTRA_RETURN_IF_ERROR(memory.Wait());
        ELASTRA_RETURN_IF_ERROR(comm.Send(buf, m, peer, tag, options.timeout));
        left -= m;
        c->bytes += m;
        ++c->messages;
      }
      for (const auto& [ptr, bytes] : d.direct) {
        ELASTRA_RETURN_IF_ERROR(comm.Send(ptr, bytes, peer, tag, options.timeout));
        c->bytes += bytes;
        ++c->messages;
      }
      return OkStatus();
    };
    auto recv_from = [&](int peer, Direction d, Staging& staging, Counters* c) -> Status {
      Stream stream(std::move(d.staged), &memory);
      for (int64_t left = stream.total(); left > 0;) {
        const int64_t m = std::min(chunk, left);
        ELASTRA_ASSIGN_OR_RETURN(uint8_t* buf, staging.Get(memory, m));
        ELASTRA_RETURN_IF_ERROR(comm.Recv(buf, m, peer, tag, options.timeout));
        ELASTRA_RETURN_IF_ERROR(stream.Transfer(buf, m, /*pack=*/false));
        ELASTRA_RETURN_IF_ERROR(memory.Wait());  // before the buffer takes the next chunk
        left -= m;
        c->bytes += m;
      }
      for (const auto& [ptr, bytes] : d.direct) {
        ELASTRA_RETURN_IF_ERROR(comm.Recv(ptr, bytes, peer, tag, options.timeout));
        c->bytes += bytes;
      }
      return OkStatus();
    };
    static const std::vector<const Transfer*> kNone;
    auto list_of = [&](const std::map<int, std::vector<const Transfer*>>& m, int peer)
        -> const std::vector<const Transfer*>& {
      auto it = m.find(peer);
      return it == m.end() ? kNone : it->second;
    };

    Counters sent_counters, received_counters;
    if (options.batched && comm.has_exchange()) {
      // Everything of the group posted at once: per peer, the packed stream as one message, then
      // the direct runs; both sides list a pair's messages in the same order (build() depends on
      // the plan only).
      std::vector<PointToPoint> ops;
      std::vector<typename Memory::Scratch> buffers;
      struct Unpack {
        std::vector<typename Stream::Item> items;
        uint8_t* buffer;
        int64_t bytes;
      };
      std::vector<Unpack> unpacks;
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        for (bool sending : {true, false}) {
          const auto& list = list_of(sending ? group.sends : group.recvs, peer);
          if (list.empty()) continue;
          Direction d = build(list, sending);
          int64_t staged = 0;
          for (const auto& it : d.staged) staged += it.transfer->bytes;
          if (staged > 0) {
            auto scratch = memory.AllocateScratch(static_cast<size_t>(staged));
            if (!scratch.ok()) return scratch.status().WithContext("reshard: staging buffer");
            auto* buffer = static_cast<uint8_t*>(scratch->data());
            buffers.push_back(std::move(scratch).value());
            if (sending) {
              Stream stream(std::move(d.staged), &memory);
              ELASTRA_RETURN_IF_ERROR(stream.Transfer(buffer, staged, /*pack=*/true));
            } else {
              unpacks.push_back({std::move(d.staged), buffer, staged});
            }
            ops.push_back({sending, buffer, static_cast<size_t>(staged), peer});
          }
          for (const auto& [ptr, bytes] : d.direct) {
            ops.push_back({sending, ptr, static_cast<size_t>(bytes), peer});
          }
        }
      }
      ELASTRA_RETURN_IF_ERROR(memory.Wait());  // packed before anything is sent
      if (!ops.empty()) ELASTRA_RETURN_IF_ERROR(comm.Exchange(ops, tag, options.timeout));
      for (auto& u : unpacks) {
        Stream stream(std::move(u.items), &memory);
        ELASTRA_RETURN_IF_ERROR(stream.Transfer(u.buffer, u.bytes, /*pack=*/false));
      }
      ELASTRA_RETURN_IF_ERROR(memory.Wait());
      for (const PointToPoint& op : ops) {
        Counters& c = op.send ? sent_counters : received_counters;
        c.bytes += static_cast<int64_t>(op.bytes);
        c.messages += 1;
      }
    } else if (options.concurrent_peers) {
      // One thread per peer and direction: a send to j is matched only by j's thread receiving
      // from this worker, so the pairs cannot wait on one another.
      struct Job {
        int peer;
        bool sending;
        Status status;
        Counters counters;
      };
      std::vector<Job> jobs;
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        if (!list_of(group.sends, peer).empty()) jobs.push_back({peer, true, {}, {}});
        if (!list_of(group.recvs, peer).empty()) jobs.push_back({peer, false, {}, {}});
      }
      // Built here: build() touches the shard maps, which the threads only read through it.
      std::vector<Direction> dirs;
      for (const Job& j : jobs) {
        dirs.push_back(j.sending ? build(list_of(group.sends, j.peer), true)
                                 : build(list_of(group.recvs, j.peer), false));
      }
      std::vector<std::thread> threads;
      for (size_t i = 0; i < jobs.size(); ++i) {
        threads.emplace_back([&, i] {
          Staging staging;
          Job& j = jobs[i];
          j.status = j.sending ? send_to(j.peer, std::move(dirs[i]), staging, &j.counters)
                               : recv_from(j.peer, std::move(dirs[i]), staging, &j.counters);
          if (!j.status.ok()) comm.Abort();  // the other threads fail fast instead of waiting
        });
      }
      for (auto& t : threads) t.join();
      for (const Job& j : jobs) {
        Counters& c = j.sending ? sent_counters : received_counters;
        c.bytes += j.counters.bytes;
        c.messages += j.counters.messages;
      }
      for (const Job& j : jobs) ELASTRA_RETURN_IF_ERROR(j.status);
    } else {
      // Pairwise rounds (partner = me XOR k): the lower rank sends its whole part first, the
      // higher receives first.
      for (const int peer : partners) {
        const auto& out = list_of(group.sends, peer);
        const auto& in = list_of(group.recvs, peer);
        auto do_send = [&]() -> Status {
          return out.empty() ? OkStatus()
                             : send_to(peer, build(out, true), send_buf, &sent_counters);
        };
        auto do_recv = [&]() -> Status {
          return in.empty() ? OkStatus()
                            : recv_from(peer, build(in, false), recv_buf, &received_counters);
        };
        if (me < peer) {
          ELASTRA_RETURN_IF_ERROR(do_send());
          ELASTRA_RETURN_IF_ERROR(do_recv());
        } else {
          ELASTRA_RETURN_IF_ERROR(do_recv());
          ELASTRA_RETURN_IF_ERROR(do_send());
        }
      }
    }
    stats->bytes_sent += sent_counters.bytes;
    stats->messages_sent += sent_counters.messages;
    stats->bytes_received += received_counters.bytes;
    stats->seconds_transfer += since(t0);
    t0 = Clock::now();
    for (size_t i = group.tensor_begin; i < group.tensor_end; ++i) {
      if (!same[i]) shards->erase(tensors[i].name);
    }
    for (auto& [name, bytes] : fresh) (*shards)[name] = std::move(bytes);
    stats->seconds_allocate += since(t0);
  }
  return OkStatus();
}

}  // namespace

Status ExecuteReshard(const ReshardPlan& plan, Communicator& comm, ShardMap* shards,
                      const ReshardExecutorOptions& options, ReshardExecutorStats* stats) {
  HostMemory memory;
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
