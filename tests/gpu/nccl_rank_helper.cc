// nccl_rank_helper: one rank of a multi-process NCCL test. Started by nccl_communicator_test (one
// process per rank, see rank_process.h); rendezvous through a FileKeyValueStore.
//
//   nccl_rank_helper <scenario> <rank> <size> <store_dir> <prefix> [timeout_ms]
//
// Exit code 0 when every check of the scenario passed; a failed check prints "FAIL ..." to stderr
// and exits non-zero (the test reports the code). Scenarios: collectives, split, hang, kill, interrupt, leak
// (the last four in nccl_rank_helper_failures.cc).
#include <cuda_runtime.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "collectives/nccl/nccl_communicator.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/nccl_rank_helper.h"

namespace elastra {

StatusOr<int64_t> SumOf(NcclCommunicator& comm, int64_t value) {
  DeviceBuffer<int64_t> buf(1);
  buf.Upload({value});
  ELASTRA_RETURN_IF_ERROR(comm.Allreduce(buf.get(), 1, DataType::kInt64, ReduceOp::kSum));
  return buf.Download()[0];
}

namespace {

// Rank r's element i: exact in every type. int64 values exceed 2^32 to catch a narrowed type.
template <typename T>
T ValueOf(int r, size_t i) {
  const int64_t base = static_cast<int64_t>((r + 1) * ((i % 13) + 1)) * ((i % 2) ? 1 : -1);
  if constexpr (std::is_same_v<T, int64_t>) return base * (int64_t{1} << 33) + r;
  return static_cast<T>(base);
}

template <typename T>
T Reduce(ReduceOp op, int size, size_t i) {
  T acc = ValueOf<T>(0, i);
  for (int r = 1; r < size; ++r) {
    T v = ValueOf<T>(r, i);
    if (op == ReduceOp::kSum) acc += v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  return acc;
}

template <typename T>
int CheckAllreduce(NcclCommunicator& comm, ReduceOp op, size_t count) {
  DeviceBuffer<T> buf(count);
  std::vector<T> in(count);
  for (size_t i = 0; i < count; ++i) in[i] = ValueOf<T>(comm.rank(), i);
  buf.Upload(in);
  REQUIRE_OK(comm.Allreduce(buf.get(), count, TypeOf<T>(), op, comm.default_timeout()));
  auto out = buf.Download();
  size_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    if (out[i] != Reduce<T>(op, comm.size(), i)) ++bad;
  }
  EXPECT_TRUE_H(bad == 0, "allreduce %s op %d: %zu of %zu elements wrong (e.g. [1]=%g want %g)",
                DataTypeName(TypeOf<T>()), static_cast<int>(op), bad, count,
                static_cast<double>(out[1]), static_cast<double>(Reduce<T>(op, comm.size(), 1)));
  return 0;
}

int ScenarioCollectives(const Args& a, KeyValueStore& store) {
  NcclOptions o{&store, a.prefix, a.rank, a.size, 0, a.timeout, Ms(60000)};
  auto made = CreateNcclCommunicator(o);
  REQUIRE_OK(made.status());
  NcclCommunicator& comm = **made;
  EXPECT_TRUE_H(comm.rank() == a.rank && comm.size() == a.size, "rank/size %d/%d", comm.rank(),
                comm.size());
  EXPECT_TRUE_H(comm.backend() == Backend::kNccl, "backend %s", BackendName(comm.backend()));
  const size_t kCount = 4099;  // not a multiple of anything NCCL likes
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    if (CheckAllreduce<float>(comm, op, kCount)) return 1;
    if (CheckAllreduce<double>(comm, op, kCount)) return 1;
    if (CheckAllreduce<int64_t>(comm, op, kCount)) return 1;
  }

