// Functional tests of the Gloo backend with ranks as threads over InMemoryKeyValueStore.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "gloo_test_util.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using testing::Connect;
using testing::Spawn;

constexpr DataType kTypes[] = {DataType::kFloat32, DataType::kFloat64, DataType::kInt64,
                               DataType::kUint8, DataType::kInt32};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};

// Rank r's i-th input: small integers, so float sums are exact and uint8 sums of 4 ranks fit.
int64_t Input(int rank, size_t i) { return static_cast<int64_t>((rank * 7 + i * 13) % 50); }

int64_t Reduce(ReduceOp op, int size, size_t i) {
  int64_t acc = Input(0, i);
  for (int r = 1; r < size; ++r) {
    const int64_t v = Input(r, i);
    if (op == ReduceOp::kSum) acc += v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  return acc;
}

// A buffer of `count` elements of `type`, read and written as int64.
class TypedBuffer {
 public:
  TypedBuffer(DataType type, size_t count) : type_(type), bytes_(DataTypeSize(type) * count) {}
  void* data() { return bytes_.data(); }
  size_t count() const { return bytes_.size() / DataTypeSize(type_); }
  void Set(size_t i, int64_t v) {
    switch (type_) {
      case DataType::kFloat32: Put<float>(i, static_cast<float>(v)); break;
      case DataType::kFloat64: Put<double>(i, static_cast<double>(v)); break;
      case DataType::kInt64: Put<int64_t>(i, v); break;
      case DataType::kUint8: Put<uint8_t>(i, static_cast<uint8_t>(v)); break;
      case DataType::kInt32: Put<int32_t>(i, static_cast<int32_t>(v)); break;
      case DataType::kBFloat16:
      case DataType::kFloat16: ADD_FAILURE() << "see half_reduce_test.cc"; break;
    }
  }
  int64_t Get(size_t i) const {
    switch (type_) {
      case DataType::kFloat32: return static_cast<int64_t>(Take<float>(i));
      case DataType::kFloat64: return static_cast<int64_t>(Take<double>(i));
      case DataType::kInt64: return Take<int64_t>(i);
      case DataType::kUint8: return Take<uint8_t>(i);
      case DataType::kInt32: return Take<int32_t>(i);
      case DataType::kBFloat16:
      case DataType::kFloat16: break;
    }
    return -1;
  }

 private:
  template <typename T>
  void Put(size_t i, T v) { std::memcpy(bytes_.data() + i * sizeof(T), &v, sizeof(T)); }
  template <typename T>
  T Take(size_t i) const {
    T v;
    std::memcpy(&v, bytes_.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  DataType type_;
  std::vector<char> bytes_;
};

class GlooSizes : public ::testing::TestWithParam<int> {};

TEST_P(GlooSizes, AllreduceEveryTypeAndOp) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  Spawn(&store, "allreduce/", size, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      for (ReduceOp op : kOps) {
        // 70001 elements take the ring (over 64 KiB for every type), the others the small
        // exchange.
        for (size_t count : {size_t{1}, size_t{5}, size_t{1023}, size_t{70001}}) {
          TypedBuffer buf(type, count);
          for (size_t i = 0; i < count; ++i) buf.Set(i, Input(comm.rank(), i));
          ASSERT_TRUE(comm.Allreduce(buf.data(), count, type, op).ok());
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(buf.Get(i), Reduce(op, size, i))
                << DataTypeName(type) << " op " << static_cast<int>(op) << " i " << i;
          }
        }
      }
    }
  });
}

TEST_P(GlooSizes, BroadcastFromEveryRoot) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  Spawn(&store, "broadcast/", size, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      for (int root = 0; root < size; ++root) {
        const size_t count = 37;
        TypedBuffer buf(type, count);
        for (size_t i = 0; i < count; ++i) buf.Set(i, Input(comm.rank(), i));
        ASSERT_TRUE(comm.Broadcast(buf.data(), count, type, root).ok());
        for (size_t i = 0; i < count; ++i) ASSERT_EQ(buf.Get(i), Input(root, i));
      }
    }
  });
}

TEST_P(GlooSizes, AllgatherPlacesRankBlocks) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  Spawn(&store, "allgather/", size, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      for (size_t count : {size_t{1}, size_t{3}, size_t{257}}) {
        TypedBuffer send(type, count), recv(type, count * size);
        for (size_t i = 0; i < count; ++i) send.Set(i, Input(comm.rank(), i));
        ASSERT_TRUE(
            comm.Allgather(send.data(), recv.data(), count, type, milliseconds(5000)).ok());
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv.Get(r * count + i), Input(r, i));
        }
      }
    }
  });
}

