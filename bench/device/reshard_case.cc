// bench_device's reshard case: device-to-device resharding over an NcclCommunicator against raw
// ncclSend/ncclRecv, one process per rank (see bench_device.cc).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>
#include <nccl.h>

#include "bench/device/bench_device.h"
#include "collectives/nccl/nccl_communicator.h"
#include "elastra/device_buffer.h"
#include "elastra/layout.h"
#include "elastra/sharding.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/rank_process.h"

namespace elastra::bench_device {
namespace {

Status NcclOk(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return OkStatus();
  return InternalError(std::string(what) + ": " + ncclGetErrorString(r));
}

#define BENCH_NCCL(call) ELASTRA_RETURN_IF_ERROR(NcclOk((call), #call))

// --- Reshard: one rank -------------------------------------------------------------------------

// The global value of element `index` of tensor `t`.
uint32_t GlobalValue(size_t t, int64_t index) {
  uint64_t x =
      (static_cast<uint64_t>(t) << 40) ^ (static_cast<uint64_t>(index) * 0x9E3779B97F4A7C15ULL);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ULL;
  return static_cast<uint32_t>(x ^ (x >> 32));
}

// The bytes of `region` of tensor `t` (its elements in the region's local order).
std::vector<uint32_t> Cut(size_t t, const TensorSpec& spec, const Region& region) {
  std::vector<uint32_t> out(region.elements());
  const int64_t cols = FullRect(spec.shape).col_end;
  for (const Rect& p : region.Pieces()) {
    for (int64_t r = p.row_begin; r < p.row_end; ++r) {
      uint32_t* dst = out.data() + region.LocalOffset(r, p.col_begin);
      for (int64_t c = p.col_begin; c < p.col_end; ++c) *dst++ = GlobalValue(t, r * cols + c);
    }
  }
  return out;
}

// One transformer block's worth of fp32 state, 4 tensors of state_mib / 4 each: qkv (column-
// parallel: rows over TP) and proj (row-parallel: columns over TP) weights replicated over DP,
// and their Adam moments split over DP (ZeRO-1). dp=2 -> tp=2 then moves a quarter of
// proj.exp_avg each way (strided: packed); tp=2 -> dp=2 also half of each weight.
StateSpec MakeState(int state_mib) {
  const int64_t rows =
      std::max<int64_t>(2, (static_cast<int64_t>(state_mib) << 20) / 4 / 4 / kCols);
  StateSpec s;
  s.num_layers = 1;
  s.tensors = {
      {"qkv.weight", {rows, kCols}, 4, {0, -1, false}},
      {"proj.weight", {rows, kCols}, 4, {1, -1, false}},
      {"qkv.exp_avg", {rows, kCols}, 4, {0, -1, true}},
      {"proj.exp_avg", {rows, kCols}, 4, {1, -1, true}},
  };
  return s;
}

const std::vector<std::pair<Layout, Layout>>& Changes() {
  static const std::vector<std::pair<Layout, Layout>> changes = {{{2, 1, 1}, {1, 1, 2}},
                                                                 {{1, 1, 2}, {2, 1, 1}}};
  return changes;
}

Region RegionOf(const StateSpec& state, size_t t, const Placement& p, int worker) {
  const int rank = p.RankOfWorker(worker);
  if (rank < 0) return {};
  return LocalRegion(state.tensors[t], state.num_layers, p.layout, CoordinatesOf(p.layout, rank));
}

// A blocking NCCL communicator and its stream, released on every path.
struct RawNccl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  ~RawNccl() {
    if (comm != nullptr) ncclCommAbort(comm);  // an error path: do not wait for the peers
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// Copies of `from` in fresh device buffers.
StatusOr<DeviceShardMap> CopyShards(const DeviceShardMap& from) {
  DeviceShardMap out;
  for (const auto& [name, buffer] : from) {
    ELASTRA_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(0, buffer.size()));
    BENCH_CUDA(cudaMemcpy(b.data(), buffer.data(), buffer.size(), cudaMemcpyDeviceToDevice));
    out.emplace(name, std::move(b));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  return out;
}

// The largest `value` over all ranks (a one-element allreduce on the device).
StatusOr<double> MaxOverRanks(NcclCommunicator& comm, double value) {
  ELASTRA_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(0, sizeof(double)));
  ELASTRA_RETURN_IF_ERROR(b.CopyFromHost(&value, sizeof(value)));
  ELASTRA_RETURN_IF_ERROR(comm.Allreduce(b.data(), 1, DataType::kFloat64, ReduceOp::kMax));
  ELASTRA_RETURN_IF_ERROR(b.CopyToHost(&value, sizeof(value)));
  return value;
}

// Checks that `shards` hold exactly the new layout's cut of the global tensors.
Status VerifyShards(const StateSpec& state, const Placement& to, int rank,
                    const DeviceShardMap& shards) {
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    const std::string& name = state.tensors[t].name;
    const Region region = RegionOf(state, t, to, rank);
    auto it = shards.find(name);
    if (region.empty()) {
      if (it != shards.end() && it->second.size() > 0) {
        return InternalError("holds " + name + " after the move but should not");
      }
      continue;
    }
    if (it == shards.end()) return InternalError("missing " + name + " after the move");
    const std::vector<uint32_t> want = Cut(t, state.tensors[t], region);
    std::vector<uint32_t> got(want.size());
    if (it->second.size() != want.size() * sizeof(uint32_t)) {
      return InternalError(name + " has " + std::to_string(it->second.size()) + " bytes, " +
                           std::to_string(want.size() * sizeof(uint32_t)) + " expected");
    }
    ELASTRA_RETURN_IF_ERROR(it->second.CopyToHost(got.data(), it->second.size()));
    if (std::memcmp(got.data(), want.data(), it->second.size()) != 0) {
      return InternalError("wrong bytes in " + name + " after the move");
    }
  }
  return OkStatus();
}

// One layout change on this rank; the figures (meaningful on rank 0).
StatusOr<Json> RunChange(const Flags& flags, NcclCommunicator& ours, RawNccl& raw,
                         const StateSpec& state, const Layout& from_layout,
                         const Layout& to_layout) {
  const int rank = flags.rank;
  std::vector<int> identity(kWorkers), hosts(kWorkers);
  std::iota(identity.begin(), identity.end(), 0);
  std::iota(hosts.begin(), hosts.end(), 0);  // one "host" per rank, as NCCL_HOSTID says
  const Placement from{from_layout, identity}, to{to_layout, identity};
  ELASTRA_ASSIGN_OR_RETURN(ReshardPlan plan, BuildReshardPlan(state, from, to, hosts));

  // The old layout's shards, filled once; every repetition starts from a copy.
  DeviceShardMap initial;
  for (size_t t = 0; t < state.tensors.size(); ++t) {
    const Region region = RegionOf(state, t, from, rank);
    if (region.empty()) continue;
    const std::vector<uint32_t> bytes = Cut(t, state.tensors[t], region);
    const size_t n = bytes.size() * sizeof(uint32_t);
    ELASTRA_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(0, n));
    ELASTRA_RETURN_IF_ERROR(b.CopyFromHost(bytes.data(), n));
    initial.emplace(state.tensors[t].name, std::move(b));
  }

