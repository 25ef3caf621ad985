// The Gloo backend's collectives over unbound buffers: see gloo_algorithms.h.
#include "collectives/gloo/gloo_algorithms.h"

#include <algorithm>
#include <cstring>

#include "common/logging.h"

namespace elastra {
namespace {

// Calls f.template operator()<T>() with T the C++ type of `type`.
template <typename F>
void DispatchType(DataType type, F&& f) {
  switch (type) {
    case DataType::kFloat32: f.template operator()<float>(); return;
    case DataType::kFloat64: f.template operator()<double>(); return;
    case DataType::kInt64: f.template operator()<int64_t>(); return;
    case DataType::kUint8: f.template operator()<uint8_t>(); return;
    case DataType::kInt32: f.template operator()<int32_t>(); return;
    case DataType::kBFloat16:
    case DataType::kFloat16: break;
  }
  // The communicator reduces half types as float32 (widened once, narrowed once).
  CHECK(false) << "no element-wise reduction of " << DataTypeName(type);
}

// ((b mod n) + n) mod n: a block or rank index taken round the ring.
int Wrap(int b, int n) { return ((b % n) + n) % n; }

}  // namespace

void ReduceInto(DataType type, ReduceOp op, void* acc_bytes, const void* x_bytes, size_t count) {
  DispatchType(type, [&]<typename T>() {
    T* acc = static_cast<T*>(acc_bytes);
    const T* x = static_cast<const T*>(x_bytes);
    switch (op) {
      case ReduceOp::kSum:
        for (size_t e = 0; e < count; ++e) acc[e] = static_cast<T>(acc[e] + x[e]);
        break;
      case ReduceOp::kMax:
        for (size_t e = 0; e < count; ++e) acc[e] = std::max(acc[e], x[e]);
        break;
      case ReduceOp::kMin:
        for (size_t e = 0; e < count; ++e) acc[e] = std::min(acc[e], x[e]);
        break;
    }
  });
}

void RecursiveDoublingAllreduce(Call& call, uint64_t slot, void* data, size_t count,
                                DataType type, ReduceOp op) {
  const int n = call.size();
  const int rank = call.rank();
  if (n == 1) return;
  const size_t bytes = count * DataTypeSize(type);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  auto* mine = call.NewBuffer(data, bytes);
  if (rank >= p) {
    // Folded: rank - p reduces our part in, and sends back the result.
    mine->send(rank - p, slot);
    call.WaitSend(mine);
    mine->recv(rank - p, slot);
    call.WaitRecv(mine);
    return;
  }
  char* incoming = call.Scratch(bytes);
  auto* in = call.NewBuffer(incoming, bytes);
  // acc = op(lower rank's part, higher rank's part), the same on both sides of a pair.
  auto combine = [&](bool mine_is_lower) {
    if (mine_is_lower) {
      ReduceInto(type, op, data, incoming, count);
    } else {
      ReduceInto(type, op, incoming, data, count);
      std::memcpy(data, incoming, bytes);
    }
  };
  const bool has_folded = rank + p < n;
  if (has_folded) {
    in->recv(rank + p, slot);
    call.WaitRecv(in);
    combine(true);
  }
  for (int mask = 1; mask < p; mask <<= 1) {
    const int partner = rank ^ mask;
    in->recv(partner, slot);
    mine->send(partner, slot);
    call.WaitRecv(in);
    call.WaitSend(mine);
    combine(rank < partner);
  }
  if (has_folded) {
    mine->send(rank + p, slot);
    call.WaitSend(mine);
  }
}

void RingReduceScatter(Call& call, uint64_t slot, void* data, const std::vector<size_t>& begin,
                       DataType type, ReduceOp op) {
  const int n = call.size();
  const int rank = call.rank();
  if (n == 1) return;
  const size_t elem = DataTypeSize(type);
  size_t largest = 0;
  for (int b = 0; b < n; ++b) largest = std::max(largest, begin[b + 1] - begin[b]);
  char* incoming = call.Scratch(largest * elem);
  auto* bytes = static_cast<char*>(data);
  auto* whole = call.NewBuffer(data, begin[n] * elem);
  auto* in = call.NewBuffer(incoming, largest * elem);
  const int right = Wrap(rank + 1, n);
  const int left = Wrap(rank - 1, n);
  // Step s: send block rank - s - 1 (reduced into at step s - 1), receive block rank - s - 2 and
  // reduce it into our copy. After n - 1 steps block `rank` holds every rank's part.
  for (int s = 0; s < n - 1; ++s) {
    const int out = Wrap(rank - s - 1, n);
    const int into = Wrap(rank - s - 2, n);
    const size_t in_count = begin[into + 1] - begin[into];
    in->recv(left, slot, 0, in_count * elem);
    whole->send(right, slot, begin[out] * elem, (begin[out + 1] - begin[out]) * elem);
    call.WaitRecv(in);
    ReduceInto(type, op, bytes + begin[into] * elem, incoming, in_count);
    call.WaitSend(whole);
  }
}

void RingAllgather(Call& call, uint64_t slot, void* data, const std::vector<size_t>& begin) {
  const int n = call.size();
  const int rank = call.rank();
  if (n == 1) return;
  auto* whole = call.NewBuffer(data, begin[n]);
  const int right = Wrap(rank + 1, n);
  const int left = Wrap(rank - 1, n);
  // Step s: forward block rank - s (ours at s = 0), receive block rank - s - 1.
  for (int s = 0; s < n - 1; ++s) {
    const int out = Wrap(rank - s, n);
    const int into = Wrap(rank - s - 1, n);
    whole->recv(left, slot, begin[into], begin[into + 1] - begin[into]);
    whole->send(right, slot, begin[out], begin[out + 1] - begin[out]);
    call.WaitRecv(whole);
    call.WaitSend(whole);
  }
}

void TreeBroadcast(Call& call, uint64_t slot, void* data, size_t bytes, int root) {
  const int n = call.size();
  if (n == 1) return;
  // Virtual ranks put the root at 0. In round i (distance 2^i) the ranks below 2^i, which already
  // hold the data, send it to the rank 2^i above them.
  const int vrank = Wrap(call.rank() - root, n);
  auto* buf = call.NewBuffer(data, bytes);
  int sends = 0;
  for (int distance = 1; distance < n; distance <<= 1) {
    if (vrank < distance) {
      if (vrank + distance < n) {
        buf->send(Wrap(vrank + distance + root, n), slot);
        ++sends;
      }
    } else if (vrank < 2 * distance) {
      buf->recv(Wrap(vrank - distance + root, n), slot);
      call.WaitRecv(buf);
    }
  }
  for (int i = 0; i < sends; ++i) call.WaitSend(buf);
}

void DisseminationBarrier(Call& call, uint64_t slot) {
  const int n = call.size();
  const int rank = call.rank();
  auto* empty = call.NewBuffer(nullptr, 0);
  for (int distance = 1; distance < n; distance <<= 1) {
    empty->recv(Wrap(rank - distance, n), slot);
    empty->send(Wrap(rank + distance, n), slot);
    call.WaitRecv(empty);
    call.WaitSend(empty);
  }
}

void PostAll(Call& call, uint64_t slot, const std::vector<PointToPoint>& ops) {
  std::vector<gloo::transport::UnboundBuffer*> bufs(ops.size(), nullptr);
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].bytes > 0) bufs[i] = call.NewBuffer(ops[i].data, ops[i].bytes);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (bufs[i] != nullptr && !ops[i].send) bufs[i]->recv(ops[i].peer, slot);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (bufs[i] != nullptr && ops[i].send) bufs[i]->send(ops[i].peer, slot);
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    if (bufs[i] == nullptr) continue;
    if (ops[i].send) {
      call.WaitSend(bufs[i]);
    } else {
      call.WaitRecv(bufs[i]);
    }
  }
}

}  // namespace elastra
