// The MPI backend under `mpirun -np 4` (CTest starts it so). Every rank runs every test in the same
// order; nothing here starts a thread. A rank whose assertion fails makes its peers time out in the
// next collective instead of hanging, so a broken feature fails the run.
#include <mpi.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "collectives/mpi/mpi_communicator.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
constexpr milliseconds kTimeout{5000};

std::unique_ptr<MpiCommunicator> World() {
  auto comm = CreateMpiWorldCommunicator(kTimeout);
  EXPECT_TRUE(comm.ok()) << comm.status();
  return comm.ok() ? std::move(comm).value() : nullptr;
}

TEST(MpiCommunicator, WorldMatchesMpirun) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(world->rank(), rank);
  EXPECT_EQ(world->size(), size);
  EXPECT_STREQ(world->backend(), "mpi");
  EXPECT_GE(size, 2) << "run under mpirun -np 4";
}

TEST(MpiCommunicator, AllreduceSumMaxMin) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  const int r = world->rank(), n = world->size();
  std::vector<double> d(1000);
  for (size_t i = 0; i < d.size(); ++i) d[i] = r + 0.5 * i;
  ASSERT_TRUE(world->Allreduce(d.data(), d.size(), DataType::kFloat64, ReduceOp::kSum).ok());
  for (size_t i = 0; i < d.size(); ++i) EXPECT_DOUBLE_EQ(d[i], n * (n - 1) / 2.0 + n * 0.5 * i);
  int64_t x[2] = {r, -r};
  ASSERT_TRUE(world->Allreduce(x, 2, DataType::kInt64, ReduceOp::kMax).ok());
  EXPECT_EQ(x[0], n - 1);
  EXPECT_EQ(x[1], 0);
  float f = static_cast<float>(r) + 1.5f;
  ASSERT_TRUE(world->Allreduce(&f, 1, DataType::kFloat32, ReduceOp::kMin).ok());
  EXPECT_EQ(f, 1.5f);
}

TEST(MpiCommunicator, BroadcastFromEveryRoot) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  for (int root = 0; root < world->size(); ++root) {
    std::vector<int64_t> v(17, world->rank() == root ? 100 + root : -1);
    ASSERT_TRUE(world->Broadcast(v.data(), v.size(), DataType::kInt64, root).ok());
    for (auto x : v) EXPECT_EQ(x, 100 + root);
  }
}

TEST(MpiCommunicator, AllgatherAndReduceScatter) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  const int r = world->rank(), n = world->size();
  int64_t mine[3] = {r, r * 10, r * 100};
  std::vector<int64_t> all(3 * n, -1);
  ASSERT_TRUE(world->Allgather(mine, all.data(), 3, DataType::kInt64, kTimeout).ok());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(all[3 * i], i);
    EXPECT_EQ(all[3 * i + 2], i * 100);
  }
  // Block b of every rank's input holds b + rank; rank r receives sum over ranks of (r + rank).
  std::vector<double> in(2 * n);
  for (int b = 0; b < n; ++b) in[2 * b] = in[2 * b + 1] = b + r;
  double out[2] = {0, 0};
  ASSERT_TRUE(
      world->ReduceScatter(in.data(), out, 2, DataType::kFloat64, ReduceOp::kSum, kTimeout).ok());
  EXPECT_DOUBLE_EQ(out[0], n * r + n * (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(out[1], out[0]);
}

TEST(MpiCommunicator, SendRecvRingWithTags) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  const int r = world->rank(), n = world->size();
  std::vector<uint8_t> out(1 << 16), in(1 << 16);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + r);
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  // Even ranks send first, odd ranks receive first: no reliance on eager buffering.
  uint32_t tag = 1u << 20;  // the worker's state-transfer tag range
  if (r % 2 == 0) {
    ASSERT_TRUE(world->Send(out.data(), out.size(), next, tag, kTimeout).ok());
    ASSERT_TRUE(world->Recv(in.data(), in.size(), prev, tag, kTimeout).ok());
  } else {
    ASSERT_TRUE(world->Recv(in.data(), in.size(), prev, tag, kTimeout).ok());
    ASSERT_TRUE(world->Send(out.data(), out.size(), next, tag, kTimeout).ok());
  }
  for (size_t i = 0; i < in.size(); i += 997) EXPECT_EQ(in[i], static_cast<uint8_t>(i * 7 + prev));
}

TEST(MpiCommunicator, SplitMakesIndependentGroups) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  const int r = world->rank();
  // Two groups, even and odd ranks, ordered by descending world rank.
  auto group = world->Split(r % 2, -r, kTimeout);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_NE(*group, nullptr);
  int expected_size = (world->size() + (r % 2 == 0 ? 1 : 0)) / 2;
  EXPECT_EQ((*group)->size(), expected_size);
  int64_t v = r;
  ASSERT_TRUE((*group)->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
  int64_t want = 0;
  for (int i = r % 2; i < world->size(); i += 2) want += i;
  EXPECT_EQ(v, want);
  // Descending keys: the highest world rank of the group is its rank 0.
  int64_t top = (*group)->rank() == 0 ? r : -1;
  ASSERT_TRUE((*group)->Allreduce(&top, 1, DataType::kInt64, ReduceOp::kMax).ok());
  int64_t highest = r % 2;
  while (highest + 2 < world->size()) highest += 2;
  EXPECT_EQ(top, highest);
}