  // The raw side: one device buffer per (sender, receiver) pair this rank is part of, sized like
  // the plan's traffic between them.
  std::map<std::pair<int, int>, int64_t> pair_bytes;
  for (const Transfer& t : plan.transfers) pair_bytes[{t.src, t.dst}] += t.bytes;
  struct PeerBuffer {
    int peer;
    DeviceBuffer buffer;
  };
  std::vector<PeerBuffer> sends, recvs;
  for (const auto& [pair, bytes] : pair_bytes) {
    if (pair.first != rank && pair.second != rank) continue;
    ELASTRA_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(0, bytes));
    if (pair.first == rank) {
      BENCH_CUDA(cudaMemset(b.data(), rank + 1, bytes));
      sends.push_back({pair.second, std::move(b)});
    } else {
      recvs.push_back({pair.first, std::move(b)});
    }
  }
  BENCH_CUDA(cudaDeviceSynchronize());

  ReshardExecutorOptions options;
  options.timeout = std::chrono::milliseconds(30000);
  auto run_ours = [&](ReshardExecutorStats* st, DeviceShardMap* shards) -> StatusOr<double> {
    ELASTRA_RETURN_IF_ERROR(ours.Barrier());
    const auto t0 = Clock::now();
    ELASTRA_RETURN_IF_ERROR(ExecuteDeviceReshard(plan, ours, 0, shards, options, st));
    ELASTRA_RETURN_IF_ERROR(ours.Barrier());
    return Since(t0);
  };
  auto run_raw = [&]() -> StatusOr<double> {
    ELASTRA_RETURN_IF_ERROR(ours.Barrier());
    const auto t0 = Clock::now();
    BENCH_NCCL(ncclGroupStart());
    for (PeerBuffer& r : recvs) {
      BENCH_NCCL(
          ncclRecv(r.buffer.data(), r.buffer.size(), ncclUint8, r.peer, raw.comm, raw.stream));
    }
    for (PeerBuffer& s : sends) {
      BENCH_NCCL(
          ncclSend(s.buffer.data(), s.buffer.size(), ncclUint8, s.peer, raw.comm, raw.stream));
    }
    BENCH_NCCL(ncclGroupEnd());
    BENCH_CUDA(cudaStreamSynchronize(raw.stream));
    ELASTRA_RETURN_IF_ERROR(ours.Barrier());
    return Since(t0);
  };

  // Warm-up (NCCL connects point-to-point peers lazily, on the first transfer), checked.
  {
    ELASTRA_ASSIGN_OR_RETURN(DeviceShardMap shards, CopyShards(initial));
    ReshardExecutorStats st;
    ELASTRA_RETURN_IF_ERROR(run_ours(&st, &shards).status());
    ELASTRA_RETURN_IF_ERROR(VerifyShards(state, to, rank, shards));
    ELASTRA_RETURN_IF_ERROR(run_raw().status());
    for (const PeerBuffer& r : recvs) {
      uint8_t first = 0, last = 0;
      ELASTRA_RETURN_IF_ERROR(r.buffer.CopyToHost(&first, 1));
      ELASTRA_RETURN_IF_ERROR(r.buffer.CopyToHost(&last, 1, r.buffer.size() - 1));
      if (first != r.peer + 1 || last != r.peer + 1) {
        return InternalError("raw NCCL: wrong bytes from rank " + std::to_string(r.peer));
      }
    }
  }

  double best_ours = 1e30, best_raw = 1e30, best_transfer = 1e30;
  ReshardExecutorStats last;
  for (int rep = 0; rep < flags.reps; ++rep) {
    ELASTRA_ASSIGN_OR_RETURN(DeviceShardMap shards, CopyShards(initial));
    ReshardExecutorStats st;
    ELASTRA_ASSIGN_OR_RETURN(double ours_s, run_ours(&st, &shards));
    ELASTRA_ASSIGN_OR_RETURN(double transfer_s, MaxOverRanks(ours, st.seconds_transfer));
    ELASTRA_ASSIGN_OR_RETURN(double raw_s, run_raw());
    best_ours = std::min(best_ours, ours_s);
    best_raw = std::min(best_raw, raw_s);
    best_transfer = std::min(best_transfer, transfer_s);
    last = st;
    std::fprintf(stderr,
                 "bench_device rank %d: %s -> %s rep %d: ours %.4f s (transfer %.4f s), "
                 "raw %.4f s\n",
                 rank, from_layout.ToString().c_str(), to_layout.ToString().c_str(), rep, ours_s,
                 transfer_s, raw_s);
  }
  const double moved = static_cast<double>(plan.bytes_moved);
  return Json{{"from", from_layout.ToString()},
              {"to", to_layout.ToString()},
              {"workers", kWorkers},
              {"bytes_moved", plan.bytes_moved},
              {"bytes_lower_bound", plan.bytes_lower_bound},
              {"bytes_local", plan.bytes_local},
              {"transfers", plan.num_transfers()},
              {"rank0_messages_sent", last.messages_sent},
              {"rank0_bytes_staged", last.bytes_staged},
              {"ours_s", best_ours},
              {"raw_s", best_raw},
              {"transfer_phase_s", best_transfer},
              {"ours_gbps", GBps(moved, best_ours)},
              {"raw_gbps", GBps(moved, best_raw)},
              {"time_vs_raw", best_raw > 0 ? best_ours / best_raw : 0.0},
              {"verified", true}};
}

