// The reshard executor's transfer phase: see reshard_transfer.h.
#include "state/reshard_transfer.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace elastra::reshard_internal {

template <class Memory>
ReshardTransfer<Memory>::ReshardTransfer(const ReshardPlan& plan, Communicator& comm,
                                         Shards* shards, Memory& memory,
                                         const ReshardExecutorOptions& options,
                                         ReshardExecutorStats* stats, const WorkerRegions& regions,
                                         Staging<Memory>* kept_arena)
    : plan_(plan),
      tensors_(plan.state.tensors),
      comm_(comm),
      shards_(shards),
      memory_(memory),
      options_(options),
      stats_(stats),
      me_(comm.rank()),
      n_(static_cast<int>(plan.host_of_worker.size())),
      regions_(regions),
      arena_(kept_arena) {
  if (arena_ == nullptr) arena_ = &own_arena_;
}

template <class Memory>
void ReshardTransfer<Memory>::Plan() {
  if (!Vectored()) geometry_ = TransferGeometries(plan_, me_);
  if (!options_.batched || !comm_.has_exchange()) partners_ = PairwisePartners(me_, n_);
}

// The group's transfers to and from the other workers, by the schedule the options and the
// communicator allow: batched (one Exchange), one thread per peer and direction, or pairwise
// rounds.
template <class Memory>
Status ReshardTransfer<Memory>::Move(const GroupWork& group, Shards& fresh) {
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
template <class Memory>
typename ReshardTransfer<Memory>::Direction ReshardTransfer<Memory>::Bind(
    const std::vector<const Transfer*>& list, bool sending, Shards& fresh) {
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

template <class Memory>
const std::vector<const Transfer*>& ReshardTransfer<Memory>::ListOf(
    const std::map<int, std::vector<const Transfer*>>& by_peer, int peer) {
  static const std::vector<const Transfer*> kNone;
  auto it = by_peer.find(peer);
  return it == by_peer.end() ? kNone : it->second;
}

// Batched: pack every staged send, post the whole group at once in one Exchange() (which
// waits for all of it), then unpack the staged receives. Host shards over a communicator with
// ExchangeV() need no packing: see ExchangeVectored.
template <class Memory>
Status ReshardTransfer<Memory>::ExchangeBatched(const GroupWork& group, Shards& fresh, uint32_t tag,
                                                Counters* sent, Counters* received) {
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
template <class Memory>
Status ReshardTransfer<Memory>::ExchangeVectored(const GroupWork& group, Shards& fresh,
                                                 uint32_t tag, Counters* sent, Counters* received) {
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
template <class Memory>
StatusOr<uint8_t*> ReshardTransfer<Memory>::PackBatch(const GroupWork& group, Shards& fresh,
                                                      Batch* batch) {
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
template <class Memory>
Status ReshardTransfer<Memory>::MoveOnPeerThreads(const GroupWork& group, Shards& fresh,
                                                  uint32_t tag, Counters* sent,
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
template <class Memory>
Status ReshardTransfer<Memory>::MoveInPairwiseRounds(const GroupWork& group, Shards& fresh,
                                                     uint32_t tag, Counters* sent,
                                                     Counters* received) {
  for (const int peer : partners_) {
    const auto& out = ListOf(group.sends, peer);
    const auto& in = ListOf(group.recvs, peer);
    auto do_send = [&]() -> Status {
      return out.empty() ? OkStatus() : SendTo(peer, Bind(out, true, fresh), tag, send_buf_, sent);
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
template <class Memory>
Status ReshardTransfer<Memory>::SendTo(int peer, Direction d, uint32_t tag,
                                       Staging<Memory>& staging, Counters* c) {
  const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
  Stream stream(std::move(d.staged), &memory_);
  for (int64_t left = stream.total(); left > 0;) {
    const int64_t m = std::min(chunk, left);
    ELASTRA_ASSIGN_OR_RETURN(uint8_t * buf, staging.Get(memory_, m));
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
template <class Memory>
Status ReshardTransfer<Memory>::RecvFrom(int peer, Direction d, uint32_t tag,
                                         Staging<Memory>& staging, Counters* c) {
  const int64_t chunk = static_cast<int64_t>(options_.chunk_bytes);
  Stream stream(std::move(d.staged), &memory_);
  for (int64_t left = stream.total(); left > 0;) {
    const int64_t m = std::min(chunk, left);
    ELASTRA_ASSIGN_OR_RETURN(uint8_t * buf, staging.Get(memory_, m));
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

template class ReshardTransfer<HostMemory>;
template class ReshardTransfer<DeviceMemory>;

}  // namespace elastra::reshard_internal
