// ExecuteReshard over the MPI backend under `mpirun -np 4`, batched: every group's transfers go
// through one MpiCommunicator::Exchange(). Each rank is one worker; its shards are cut from the
// known global tensors (tests/reshard/global_shards.h) and checked byte for byte after each move.
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/mpi/mpi_communicator.h"
#include "elastra/sharding.h"
#include "tests/reshard/global_shards.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using testing::ShardsOf;

Placement InOrder(const Layout& layout) {
  Placement p{layout, {}};
  for (int r = 0; r < layout.world(); ++r) p.worker_of_rank.push_back(r);
  return p;
}

// Moves this rank's shards through `layouts` in turn with `options`, checking after each move
// that it holds exactly the new layout's shards and that the ranks together sent and received
// what the plan moves.
void ReshardThrough(const StateSpec& state, const std::vector<Layout>& layouts,
                    const ReshardExecutorOptions& options) {
  auto created = CreateMpiWorldCommunicator(milliseconds(10000));
  ASSERT_TRUE(created.ok()) << created.status();
  MpiCommunicator& comm = **created;
  ASSERT_TRUE(comm.has_exchange());
  const int me = comm.rank(), n = comm.size();
  std::vector<int> hosts(n);
  for (int w = 0; w < n; ++w) hosts[w] = w / 2;
  ShardMap shards = ShardsOf(state, InOrder(layouts[0]), me);
  for (size_t i = 0; i + 1 < layouts.size(); ++i) {
    ASSERT_LE(layouts[i + 1].world(), n);
    auto plan = BuildReshardPlan(state, InOrder(layouts[i]), InOrder(layouts[i + 1]), hosts);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_GT(plan->bytes_moved, 0) << layouts[i].ToString() << " -> " << layouts[i + 1].ToString();
    ReshardExecutorStats stats;
    Status s = ExecuteReshard(*plan, comm, &shards, options, &stats);
    ASSERT_TRUE(s.ok()) << "rank " << me << ", " << layouts[i].ToString() << " -> "
                        << layouts[i + 1].ToString() << ": " << s;
    const ShardMap expected = ShardsOf(state, plan->to, me);
    ASSERT_EQ(shards.size(), expected.size()) << "rank " << me;
    for (const auto& [name, bytes] : expected) {
      auto it = shards.find(name);
      ASSERT_NE(it, shards.end()) << "rank " << me << " lacks " << name;
      EXPECT_TRUE(it->second == bytes) << "rank " << me << " tensor " << name << " differs";
    }
    int64_t moved[2] = {stats.bytes_sent, stats.bytes_received};
    ASSERT_TRUE(comm.Allreduce(moved, 2, DataType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(moved[0], plan->bytes_moved);
    EXPECT_EQ(moved[1], plan->bytes_moved);
  }
  EXPECT_TRUE(comm.Barrier().ok());
}

// A small GPT state through dp, pp and tp at 4 ranks, and down to 2 and back.
const std::vector<Layout> kLayouts{{2, 1, 2}, {1, 2, 2}, {4, 1, 1}, {1, 1, 2}, {1, 4, 1},
                                   {1, 1, 4}};

TEST(MpiReshard, BatchedGptStateMatchesTheGlobalSlices) {
  const StateSpec state = GptState({4, 16, 40, 30, 8, 2, true, true});
  ReshardExecutorOptions options;
  options.batched = true;
  options.chunk_bytes = 4096;
  options.direct_min_bytes = 1024;  // some transfers go straight between the shards
  options.group_bytes = 8 << 10;    // several groups, so several exchanges per move
  ReshardThrough(state, kLayouts, options);
}

TEST(MpiReshard, BatchedWithMessagesCutIntoPieces) {
  // Small pieces stand in for transfers above INT_MAX bytes.
  const size_t before = SetMpiPieceBytesForTesting(333);
  const StateSpec state = GptState({2, 16, 24, 20, 8, 4, true, true});
  ReshardExecutorOptions options;
  options.batched = true;
  options.direct_min_bytes = 256;
  ReshardThrough(state, {{1, 2, 2}, {4, 1, 1}, {2, 1, 2}}, options);
  SetMpiPieceBytesForTesting(before);
}

}  // namespace
}  // namespace elastra