StatusOr<Json> RunRank(const Flags& flags, KeyValueStore& store) {
  const int rank = flags.rank, n = flags.size;
  BENCH_CUDA(cudaSetDevice(0));
  NcclOptions o;
  o.store = &store;
  o.prefix = "ours/";
  o.rank = rank;
  o.size = n;
  o.device = 0;
  o.timeout = std::chrono::milliseconds(30000);
  o.connect_timeout = std::chrono::milliseconds(45000);
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> ours, CreateNcclCommunicator(o));

  RawNccl raw;
  ncclUniqueId id;
  if (rank == 0) {
    BENCH_NCCL(ncclGetUniqueId(&id));
    ELASTRA_RETURN_IF_ERROR(
        store.Set("raw/nccl_id", std::string(id.internal, sizeof(id.internal))));
  } else {
    ELASTRA_ASSIGN_OR_RETURN(std::string got,
                             store.Get("raw/nccl_id", std::chrono::milliseconds(45000)));
    if (got.size() != sizeof(id.internal)) return InternalError("raw NCCL id of the wrong size");
    std::memcpy(id.internal, got.data(), sizeof(id.internal));
  }
  BENCH_NCCL(ncclCommInitRank(&raw.comm, n, id, rank));
  BENCH_CUDA(cudaStreamCreateWithFlags(&raw.stream, cudaStreamNonBlocking));

  const StateSpec state = MakeState(flags.state_mib);
  Json changes = Json::array();
  double ours_sum = 0, raw_sum = 0, transfer_sum = 0, moved_sum = 0;
  for (const auto& [from, to] : Changes()) {
    ELASTRA_ASSIGN_OR_RETURN(Json c, RunChange(flags, *ours, raw, state, from, to));
    ours_sum += c["ours_s"].get<double>();
    raw_sum += c["raw_s"].get<double>();
    transfer_sum += c["transfer_phase_s"].get<double>();
    moved_sum += c["bytes_moved"].get<double>();
    changes.push_back(std::move(c));
  }
  ELASTRA_RETURN_IF_ERROR(ours->Barrier());
  BENCH_NCCL(ncclCommDestroy(raw.comm));
  raw.comm = nullptr;
  return Json{{"workers", n},
              {"state_bytes", state.TotalBytes()},
              {"reps", flags.reps},
              {"transport",
               "one process per rank on one GPU, NCCL_HOSTID per rank, P2P and SHM "
               "off: sockets over loopback for both sides"},
              {"changes", changes},
              {"ours_gbps", GBps(moved_sum, ours_sum)},
              {"raw_gbps", GBps(moved_sum, raw_sum)},
              {"time_vs_raw", raw_sum > 0 ? ours_sum / raw_sum : 0.0},
              {"transfer_phase_vs_raw", raw_sum > 0 ? transfer_sum / raw_sum : 0.0}};
}

}  // namespace

