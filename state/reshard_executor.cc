// The reshard executor: see reshard_executor.h.
#include "state/reshard_executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>
#include <utility>

#include "state/reshard_memory.h"
#include "state/reshard_schedule.h"

namespace elastra {
namespace {

using reshard_internal::AppendRectSegments;
using reshard_internal::Clock;
using reshard_internal::CopyRect;
using reshard_internal::Counters;
using reshard_internal::DeviceMemory;
using reshard_internal::HostMemory;
using reshard_internal::RectStream;
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
        comm_(comm),
        shards_(shards),
        memory_(memory),
        options_(options),
        stats_(stats),
        me_(comm.rank()),
        n_(static_cast<int>(plan.host_of_worker.size())),
        regions_(RegionsOfWorker(plan, me_)),
        arena_(KeptArena<Memory>(options)) {
    if (arena_ == nullptr) arena_ = &own_arena_;
  }

  Status Run() {
    const auto start = Clock::now();
    ELASTRA_RETURN_IF_ERROR(CheckOldShards());
    // Identical on every worker (they depend on the plan only), which is how both sides of a
    // pair agree on the messages between them. The geometries cut the staged messages, the
    // partners order the serial rounds: ExchangeV needs neither.
    const std::vector<GroupWork> groups = WorkerGroups(plan_, me_, options_.group_bytes);
    if (!Vectored()) geometry_ = TransferGeometries(plan_, me_);
    if (!options_.batched || !comm_.has_exchange()) partners_ = PairwisePartners(me_, n_);
    FindInPlace(groups);
    SpareUnreadShards(groups);
    stats_->seconds_plan += SecondsSince(start);
    for (const GroupWork& group : groups) {
      Shards fresh;
      ELASTRA_RETURN_IF_ERROR(AllocateNewShards(group, &fresh));
      ELASTRA_RETURN_IF_ERROR(CopyLocal(group, fresh));
      ELASTRA_RETURN_IF_ERROR(MoveRemote(group, fresh));
      CompactInPlace(group, &fresh);
      InstallNewShards(group, fresh);
    }
    const auto t0 = Clock::now();
    spare_.Clear();
    stats_->seconds_allocate += SecondsSince(t0);
    return OkStatus();
  }

 private:
  using Stream = RectStream<Memory>;

  // One message of its own (a RunMessage) bound to this worker's buffers: straight from or into
  // the shard at `direct`, or, where null, packed or unpacked through a staging buffer.
  struct BoundRun {
    uint8_t* direct = nullptr;
    int64_t bytes = 0;
    std::vector<typename Stream::Item> items;  // when not direct
  };

  // One direction of one pair, bound to this worker's buffers: the staged transfers as a stream
  // (cut into chunk-sized messages, or one message when batched), then each run as one message.
  struct Direction {
    std::vector<typename Stream::Item> staged;
    std::vector<BoundRun> runs;
    // Bytes that pass through staging buffers on this side: the stream and the runs not direct.
    int64_t StagingBytes() const {
      int64_t n = 0;
      for (const auto& it : staged) n += it.transfer->bytes;
      for (const BoundRun& r : runs) n += r.direct == nullptr ? r.bytes : 0;
      return n;
    }
  };

  // Whether the batched schedule runs over ExchangeV (host shards only).
  bool Vectored() const {
    return std::is_same_v<Memory, HostMemory> && options_.batched && options_.vectored &&
           comm_.has_exchange() && comm_.has_vectored_exchange();
  }

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

  // The group's transfers to and from the other workers, by the schedule the options and the
  // communicator allow: batched (one Exchange), one thread per peer and direction, or pairwise
  // rounds.
  Status MoveRemote(const GroupWork& group, Shards& fresh) {
    const auto t0 = Clock::now();
    const uint32_t tag = static_cast<uint32_t>(group.index & 0xffffff);
    Counters sent, received;
    if (options_.batched && comm_.has_exchange()) {
      ELASTRA_RETURN_IF_ERROR(ExchangeBatched(group, fresh, tag, &sent, &received));
    } else if (options_.concurrent_peers) {
      ELASTRA_RETURN_IF_ERROR(MoveOnPeerThreads(group, fresh, tag, &sent, &received));
    } else {
      ELASTRA_RETURN_IF_ERROR(MoveInPairwiseRounds(group, fresh, tag, &sent, &received));
    }
    stats_->bytes_sent += sent.bytes;
    stats_->messages_sent += sent.messages;
    stats_->bytes_received += received.bytes;
    stats_->seconds_transfer += SecondsSince(t0);
    return OkStatus();
  }