TEST(MpiCommunicator, PlannedShrinkSplitsToSmallerCommunicator) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  const int r = world->rank(), n = world->size();
  ASSERT_GE(n, 3);
  // Shrink from n to n - 2: the last two ranks leave the group, the others keep their order.
  bool stays = r < n - 2;
  auto smaller = world->Split(stays ? 0 : -1, r, kTimeout);
  ASSERT_TRUE(smaller.ok()) << smaller.status();
  if (!stays) {
    EXPECT_EQ(*smaller, nullptr);
  } else {
    ASSERT_NE(*smaller, nullptr);
    EXPECT_EQ((*smaller)->size(), n - 2);
    EXPECT_EQ((*smaller)->rank(), r);
    double x = 1.0;
    ASSERT_TRUE((*smaller)->Allreduce(&x, 1, DataType::kFloat64, ReduceOp::kSum).ok());
    EXPECT_DOUBLE_EQ(x, n - 2);
    // And again, down to one rank.
    auto one = (*smaller)->Split(r == 0 ? 0 : -1, 0, kTimeout);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(*one != nullptr, r == 0);
  }
  // The world it came from still works for everyone.
  EXPECT_TRUE(world->Barrier().ok());
}

TEST(MpiCommunicator, RecvFromSilentPeerTimesOutAndBreaks) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  if (world->rank() == 0) {
    char buf[8];
    auto t0 = std::chrono::steady_clock::now();
    Status s = world->Recv(buf, sizeof(buf), 1, 7, milliseconds(200));
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count();
    EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s;
    EXPECT_GE(ms, 190);
    EXPECT_LT(ms, 1000);
    // Broken: later calls fail fast with the same code, without waiting.
    t0 = std::chrono::steady_clock::now();
    Status again = world->Barrier(milliseconds(5000));
    EXPECT_EQ(again.code(), StatusCode::kTimedOut);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(50));
  }
  // The cancelled receive does not linger.
  EXPECT_EQ(ProgressAbandonedMpiRequests(), 0);
  auto sync = World();
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->Barrier().ok());
}

TEST(MpiCommunicator, LateRankMakesTheOthersTimeOutNotHang) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  auto sync = World();
  ASSERT_NE(sync, nullptr);
  const bool late = world->rank() == world->size() - 1;
  std::vector<double> v(64, 1.0);
  if (late) {
    std::this_thread::sleep_for(milliseconds(600));
    // The others gave up, but their abandoned requests still complete the collective.
    EXPECT_TRUE(world->Allreduce(v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum,
                                 milliseconds(5000))
                    .ok());
    EXPECT_DOUBLE_EQ(v[0], world->size());
  } else {
    auto t0 = std::chrono::steady_clock::now();
    Status s = world->Allreduce(v.data(), v.size(), DataType::kFloat64, ReduceOp::kSum,
                                milliseconds(200));
    EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(1000));
    // The caller's buffer is never written after the call returned, even once the abandoned
    // collective completes.
    EXPECT_DOUBLE_EQ(v[0], 1.0);
  }
  ASSERT_TRUE(sync->Barrier().ok());
  auto deadline = std::chrono::steady_clock::now() + milliseconds(3000);
  while (ProgressAbandonedMpiRequests() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(5));
  }
  EXPECT_EQ(ProgressAbandonedMpiRequests(), 0);
  if (!late) EXPECT_DOUBLE_EQ(v[0], 1.0);
  ASSERT_TRUE(sync->Barrier().ok());
}

TEST(MpiCommunicator, AbortBreaksLaterCallsAtOnce) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  world->Abort();
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(world->Barrier().code(), StatusCode::kAborted);
  int64_t x = 1;
  EXPECT_EQ(world->Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum).code(),
            StatusCode::kAborted);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(50));
}

TEST(MpiCommunicator, BadArgumentsAreRefusedAndDoNotBreakIt) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  int64_t x = 1;
  EXPECT_EQ(world->Broadcast(&x, 1, DataType::kInt64, world->size()).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Send(&x, 8, -1, 0, kTimeout).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Recv(&x, 8, 0, UINT32_MAX, kTimeout).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Barrier(milliseconds(0)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Allreduce(nullptr, 4, DataType::kInt64, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Allreduce(&x, size_t{1} << 32, DataType::kUint8, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(world->Allreduce(&x, 1, static_cast<DataType>(42), ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(world->Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum).ok());
  EXPECT_EQ(x, world->size());
}

TEST(MpiCommunicator, TruncatedMessageIsCorruptNotACrash) {
  auto world = World();
  ASSERT_NE(world, nullptr);
  if (world->rank() == 0) {
    int64_t big[4] = {1, 2, 3, 4};
    EXPECT_TRUE(world->Send(big, sizeof(big), 1, 3, kTimeout).ok());
  } else if (world->rank() == 1) {
    int64_t small[2];
    EXPECT_EQ(world->Recv(small, sizeof(small), 0, 3, kTimeout).code(), StatusCode::kCorrupt);
  }
  auto sync = World();
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->Barrier().ok());
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) GTEST_FLAG_SET(brief, true);  // one rank reports; the others print failures
  int result = RUN_ALL_TESTS();
  // Every rank's verdict decides the exit code of every rank.
  int any = result;
  MPI_Allreduce(&result, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