  // Broadcast from the last rank.
  {
    const int root = a.size - 1;
    DeviceBuffer<double> buf(kCount);
    std::vector<double> in(kCount);
    for (size_t i = 0; i < kCount; ++i) in[i] = a.rank == root ? 0.5 * i + 7 : -1;
    buf.Upload(in);
    REQUIRE_OK(comm.Broadcast(buf.get(), kCount, DataType::kFloat64, root));
    auto out = buf.Download();
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) bad += out[i] != 0.5 * i + 7;
    EXPECT_TRUE_H(bad == 0, "broadcast: %zu wrong", bad);
  }
  // Allgather: rank r contributes r*1000 + i.
  {
    DeviceBuffer<int64_t> send(kCount), recv(kCount * a.size);
    std::vector<int64_t> in(kCount);
    for (size_t i = 0; i < kCount; ++i) in[i] = a.rank * 1000000 + static_cast<int64_t>(i);
    send.Upload(in);
    REQUIRE_OK(comm.Allgather(send.get(), recv.get(), kCount, DataType::kInt64, a.timeout));
    auto out = recv.Download();
    size_t bad = 0;
    for (int r = 0; r < a.size; ++r) {
      for (size_t i = 0; i < kCount; ++i) bad += out[r * kCount + i] != r * 1000000 + int64_t(i);
    }
    EXPECT_TRUE_H(bad == 0, "allgather: %zu wrong", bad);
  }
  // Reduce-scatter (sum): block b of rank r holds (r+1) * (b*kCount + i).
  {
    DeviceBuffer<float> send(kCount * a.size), recv(kCount);
    std::vector<float> in(kCount * a.size);
    for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<float>((a.rank + 1) * (j % 1000));
    send.Upload(in);
    REQUIRE_OK(comm.ReduceScatter(send.get(), recv.get(), kCount, DataType::kFloat32,
                                  ReduceOp::kSum, a.timeout));
    auto out = recv.Download();
    const float ranks_sum = a.size * (a.size + 1) / 2.0f;
    size_t bad = 0;
    for (size_t i = 0; i < kCount; ++i) {
      bad += out[i] != ranks_sum * static_cast<float>((a.rank * kCount + i) % 1000);
    }
    EXPECT_TRUE_H(bad == 0, "reduce-scatter: %zu wrong", bad);
  }
  // Ring shift with SendRecv (needs the group call, or it deadlocks), then plain Send/Recv 0<->1.
  {
    const size_t bytes = 1 << 20;
    DeviceBuffer<uint8_t> send(bytes), recv(bytes);
    std::vector<uint8_t> in(bytes);
    for (size_t i = 0; i < bytes; ++i) in[i] = static_cast<uint8_t>(a.rank * 31 + i);
    send.Upload(in);
    const int next = (a.rank + 1) % a.size, prev = (a.rank + a.size - 1) % a.size;
    REQUIRE_OK(comm.SendRecv(send.get(), bytes, next, recv.get(), bytes, prev, a.timeout));
    auto out = recv.Download();
    size_t bad = 0;
    for (size_t i = 0; i < bytes; ++i) bad += out[i] != static_cast<uint8_t>(prev * 31 + i);
    EXPECT_TRUE_H(bad == 0, "ring SendRecv: %zu wrong", bad);

    if (a.rank == 0) {
      REQUIRE_OK(comm.Send(send.get(), 4096, 1, 7, a.timeout));
      REQUIRE_OK(comm.Recv(recv.get(), 4096, 1, 8, a.timeout));
      auto back = recv.Download();
      size_t bad2 = 0;
      for (size_t i = 0; i < 4096; ++i) bad2 += back[i] != static_cast<uint8_t>(1 * 31 + i);
      EXPECT_TRUE_H(bad2 == 0, "Recv from 1: %zu wrong", bad2);
    } else if (a.rank == 1) {
      REQUIRE_OK(comm.Recv(recv.get(), 4096, 0, 7, a.timeout));
      auto got = recv.Download();
      size_t bad2 = 0;
      for (size_t i = 0; i < 4096; ++i) bad2 += got[i] != static_cast<uint8_t>(i);
      EXPECT_TRUE_H(bad2 == 0, "Recv from 0: %zu wrong", bad2);
      REQUIRE_OK(comm.Send(send.get(), 4096, 0, 8, a.timeout));
    }
  }
  // A caller's mistake is kInvalidArgument and leaves the communicator usable.
  {
    std::vector<float> host(16);
    Status s = comm.Allreduce(host.data(), 16, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_TRUE_H(s.code() == StatusCode::kInvalidArgument, "host pointer: %s",
                  s.ToString().c_str());
    DeviceBuffer<float> d(16);
    s = comm.Broadcast(d.get(), 16, DataType::kFloat32, a.size);
    EXPECT_TRUE_H(s.code() == StatusCode::kInvalidArgument, "bad root: %s", s.ToString().c_str());
    s = comm.Send(d.get(), 64, a.rank, 0, a.timeout);
    EXPECT_TRUE_H(s.code() == StatusCode::kInvalidArgument, "send to self: %s",
                  s.ToString().c_str());
    REQUIRE_OK(comm.health());
  }
  REQUIRE_OK(comm.Barrier());
  if (CheckAllreduce<float>(comm, ReduceOp::kSum, 1 << 20)) return 1;
  return g_failures == 0 ? 0 : 1;
}

int ScenarioSplit(const Args& a, KeyValueStore& store) {
  NcclOptions o{&store, a.prefix, a.rank, a.size, 0, a.timeout, Ms(60000)};
  auto made = CreateNcclCommunicator(o);
  REQUIRE_OK(made.status());
  NcclCommunicator& world = **made;

  // Two groups by parity; keys reverse the order inside a group.
  auto child = world.Split(a.rank % 2, -a.rank);
  REQUIRE_OK(child.status());
  EXPECT_TRUE_H(*child != nullptr, "split gave no communicator");
  if (*child == nullptr) return 1;
  std::vector<int> members;
  for (int r = a.size - 1; r >= 0; --r) {
    if (r % 2 == a.rank % 2) members.push_back(r);
  }
  int want_rank = 0;
  while (members[want_rank] != a.rank) ++want_rank;
  EXPECT_TRUE_H((*child)->size() == static_cast<int>(members.size()), "child size %d want %zu",
                (*child)->size(), members.size());
  EXPECT_TRUE_H((*child)->rank() == want_rank, "child rank %d want %d", (*child)->rank(),
                want_rank);
  int64_t want_sum = 0;
  for (int r : members) want_sum += r + 100;
  auto sum = SumOf(**child, a.rank + 100);
  REQUIRE_OK(sum.status());
  EXPECT_TRUE_H(*sum == want_sum, "child allreduce %" PRId64 " want %" PRId64, *sum, want_sum);

  // A rank with a negative color takes part in the split but gets no communicator.
  auto partial = world.Split(a.rank == 1 ? -1 : 0, a.rank);
  REQUIRE_OK(partial.status());
  if (a.rank == 1) {
    EXPECT_TRUE_H(*partial == nullptr, "NOCOLOR rank got a communicator");
  } else {
    EXPECT_TRUE_H(*partial != nullptr && (*partial)->size() == a.size - 1, "partial split size");
    if (*partial != nullptr) {
      auto s2 = SumOf(**partial, 1);
      REQUIRE_OK(s2.status());
      EXPECT_TRUE_H(*s2 == a.size - 1, "partial allreduce %" PRId64, *s2);
    }
  }

  // Bad shrink lists are the caller's mistake.
  {
    auto self = world.Shrink({a.rank});
    EXPECT_TRUE_H(self.status().code() == StatusCode::kInvalidArgument, "shrink self: %s",
                  self.status().ToString().c_str());
    auto none = world.Shrink({});
    EXPECT_TRUE_H(none.status().code() == StatusCode::kInvalidArgument, "shrink none");
    auto out = world.Shrink({a.size + 3});
    EXPECT_TRUE_H(out.status().code() == StatusCode::kInvalidArgument, "shrink out of range");
    REQUIRE_OK(world.health());
  }

  // Planned shrink: the last rank leaves; the survivors continue on a healthy parent.
  const int leaving = a.size - 1;
  if (a.rank == leaving) {
    std::vector<std::string> keys;
    for (int r = 0; r < leaving; ++r) keys.push_back(a.prefix + "shrunk/" + std::to_string(r));
    REQUIRE_OK(store.Wait(keys, Ms(60000)));
    world.Abort();  // leaving: nobody will finalize with us
  } else {
    // The list is passed unsorted and with the caller's copy kept intact.
    std::vector<int> exclude = {leaving};
    auto small = world.Shrink(exclude);
    REQUIRE_OK(small.status());
    EXPECT_TRUE_H(exclude.size() == 1 && exclude[0] == leaving, "exclude list changed");
    EXPECT_TRUE_H((*small)->size() == a.size - 1 && (*small)->rank() == a.rank,
                  "shrunk rank/size %d/%d", (*small)->rank(), (*small)->size());
    auto s3 = SumOf(**small, a.rank + 1);
    REQUIRE_OK(s3.status());
    EXPECT_TRUE_H(*s3 == (a.size - 1) * a.size / 2, "shrunk allreduce %" PRId64, *s3);
    REQUIRE_OK(world.health());  // a planned shrink leaves the parent usable
    REQUIRE_OK(store.Set(a.prefix + "shrunk/" + std::to_string(a.rank), "1"));
    world.Abort();  // the leaving rank is gone: finalize would wait for it
  }
  return g_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) {
  using namespace elastra;
  if (argc < 6) {
    std::fprintf(stderr,
                 "usage: %s <collectives|split|hang|kill|interrupt|leak> <rank> <size> <store_dir> "
                 "<prefix> [timeout_ms]\n",
                 argv[0]);
    return 64;
  }
  Args a;
  a.scenario = argv[1];
  a.rank = std::atoi(argv[2]);
  a.size = std::atoi(argv[3]);
  a.dir = argv[4];
  a.prefix = argv[5];
  if (argc > 6) a.timeout = Ms(std::atoi(argv[6]));
  g_rank = a.rank;
  testing::FileKeyValueStore store(a.dir);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (a.scenario == "collectives") return ScenarioCollectives(a, store);
  if (a.scenario == "split") return ScenarioSplit(a, store);
  if (a.scenario == "hang") return ScenarioHang(a, store);
  if (a.scenario == "kill") return ScenarioKill(a, store);
  if (a.scenario == "leak") return ScenarioLeak(a, store);
  if (a.scenario == "interrupt") return ScenarioInterrupt(a, store);
  std::fprintf(stderr, "unknown scenario %s\n", a.scenario.c_str());
  return 64;
}