  // The messages to or from one peer (LayoutPeerMessages), bound to this worker's shards: the
  // old ones when sending, the group's new ones when receiving. Touches the shard maps, so it
  // runs on this thread only.
  Direction Bind(const std::vector<const Transfer*>& list, bool sending, Shards& fresh) {
    const PeerMessages m =
        LayoutPeerMessages(plan_, geometry_, list, sending, options_.direct_min_bytes);
    auto shard = [&](int tensor) {
      const std::string& name = tensors_[tensor].name;
      return sending ? Memory::Data((*shards_)[name]) : Memory::Data(fresh[name]);
    };
    auto item = [&](const Transfer* t) {
      return typename Stream::Item{
          t, shard(t->tensor),
          sending ? regions_.old_region[t->tensor] : regions_.new_region[t->tensor]};
    };
    Direction d;
    for (const Transfer* t : m.staged) d.staged.push_back(item(t));
    for (const RunMessage& r : m.runs) {
      BoundRun run;
      run.bytes = r.bytes;
      if (r.direct) {
        run.direct = shard(r.tensor) + r.offset;
      } else {
        for (const Transfer* t : r.transfers) run.items.push_back(item(t));
      }
      d.runs.push_back(std::move(run));
    }
    stats_->bytes_staged += d.StagingBytes();
    return d;
  }

  static const std::vector<const Transfer*>& ListOf(
      const std::map<int, std::vector<const Transfer*>>& by_peer, int peer) {
    static const std::vector<const Transfer*> kNone;
    auto it = by_peer.find(peer);
    return it == by_peer.end() ? kNone : it->second;
  }

  // The batched schedule's messages of one group in the order both sides post them: per peer
  // (ascending) its sends, then its receives; each direction's staged stream as one message,
  // then its runs. Every staged byte has its place in one arena (arena_, reused by the next
  // group), so a group allocates nothing when the arena is large enough already.
  struct Batch {
    struct Unpack {
      std::vector<typename Stream::Item> items;
      int64_t at;  // in the arena
      int64_t bytes;
    };
    std::vector<PointToPoint> ops;
    std::vector<Unpack> unpacks;  // the receives' staged bytes, for after the exchange
  };

  // Batched: pack every staged send, post the whole group at once in one Exchange() (which
  // waits for all of it), then unpack the staged receives. Host shards over a communicator with
  // ExchangeV() need no packing: see ExchangeVectored.
  Status ExchangeBatched(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                         Counters* received) {
    if (Vectored()) return ExchangeVectored(group, fresh, tag, sent, received);
    Batch batch;
    ELASTRA_ASSIGN_OR_RETURN(uint8_t * arena, PackBatch(group, fresh, &batch));
    ELASTRA_RETURN_IF_ERROR(memory_.Wait());  // packed before anything is sent
    if (!batch.ops.empty()) {
      ELASTRA_RETURN_IF_ERROR(comm_.Exchange(batch.ops, tag, options_.timeout));
    }
    for (auto& u : batch.unpacks) {
      Stream stream(std::move(u.items), &memory_);
      ELASTRA_RETURN_IF_ERROR(stream.Transfer(arena + u.at, u.bytes, /*pack=*/false));
    }
    ELASTRA_RETURN_IF_ERROR(memory_.Wait());
    for (const PointToPoint& op : batch.ops) {
      Counters& c = op.send ? *sent : *received;
      c.bytes += static_cast<int64_t>(op.bytes);
      c.messages += 1;
    }
    return OkStatus();
  }

  // The whole group in one ExchangeV(): per peer (ascending) its sends, then its receives, each
  // the rows of its transfers in plan order, straight from the old shards and into the new ones
  // (both sides list a pair's transfers in plan order, so the byte streams match). No staging:
  // a strided rectangle is not packed on one side and unpacked on the other.
  Status ExchangeVectored(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                          Counters* received) {
    std::vector<VectoredTransfer> ops;
    for (int peer = 0; peer < n_; ++peer) {
      if (peer == me_) continue;
      for (bool sending : {true, false}) {
        const auto& list = ListOf(sending ? group.sends : group.recvs, peer);
        if (list.empty()) continue;
        VectoredTransfer op{sending, peer, {}};
        Counters& c = sending ? *sent : *received;
        for (const Transfer* t : list) {
          const std::string& name = tensors_[t->tensor].name;
          uint8_t* base = Memory::Data(sending ? (*shards_)[name] : fresh[name]);
          const Region& region =
              sending ? regions_.old_region[t->tensor] : regions_.new_region[t->tensor];
          AppendRectSegments(t->rect, t->bytes, base, region, &op.segments);
          c.bytes += t->bytes;
        }
        c.messages += 1;
        ops.push_back(std::move(op));
      }
    }
    if (ops.empty()) return OkStatus();
    return comm_.ExchangeV(ops, tag, options_.timeout);
  }

