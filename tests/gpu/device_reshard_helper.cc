// device_reshard_helper: one worker of a device-to-device reshard over NCCL, started once per rank
// by device_reshard_test (rank_process.h gives each its own NCCL_HOSTID, so all may share one GPU).
//
//   device_reshard_helper <grow|shrink|reshape> <rank> <size> <store_dir>
//
// Every rank builds the same plan, fills the device shards it holds under the old layout with
// bytes cut from known global tensors, runs ExecuteDeviceReshard over an NCCL world, copies the
// new shards back and compares them byte for byte with the new layout's cut. Exit 0 when all
// match; "FAIL ..." on stderr and a non-zero code otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/nccl/nccl_communicator.h"
#include "elastra/device_buffer.h"
#include "elastra/sharding.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/reshard/global_shards.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

using testing::MakeShard;

StateSpec MakeState() {
  StateSpec s;
  s.num_layers = 2;
  s.tensors = {
      {"w1", {48, 36}, 8, {1, 0, false}},   // column split over TP, layer 0
      {"w2", {36, 48}, 8, {0, 1, false}},   // row split over TP, layer 1
      {"b", {36}, 4, {0, 0, false}},        // 1-D split over TP
      {"v", {17}, 8, {-1, -1, false}},      // replicated everywhere
      {"m", {30, 24}, 8, {1, 1, true}},     // ZeRO: split over TP, then flat over DP
      {"big", {512, 256}, 4, {-1, -1, false}},  // large contiguous runs: the direct path
  };
  return s;
}

int Fail(int rank, const std::string& what) {
  std::fprintf(stderr, "FAIL rank %d: %s\n", rank, what.c_str());
  return 1;
}

int Run(const std::string& scenario, int rank, int size, const std::string& dir) {
  const StateSpec state = MakeState();
  Placement from, to;
  std::vector<int> hosts;
  if (scenario == "grow") {  // 2 workers dp=2 -> 3 workers tp=3; worker 2 is new
    from = {Layout{2, 1, 1}, {0, 1}};
    to = {Layout{1, 1, 3}, {0, 1, 2}};
  } else if (scenario == "shrink") {  // 3 workers tp=3 -> 2 workers pp=2; worker 2 only sends
    from = {Layout{1, 1, 3}, {0, 1, 2}};
    to = {Layout{1, 2, 1}, {1, 0}};
  } else if (scenario == "reshape") {  // 4 workers dp=2,tp=2 -> 4 workers pp=2,tp=2, permuted
    from = {Layout{2, 1, 2}, {0, 1, 2, 3}};
    to = {Layout{1, 2, 2}, {3, 1, 2, 0}};
  } else {
    return Fail(rank, "unknown scenario " + scenario);
  }
  for (int w = 0; w < size; ++w) hosts.push_back(w);
  auto plan = BuildReshardPlan(state, from, to, hosts);
  if (!plan.ok()) return Fail(rank, "plan: " + plan.status().ToString());

  testing::FileKeyValueStore store(dir);
  NcclOptions no;
  no.store = &store;
  no.prefix = scenario + "/";
  no.rank = rank;
  no.size = size;
  no.device = 0;
  no.timeout = std::chrono::milliseconds(20000);
  auto comm = CreateNcclCommunicator(no);
  if (!comm.ok()) return Fail(rank, "nccl: " + comm.status().ToString());

  DeviceShardMap shards;
  const int from_rank = from.RankOfWorker(rank);
  for (size_t t = 0; from_rank >= 0 && t < state.tensors.size(); ++t) {
    const Region region = LocalRegion(state.tensors[t], state.num_layers, from.layout,
                                      CoordinatesOf(from.layout, from_rank));
    if (region.empty()) continue;
    HostBytes bytes = MakeShard(static_cast<int>(t), state.tensors[t], region);
    auto b = DeviceBuffer::Allocate(0, bytes.size());
    if (!b.ok()) return Fail(rank, b.status().ToString());
    if (!b->CopyFromHost(bytes.data(), bytes.size()).ok()) return Fail(rank, "upload");
    shards.emplace(state.tensors[t].name, std::move(b).value());
  }
  ReshardExecutorOptions options;
  options.chunk_bytes = 4096;       // several staged messages per pair
  options.direct_min_bytes = 8192;  // and direct ones for the large tensor's runs
  options.timeout = std::chrono::milliseconds(20000);
  ReshardExecutorStats stats;
  Status s = ExecuteDeviceReshard(*plan, **comm, 0, &shards, options, &stats);
  if (!s.ok()) return Fail(rank, "reshard: " + s.ToString());

  int failures = 0;
  const int to_rank = to.RankOfWorker(rank);
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    const std::string& name = state.tensors[t].name;
    Region region;
    if (to_rank >= 0) {
      region = LocalRegion(state.tensors[t], state.num_layers, to.layout,
                           CoordinatesOf(to.layout, to_rank));
    }
    auto it = shards.find(name);
    if (region.empty()) {
      if (it != shards.end() && it->second.size() > 0) {
        ++failures;
        Fail(rank, "holds " + name + " after the move but should not");
      }
      continue;
    }
    if (it == shards.end()) {
      ++failures;
      Fail(rank, "missing " + name);
      continue;
    }
    const HostBytes want = MakeShard(static_cast<int>(t), state.tensors[t], region);
    HostBytes got(it->second.size(), 0);
    if (got.size() != want.size() || !it->second.CopyToHost(got.data(), got.size()).ok() ||
        std::memcmp(got.data(), want.data(), want.size()) != 0) {
      ++failures;
      Fail(rank, "wrong bytes in " + name);
    }
  }
  std::printf("rank %d: sent %lld received %lld copied %lld staged %lld messages %lld\n", rank,
              static_cast<long long>(stats.bytes_sent), static_cast<long long>(stats.bytes_received),
              static_cast<long long>(stats.bytes_copied), static_cast<long long>(stats.bytes_staged),
              static_cast<long long>(stats.messages_sent));
  if (!(*comm)->Barrier().ok()) return Fail(rank, "final barrier");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s <grow|shrink|reshape> <rank> <size> <store_dir>\n", argv[0]);
    return 64;
  }
  return elastra::Run(argv[1], std::atoi(argv[2]), std::atoi(argv[3]), argv[4]);
}
