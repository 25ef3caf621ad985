// The Gloo backend's collectives, each a simple schedule of unbound-buffer transfers driven by a
// Call, so that every wait is one Abort() can wake and the call's deadline bounds. Private to the
// backend. gloo's own algorithms (gloo::allreduce, broadcast, allgather, barrier) wait on buffers
// they create inside, which nothing outside can wake, so none of them is used.
//
// Every rank of the context calls the same function with the same sizes, root and `slot`; all
// messages of one call travel on `slot` (and `slot + 1` for a second phase) and match in posting
// order per pair, as gloo's own allgather and barrier do. Each function throws like a Call's waits
// (CallInterrupted, gloo::IoException).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/gloo/gloo_call.h"
#include "elastra/communicator.h"

namespace elastra {

// acc[e] = op(acc[e], x[e]) for e in [0, count).
void ReduceInto(DataType type, ReduceOp op, void* acc, const void* x, size_t count);

// Recursive doubling (Thakur, Rabenseifner and Gropp 2005) for small buffers: with p the largest
// power of two <= n, ranks p..n-1 first fold their part into rank r - p and get the result back
// at the end; ranks below p exchange and reduce with rank r XOR 2^k in round k. ceil(log2 n)
// latency steps (two more when n is not a power of two), one message sent per rank per step, and
// every partner is r +- 2^k (a build pair of gloo_mesh.h). Each pair reduces in one canonical order
// (the lower rank's part first), so every rank ends with the same bits even for NaN under max.
void RecursiveDoublingAllreduce(Call& call, uint64_t slot, void* data, size_t count,
                                DataType type, ReduceOp op);

// Ring reduce-scatter over blocks of `data`: block b is elements [begin[b], begin[b + 1]) (n + 1
// entries; blocks may be empty). n - 1 steps, each a send of one block to the right neighbour and
// a receive from the left one, reduced into place; rank r ends holding the full reduction of
// block r (the other blocks hold partial sums).
void RingReduceScatter(Call& call, uint64_t slot, void* data, const std::vector<size_t>& begin,
                       DataType type, ReduceOp op);

// Ring allgather over blocks of `data` in bytes: block b is bytes [begin[b], begin[b + 1]), and
// rank r holds block r on entry. n - 1 steps pass the blocks round the ring; every rank ends
// with every block. After RingReduceScatter (with byte offsets) it completes a ring allreduce,
// the bandwidth-optimal schedule: 2(n-1)/n of the buffer sent and received per rank.
void RingAllgather(Call& call, uint64_t slot, void* data, const std::vector<size_t>& begin);

// Binomial tree from `root` (gloo's own broadcast schedule): ceil(log2 n) rounds, each rank
// receives the whole buffer once and forwards it to its subtrees.
void TreeBroadcast(Call& call, uint64_t slot, void* data, size_t bytes, int root);

// Dissemination barrier (Hensgen, Finkel and Manber; gloo's own): ceil(log2 n) rounds of empty
// messages, in round k to rank r + 2^k and from rank r - 2^k.
void DisseminationBarrier(Call& call, uint64_t slot);

// Posts every transfer of `ops` at once (receives first), then waits for all of them. Transfers
// between two ranks match in the order each side lists them. Zero-byte transfers are skipped.
void PostAll(Call& call, uint64_t slot, const std::vector<PointToPoint>& ops);

}  // namespace elastra