  // The batch of one group: binds every direction, places its staged bytes in the arena and
  // packs the sends' (queued on the memory; the caller waits). Returns the arena.
  StatusOr<uint8_t*> PackBatch(const GroupWork& group, Shards& fresh, Batch* batch) {
    struct Bound {
      int peer;
      bool sending;
      Direction d;
    };
    std::vector<Bound> bound;
    int64_t arena_bytes = 0;
    for (int peer = 0; peer < n_; ++peer) {
      if (peer == me_) continue;
      for (bool sending : {true, false}) {
        const auto& list = ListOf(sending ? group.sends : group.recvs, peer);
        if (list.empty()) continue;
        bound.push_back({peer, sending, Bind(list, sending, fresh)});
        arena_bytes += bound.back().d.StagingBytes();
      }
    }
    uint8_t* arena = nullptr;
    if (arena_bytes > 0) {
      auto got = arena_->Get(memory_, arena_bytes);
      if (!got.ok()) return got.status().WithContext("reshard: staging buffer");
      arena = *got;
    }
    int64_t at = 0;
    // Staged bytes at arena + at: packed now when sending, unpacked after the exchange.
    auto stage = [&](std::vector<typename Stream::Item> items, int64_t bytes, bool sending,
                     int peer) -> Status {
      if (sending) {
        Stream stream(std::move(items), &memory_);
        ELASTRA_RETURN_IF_ERROR(stream.Transfer(arena + at, bytes, /*pack=*/true));
      } else {
        batch->unpacks.push_back({std::move(items), at, bytes});
      }
      batch->ops.push_back({sending, arena + at, static_cast<size_t>(bytes), peer});
      at += bytes;
      return OkStatus();
    };
    for (Bound& b : bound) {
      int64_t staged = 0;
      for (const auto& it : b.d.staged) staged += it.transfer->bytes;
      if (staged > 0)
        ELASTRA_RETURN_IF_ERROR(stage(std::move(b.d.staged), staged, b.sending, b.peer));
      for (BoundRun& r : b.d.runs) {
        if (r.direct != nullptr) {
          batch->ops.push_back({b.sending, r.direct, static_cast<size_t>(r.bytes), b.peer});
        } else {
          ELASTRA_RETURN_IF_ERROR(stage(std::move(r.items), r.bytes, b.sending, b.peer));
        }
      }
    }
    return arena;
  }

  // One thread per peer and direction: a send to j is matched only by j's thread receiving from
  // this worker, so the pairs cannot wait on one another.
  Status MoveOnPeerThreads(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                           Counters* received) {
    struct Job {
      int peer;
      bool sending;
      Status status;
      Counters counters;
    };
    std::vector<Job> jobs;
    for (int peer = 0; peer < n_; ++peer) {
      if (peer == me_) continue;
      if (!ListOf(group.sends, peer).empty()) jobs.push_back({peer, true, {}, {}});
      if (!ListOf(group.recvs, peer).empty()) jobs.push_back({peer, false, {}, {}});
    }
    // Bound here: Bind() touches the shard maps, which the threads only read through it.
    std::vector<Direction> dirs;
    for (const Job& j : jobs) {
      dirs.push_back(j.sending ? Bind(ListOf(group.sends, j.peer), true, fresh)
                               : Bind(ListOf(group.recvs, j.peer), false, fresh));
    }
    std::vector<std::thread> threads;
    for (size_t i = 0; i < jobs.size(); ++i) {
      threads.emplace_back([&, i] {
        Staging<Memory> staging;
        Job& j = jobs[i];
        j.status = j.sending ? SendTo(j.peer, std::move(dirs[i]), tag, staging, &j.counters)
                             : RecvFrom(j.peer, std::move(dirs[i]), tag, staging, &j.counters);
        if (!j.status.ok()) comm_.Abort();  // the other threads fail fast instead of waiting
      });
    }
    for (auto& t : threads) t.join();
    for (const Job& j : jobs) {
      Counters& c = j.sending ? *sent : *received;
      c.bytes += j.counters.bytes;
      c.messages += j.counters.messages;
    }
    for (const Job& j : jobs) ELASTRA_RETURN_IF_ERROR(j.status);
    return OkStatus();
  }