TEST_P(GlooSizes, ReduceScatterGivesEachRankItsBlock) {
  const int size = GetParam();
  InMemoryKeyValueStore store;
  Spawn(&store, "reduce_scatter/", size, [&](Communicator& comm) {
    for (DataType type : kTypes) {
      for (ReduceOp op : kOps) {
        for (size_t count : {size_t{1}, size_t{3}, size_t{101}, size_t{20000}}) {
          TypedBuffer send(type, count * size), recv(type, count);
          for (size_t i = 0; i < count * size; ++i) send.Set(i, Input(comm.rank(), i));
          for (size_t i = 0; i < count; ++i) recv.Set(i, 99);
          ASSERT_TRUE(comm.ReduceScatter(send.data(), recv.data(), count, type, op,
                                         milliseconds(5000))
                          .ok());
          for (size_t i = 0; i < count; ++i) {
            ASSERT_EQ(recv.Get(i), Reduce(op, size, comm.rank() * count + i));
          }
          // The input is left untouched.
          for (size_t i = 0; i < count * size; ++i) ASSERT_EQ(send.Get(i), Input(comm.rank(), i));
        }
      }
    }
  });
}

TEST_P(GlooSizes, BarrierHoldsEveryRankUntilAllArrive) {
  // Rank 0 arrives once every other rank is blocked (in round 0: in this barrier; later perhaps
  // still leaving the previous one); nobody may pass a barrier before all have arrived.
  const int size = GetParam();
  InMemoryKeyValueStore store;
  auto comms = testing::ConnectAll(&store, "barrier/", size);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  std::atomic<int> arrived[3] = {0, 0, 0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      for (int round = 0; round < 3; ++round) {
        if (rank == 0) {
          for (int r = 1; r < size; ++r) ASSERT_TRUE(testing::WaitUntilBlocked(*comms[r]));
        }
        arrived[round]++;
        ASSERT_TRUE(comms[rank]->Barrier().ok());
        EXPECT_EQ(arrived[round].load(), size) << "round " << round;
      }
    });
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooSizes, ::testing::Values(1, 2, 3, 4));

TEST(GlooPointToPoint, RingAndOutOfOrderTags) {
  const int size = 4;
  InMemoryKeyValueStore store;
  Spawn(&store, "p2p/", size, [&](Communicator& comm) {
    const int next = (comm.rank() + 1) % size;
    const int prev = (comm.rank() + size - 1) % size;
    // A ring exchange of 1 MiB, sends posted on a helper thread so both directions overlap.
    std::vector<int32_t> out(1 << 18), in(1 << 18, -1);
    for (size_t i = 0; i < out.size(); ++i) out[i] = comm.rank() * 1000003 + static_cast<int>(i);
    Status send_status;
    std::thread sender([&] {
      send_status = comm.Send(out.data(), out.size() * 4, next, 7, milliseconds(5000));
    });
    ASSERT_TRUE(comm.Recv(in.data(), in.size() * 4, prev, 7, milliseconds(5000)).ok());
    sender.join();
    ASSERT_TRUE(send_status.ok()) << send_status;
    for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(in[i], prev * 1000003 + static_cast<int>(i));

    // Tags select the matching message whatever the order: rank 0 sends tag 1 then tag 2, rank 1
    // receives tag 2 first.
    if (comm.rank() == 0) {
      int64_t a = 111, b = 222;
      std::thread t([&] { EXPECT_TRUE(comm.Send(&a, 8, 1, 1, milliseconds(5000)).ok()); });
      // Tag 1 is posted (its send blocks: rank 1 wants tag 2 first) before tag 2 is.
      ASSERT_TRUE(testing::WaitUntilBlocked(comm));
      EXPECT_TRUE(comm.Send(&b, 8, 1, 2, milliseconds(5000)).ok());
      t.join();
    } else if (comm.rank() == 1) {
      int64_t got2 = 0, got1 = 0;
      ASSERT_TRUE(comm.Recv(&got2, 8, 0, 2, milliseconds(5000)).ok());
      ASSERT_TRUE(comm.Recv(&got1, 8, 0, 1, milliseconds(5000)).ok());
      EXPECT_EQ(got2, 222);
      EXPECT_EQ(got1, 111);
    }
    ASSERT_TRUE(comm.Barrier().ok());
  });
}