int RankMain(const Flags& flags) {
  if (CudaDeviceCount() < 1) return kNoGpuExit;
  testing::FileKeyValueStore store(flags.store);
  StatusOr<Json> result = RunRank(flags, store);
  if (!result.ok()) {
    const std::string what = result.status().ToString();
    std::fprintf(stderr, "bench_device rank %d: %s\n", flags.rank, what.c_str());
    store.Set("error/" + std::to_string(flags.rank), what).IgnoreError();
    return 1;
  }
  if (flags.rank == 0 && !store.Set("reshard_result", result->dump()).ok()) return 1;
  return 0;
}

// --- Reshard: the parent -----------------------------------------------------------------------

StatusOr<Json> RunReshard(const Flags& flags) {
  const std::string dir = testing::MakeTempDir("elastra_bench_device");
  if (dir.empty()) return InternalError("mkdtemp failed");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorkers; ++r) {
    pids.push_back(testing::SpawnRank(
        self,
        {"--rank", std::to_string(r), "--size", std::to_string(kWorkers), "--store", dir,
         "--state-mib", std::to_string(flags.state_mib), "--reps", std::to_string(flags.reps)},
        r));
  }
  const auto codes =
      testing::WaitRanks(pids, Clock::now() + std::chrono::seconds(flags.rank_timeout_s));
  testing::FileKeyValueStore store(dir);
  auto got = store.Get("reshard_result", std::chrono::milliseconds(0));
  bool all_ok = true;
  for (int c : codes) all_ok = all_ok && c == 0;
  StatusOr<Json> result = InternalError("unreachable");
  if (all_ok && got.ok()) {
    result = Json::parse(*got, nullptr, /*allow_exceptions=*/false);
    if (result->is_discarded()) result = InternalError("rank 0 wrote a malformed result");
  } else {
    std::string what = "rank exit codes";
    for (int c : codes) what += " " + std::to_string(c);
    if (!codes.empty() && codes[0] == kNoGpuExit) what += " (no CUDA device in the ranks)";
    if (std::find(codes.begin(), codes.end(), -1) != codes.end()) {
      what += " (-1: killed after " + std::to_string(flags.rank_timeout_s) + " s)";
    }
    for (int r = 0; r < kWorkers; ++r) {
      auto e = store.Get("error/" + std::to_string(r), std::chrono::milliseconds(0));
      if (e.ok()) what += "; rank " + std::to_string(r) + ": " + *e;
    }
    result = InternalError(what);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

}  // namespace elastra::bench_device