  // Pairwise rounds (partner = me XOR k): the lower rank of a pair sends its whole part first,
  // the higher receives first, so blocking Send/Recv cannot deadlock.
  Status MoveInPairwiseRounds(const GroupWork& group, Shards& fresh, uint32_t tag, Counters* sent,
                              Counters* received) {
    for (const int peer : partners_) {
      const auto& out = ListOf(group.sends, peer);
      const auto& in = ListOf(group.recvs, peer);
      auto do_send = [&]() -> Status {
        return out.empty() ? OkStatus()
                           : SendTo(peer, Bind(out, true, fresh), tag, send_buf_, sent);
      };
      auto do_recv = [&]() -> Status {
        return in.empty() ? OkStatus()
                          : RecvFrom(peer, Bind(in, false, fresh), tag, recv_buf_, received);
      };
      if (me_ < peer) {
        ELASTRA_RETURN_IF_ERROR(do_send());
        ELASTRA_RETURN_IF_ERROR(do_recv());
      } else {
        ELASTRA_RETURN_IF_ERROR(do_recv());
        ELASTRA_RETURN_IF_ERROR(do_send());
      }
    }
    return OkStatus();
  }

  // One direction to `peer` with Send: the staged stream packed chunk by chunk into `staging`,
  // then the direct runs. May run on several threads at once (MoveOnPeerThreads).
  Status SendTo(int peer, Direction d, uint32_t tag, Staging<Memory>& staging, Counters* c) {
    const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
    Stream stream(std::move(d.staged), &memory_);
    for (int64_t left = stream.total(); left > 0;) {
      const int64_t m = std::min(chunk, left);
      ELASTRA_ASSIGN_OR_RETURN(uint8_t* buf, staging.Get(memory_, m));
      ELASTRA_RETURN_IF_ERROR(stream.Transfer(buf, m, /*pack=*/true));
      ELASTRA_RETURN_IF_ERROR(memory_.Wait());
      ELASTRA_RETURN_IF_ERROR(comm_.Send(buf, m, peer, tag, options_.timeout));
      left -= m;
      c->bytes += m;
      ++c->messages;
    }
    for (BoundRun& r : d.runs) {
      const uint8_t* data = r.direct;
      if (data == nullptr) {  // packed whole: the receiver expects one message of r.bytes
        ELASTRA_ASSIGN_OR_RETURN(uint8_t * buf, staging.Get(memory_, r.bytes));
        Stream run(std::move(r.items), &memory_);
        ELASTRA_RETURN_IF_ERROR(run.Transfer(buf, r.bytes, /*pack=*/true));
        ELASTRA_RETURN_IF_ERROR(memory_.Wait());
        data = buf;
      }
      ELASTRA_RETURN_IF_ERROR(comm_.Send(data, r.bytes, peer, tag, options_.timeout));
      c->bytes += r.bytes;
      ++c->messages;
    }
    return OkStatus();
  }

  // The other direction, with Recv: each chunk unpacked from `staging` as it comes.
  Status RecvFrom(int peer, Direction d, uint32_t tag, Staging<Memory>& staging, Counters* c) {
    const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
    Stream stream(std::move(d.staged), &memory_);
    for (int64_t left = stream.total(); left > 0;) {
      const int64_t m = std::min(chunk, left);
      ELASTRA_ASSIGN_OR_RETURN(uint8_t* buf, staging.Get(memory_, m));
      ELASTRA_RETURN_IF_ERROR(comm_.Recv(buf, m, peer, tag, options_.timeout));
      ELASTRA_RETURN_IF_ERROR(stream.Transfer(buf, m, /*pack=*/false));
      ELASTRA_RETURN_IF_ERROR(memory_.Wait());  // before the buffer takes the next chunk
      left -= m;
      c->bytes += m;
    }
    for (BoundRun& r : d.runs) {
      if (r.direct != nullptr) {
        ELASTRA_RETURN_IF_ERROR(comm_.Recv(r.direct, r.bytes, peer, tag, options_.timeout));
      } else {
        ELASTRA_ASSIGN_OR_RETURN(uint8_t * buf, staging.Get(memory_, r.bytes));
        ELASTRA_RETURN_IF_ERROR(comm_.Recv(buf, r.bytes, peer, tag, options_.timeout));
        Stream run(std::move(r.items), &memory_);
        ELASTRA_RETURN_IF_ERROR(run.Transfer(buf, r.bytes, /*pack=*/false));
        ELASTRA_RETURN_IF_ERROR(memory_.Wait());
      }
      c->bytes += r.bytes;
    }
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
  Communicator& comm_;
  Shards* shards_;
  Memory& memory_;
  const ReshardExecutorOptions& options_;
  ReshardExecutorStats* stats_;
  const int me_;
  const int n_;
  const WorkerRegions regions_;
  std::vector<TransferGeometry> geometry_;
  std::vector<int> partners_;
  Staging<Memory> send_buf_, recv_buf_;  // the serial schedule's
  Staging<Memory> own_arena_;            // the batched schedule's, one group at a time,
  Staging<Memory>* arena_;               // unless the caller keeps one (options.arena)
  SparePool<Memory> spare_;     // old shards no longer read, for new shards
  std::vector<char> in_place_;  // by tensor: see FindInPlace
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
