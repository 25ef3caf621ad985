// The reshard executor: see reshard_executor.h.
#include "worker/reshard_executor.h"

#include <algorithm>
#include <cstring>

namespace elastra {
namespace {

// Walks the bytes of a list of rectangles row by row, in plan order, as one stream: packs them
// from (or unpacks them into) local shard buffers.
class RectStream {
 public:
  struct Item {
    const Transfer* transfer;
    uint8_t* base;   // the local shard buffer
    Region region;   // the local region of that buffer
  };

  explicit RectStream(std::vector<Item> items) : items_(std::move(items)) {
    for (const auto& it : items_) total_ += it.transfer->bytes;
  }
  int64_t total() const { return total_; }

  // Moves the next `n` bytes of the stream between `buffer` and the shards; `pack` copies from
  // the shards into the buffer.
  void Transfer(uint8_t* buffer, int64_t n, bool pack) {
    while (n > 0) {
      const Item& it = items_[item_];
      const Rect& r = it.transfer->rect;
      const int64_t esize = it.transfer->bytes / r.volume();
      const int64_t row_bytes = (r.col_end - r.col_begin) * esize;
      const int64_t row = r.row_begin + row_;
      const int64_t take = std::min(n, row_bytes - offset_);
      uint8_t* local = it.base + it.region.LocalOffset(row, r.col_begin) * esize + offset_;
      if (pack) {
        std::memcpy(buffer, local, take);
      } else {
        std::memcpy(local, buffer, take);
      }
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
  }

 private:
  std::vector<Item> items_;
  int64_t total_ = 0;
  size_t item_ = 0;
  int64_t row_ = 0;
  int64_t offset_ = 0;
};

}  // namespace

Status ExecuteReshard(const ReshardPlan& plan, Communicator& comm, ShardMap* shards,
                      const ReshardExecutorOptions& options, ReshardExecutorStats* stats) {
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
  const int num_layers = plan.state.num_layers;
  const int from_rank = plan.from.RankOfWorker(me);
  const int to_rank = plan.to.RankOfWorker(me);
  std::vector<Region> old_region(tensors.size()), new_region(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (from_rank >= 0) {
      old_region[i] = LocalRegion(tensors[i], num_layers, plan.from.layout,
                                  CoordinatesOf(plan.from.layout, from_rank));
    }
    if (to_rank >= 0) {
      new_region[i] = LocalRegion(tensors[i], num_layers, plan.to.layout,
                                  CoordinatesOf(plan.to.layout, to_rank));
    }
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

  // Group boundaries: identical on every worker (they depend on the plan only).
  std::vector<size_t> group_begin{0};
  {
    int64_t acc = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int64_t b = FullRect(tensors[i].shape).volume() * tensors[i].element_size;
      if (acc > 0 && acc + b > options.group_bytes) {
        group_begin.push_back(i);
        acc = 0;
      }
      acc += b;
    }
    group_begin.push_back(tensors.size());
  }
  // This worker's transfers, by group and peer, in plan order.
  std::vector<size_t> group_of(tensors.size());
  for (size_t g = 0; g + 1 < group_begin.size(); ++g) {
    for (size_t i = group_begin[g]; i < group_begin[g + 1]; ++i) group_of[i] = g;
  }
  const size_t num_groups = group_begin.size() - 1;
  std::vector<std::map<int, std::vector<const Transfer*>>> sends(num_groups), recvs(num_groups);
  for (const Transfer& t : plan.transfers) {
    if (t.src == me) sends[group_of[t.tensor]][t.dst].push_back(&t);
    if (t.dst == me) recvs[group_of[t.tensor]][t.src].push_back(&t);
  }
  std::vector<std::vector<const Transfer*>> copies(num_groups);
  for (const Transfer& t : plan.copies) {
    if (t.dst == me) copies[group_of[t.tensor]].push_back(&t);
  }

  int pow2 = 1;
  while (pow2 < n) pow2 *= 2;
  std::vector<uint8_t> send_buf(options.chunk_bytes), recv_buf(options.chunk_bytes);

  for (size_t g = 0; g < num_groups; ++g) {
    ShardMap fresh;
    int64_t fresh_bytes = 0;
    for (size_t i = group_begin[g]; i < group_begin[g + 1]; ++i) {
      if (new_region[i].empty()) continue;
      const int64_t bytes = new_region[i].elements() * tensors[i].element_size;
      fresh[tensors[i].name].assign(bytes, 0);
      fresh_bytes += bytes;
    }
    stats->peak_new_shard_bytes = std::max(stats->peak_new_shard_bytes, fresh_bytes);
    auto old_item = [&](const Transfer* t) {
      return RectStream::Item{t, (*shards)[tensors[t->tensor].name].data(),
                              old_region[t->tensor]};
    };
    auto new_item = [&](const Transfer* t) {
      return RectStream::Item{t, fresh[tensors[t->tensor].name].data(), new_region[t->tensor]};
    };
    // Local copies, rectangle row by row.
    for (const Transfer* t : copies[g]) {
      const Rect& r = t->rect;
      const int64_t esize = tensors[t->tensor].element_size;
      const Region& from = old_region[t->tensor];
      const Region& to = new_region[t->tensor];
      const uint8_t* src = (*shards)[tensors[t->tensor].name].data();
      uint8_t* dst = fresh[tensors[t->tensor].name].data();
      const int64_t row_bytes = (r.col_end - r.col_begin) * esize;
      for (int64_t row = r.row_begin; row < r.row_end; ++row) {
        std::memcpy(dst + to.LocalOffset(row, r.col_begin) * esize,
                    src + from.LocalOffset(row, r.col_begin) * esize, row_bytes);
      }
      stats->bytes_copied += t->bytes;
    }
    const uint32_t tag = static_cast<uint32_t>(g & 0xffffff);
    for (int k = 1; k < pow2; ++k) {
      const int peer = me ^ k;
      if (peer >= n) continue;
      std::vector<RectStream::Item> out, in;
      if (auto it = sends[g].find(peer); it != sends[g].end()) {
        for (const Transfer* t : it->second) out.push_back(old_item(t));
      }
      if (auto it = recvs[g].find(peer); it != recvs[g].end()) {
        for (const Transfer* t : it->second) in.push_back(new_item(t));
      }
      if (out.empty() && in.empty()) continue;
      RectStream send_stream(std::move(out)), recv_stream(std::move(in));
      int64_t to_send = send_stream.total(), to_recv = recv_stream.total();
      const int64_t chunk = static_cast<int64_t>(options.chunk_bytes);
      auto send_one = [&]() -> Status {
        const int64_t m = std::min(chunk, to_send);
        send_stream.Transfer(send_buf.data(), m, /*pack=*/true);
        ELASTRA_RETURN_IF_ERROR(comm.Send(send_buf.data(), m, peer, tag, options.timeout));
        to_send -= m;
        stats->bytes_sent += m;
        ++stats->messages_sent;
        return OkStatus();
      };
      auto recv_one = [&]() -> Status {
        const int64_t m = std::min(chunk, to_recv);
        ELASTRA_RETURN_IF_ERROR(comm.Recv(recv_buf.data(), m, peer, tag, options.timeout));
        recv_stream.Transfer(recv_buf.data(), m, /*pack=*/false);
        to_recv -= m;
        stats->bytes_received += m;
        return OkStatus();
      };
      while (to_send > 0 || to_recv > 0) {
        if (me < peer) {
          if (to_send > 0) ELASTRA_RETURN_IF_ERROR(send_one());
          if (to_recv > 0) ELASTRA_RETURN_IF_ERROR(recv_one());
        } else {
          if (to_recv > 0) ELASTRA_RETURN_IF_ERROR(recv_one());
          if (to_send > 0) ELASTRA_RETURN_IF_ERROR(send_one());
        }
      }
    }
    for (size_t i = group_begin[g]; i < group_begin[g + 1]; ++i) shards->erase(tensors[i].name);
    for (auto& [name, bytes] : fresh) (*shards)[name] = std::move(bytes);
  }
  return OkStatus();
}

}  // namespace elastra