TEST(GlooGenerations, NewPrefixBuildsAFreshCommunicatorOfAnotherSize) {
  InMemoryKeyValueStore store;
  for (int gen = 1; gen <= 3; ++gen) {
    const int size = gen == 2 ? 2 : 3;
    Spawn(&store, "g" + std::to_string(gen) + "/world/", size, [&](Communicator& comm) {
      int64_t v = comm.rank() + gen;
      ASSERT_TRUE(comm.Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
      int64_t expected = 0;
      for (int r = 0; r < size; ++r) expected += r + gen;
      EXPECT_EQ(v, expected);
      ASSERT_TRUE(comm.Barrier().ok());
    });
  }
}

TEST(GlooArguments, BadArgumentsAreRejectedAndDoNotBreakTheCommunicator) {
  InMemoryKeyValueStore store;
  Spawn(&store, "args/", 2, [&](Communicator& comm) {
    int64_t v = 1;
    int64_t big[4] = {};
    const auto bad = StatusCode::kInvalidArgument;
    EXPECT_EQ(comm.Broadcast(&v, 1, DataType::kInt64, 2).code(), bad);
    EXPECT_EQ(comm.Broadcast(&v, 1, DataType::kInt64, -1).code(), bad);
    EXPECT_EQ(comm.Allreduce(nullptr, 4, DataType::kInt64, ReduceOp::kSum).code(), bad);
    EXPECT_EQ(comm.Allreduce(&v, 1, static_cast<DataType>(17), ReduceOp::kSum).code(), bad);
    EXPECT_EQ(comm.Allreduce(&v, 1, DataType::kInt64, static_cast<ReduceOp>(9)).code(), bad);
    EXPECT_EQ(comm.Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum, milliseconds(0)).code(),
              bad);
    EXPECT_EQ(comm.Allgather(&v, nullptr, 1, DataType::kInt64, milliseconds(1000)).code(), bad);
    EXPECT_EQ(comm.ReduceScatter(big, nullptr, 2, DataType::kInt64, ReduceOp::kSum,
                                 milliseconds(1000))
                  .code(),
              bad);
    EXPECT_EQ(comm.Send(&v, 8, comm.rank(), 0, milliseconds(1000)).code(), bad);
    EXPECT_EQ(comm.Send(&v, 8, 5, 0, milliseconds(1000)).code(), bad);
    EXPECT_EQ(comm.Recv(&v, 8, -1, 0, milliseconds(1000)).code(), bad);
    EXPECT_EQ(comm.Recv(nullptr, 8, 1 - comm.rank(), 0, milliseconds(1000)).code(), bad);
    EXPECT_EQ(comm.Barrier(milliseconds(-5)).code(), bad);
    // Still usable.
    ASSERT_TRUE(comm.Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
    EXPECT_EQ(v, 2);
    EXPECT_EQ(comm.backend(), Backend::kGloo);
  });

  GlooOptions options;
  options.prefix = "bad/";
  EXPECT_EQ(CreateGlooCommunicator(options).status().code(), StatusCode::kInvalidArgument);
  options.store = &store;
  options.rank = 2;
  options.size = 2;
  EXPECT_EQ(CreateGlooCommunicator(options).status().code(), StatusCode::kInvalidArgument);
  options.rank = 0;
  options.size = 0;
  EXPECT_EQ(CreateGlooCommunicator(options).status().code(), StatusCode::kInvalidArgument);
}

TEST(GlooConnect, MissingPeerTimesOut) {
  InMemoryKeyValueStore store;
  GlooOptions options;
  options.store = &store;
  options.prefix = "lonely/";
  options.rank = 0;
  options.size = 2;
  options.connect_timeout = milliseconds(300);
  auto comm = CreateGlooCommunicator(options);
  EXPECT_EQ(comm.status().code(), StatusCode::kTimedOut) << comm.status();
}

// The ids of this process's threads.
std::set<pid_t> Threads() {
  std::set<pid_t> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    ids.insert(static_cast<pid_t>(std::stoi(entry.path().filename().string())));
  }
  return ids;
}

// gloo's device loop busy-polls while a caller holds a pair's mutex, so the backend runs it
// SCHED_BATCH: woken by a peer, it never preempts that caller (gloo_communicator.cc,
// CreateDevice). The caller's own thread keeps its policy.
TEST(GlooDevice, LoopThreadRunsSchedBatchAndTheCallerKeepsItsPolicy) {
  const int caller_policy = sched_getscheduler(0);
  ASSERT_NE(caller_policy, SCHED_BATCH);
  const std::set<pid_t> before = Threads();
  InMemoryKeyValueStore store;
  GlooOptions options;
  options.store = &store;
  options.prefix = "batch/";
  options.own_device = true;  // a device of its own: its loop thread is new
  auto comm = CreateGlooCommunicator(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  int64_t one = 1;
  ASSERT_TRUE((*comm)->Allreduce(&one, 1, DataType::kInt64, ReduceOp::kSum).ok());
  int alive = 0;
  for (pid_t id : Threads()) {
    if (before.count(id) > 0) continue;
    // The thread that made the device (SCHED_BATCH as well) has been joined; the loop is alive.
    const int policy = sched_getscheduler(id);
    if (policy == -1) continue;
    ++alive;
    EXPECT_EQ(policy, SCHED_BATCH) << "thread " << id;
  }
  EXPECT_GE(alive, 1) << "no new thread: where is the device's loop?";
  EXPECT_EQ(sched_getscheduler(0), caller_policy);
}

}  // namespace
}  // namespace elastra
