// bench_device: the training state in device memory, on CUDA device 0, each figure beside its
// reference in the same run.
//
//   reshard:    device-to-device resharding of a ~256 MiB state (4 fp32 tensors of a transformer
//               block: a column- and a row-parallel weight replicated over DP, and their Adam
//               moments under ZeRO-1) between 2 workers, dp=2 -> tp=2 and back.
//                 ours: ExecuteDeviceReshard over an NcclCommunicator (includes allocating the
//                       new shards, the local copies and freeing the old shards);
//                 raw:  ncclSend/ncclRecv of the same bytes per (sender, receiver) pair as one
//                       message each, all posted in one ncclGroupStart/End on a plain blocking
//                       communicator (ncclCommInitRank), then cudaStreamSynchronize.
//               Ranks are processes (this binary re-executed with --rank, see
//               tests/gpu/rank_process.h: each has its own NCCL_HOSTID, P2P and SHM off, so both
//               sides go over sockets on loopback even on one GPU). Each side is timed on every
//               rank from a barrier before to a barrier after; best of --reps after an untimed
//               warm-up, whose result is checked byte for byte against the global tensors.
//   checkpoint: a device-resident TensorCollection (8 fp32 tensors, --ckpt-mib in all) saved with
//               CheckpointWriter through a pinned staging image (copy_from_device =
//               CopyDeviceToHost, as the Worker does): Snapshot + background write + commit,
//               beside `dd if=/dev/zero bs=64M oflag=direct conv=fsync` of the same bytes (and
//               beside dd of the very same bytes from tmpfs when /dev/shm has room). The stall
//               (CheckpointWriter::last_copy_seconds(), the part of Snapshot() that blocks the
//               step) beside one plain cudaMemcpy D2H per tensor into cudaMallocHost memory.
//               Medians of --reps, as bench_checkpoint. Where the filesystem refuses O_DIRECT
//               the writer falls back to buffered writes, and so does dd ("cache" says which).
//
// Ratios (1.0 = as fast as the reference):
//   reshard_vs_raw_nccl   = our times / raw times, each summed over both changes (lower is
//                           better);
//   checkpoint_save_vs_dd = save GB/s / dd GB/s, as bench_checkpoint's save_vs_dd (higher is
//                           better);
//   stall_vs_memcpy_d2h   = stall time / memcpy time (lower is better).
// The last line is one JSON object: {"bench":"device","reshard_vs_raw_nccl":x,
// "checkpoint_save_vs_dd":y,"stall_vs_memcpy_d2h":z, GB/s of every stage, "reshard":{...},
// "checkpoint":{...},"reason":...}. Without a CUDA device every figure is null,
// "reason":"no CUDA device", and the exit code is 0; a failed part gives null figures, its
// message under "errors", and exit code 1.
//
// Flags: --state-mib N (256) --ckpt-mib N (1024, a multiple of 64) --reps N (3)
//        --dir DIR (where the checkpoint's temporary directory goes; $TMPDIR or /tmp)
//        --rank-timeout-s N (60: the ranks are killed after it) --no-reshard --no-checkpoint
// Rank mode (internal): --rank R --size N --store DIR
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
#include <nlohmann/json.hpp>

#include "collectives/nccl/nccl_communicator.h"
#include "elastra/device_buffer.h"
#include "elastra/layout.h"
#include "elastra/sharding.h"
#include "elastra/tensor_collection.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/rank_process.h"
#include "worker/collection_adapter.h"
#include "checkpoint/env.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "state/reshard_executor.h"
#include "state/reshard_plan.h"

namespace elastra {
namespace {

namespace ck = checkpoint;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;  // keys in the order written: the headline first

constexpr int kNoGpuExit = 77;
constexpr int kWorkers = 2;
constexpr int64_t kCols = 4096;  // every tensor is [rows, 4096] fp32
constexpr char kNoDevice[] = "no CUDA device";

struct Flags {
  int state_mib = 256;
  int ckpt_mib = 1024;
  int reps = 3;
  std::string dir;
  int rank_timeout_s = 60;
  bool reshard = true;
  bool checkpoint = true;
  // Rank mode.
  int rank = -1;
  int size = kWorkers;
  std::string store;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double GBps(double bytes, double seconds) { return seconds > 0 ? bytes / seconds / 1e9 : 0; }

Status CudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  return InternalError(std::string(what) + ": " + cudaGetErrorString(e));
}

Status NcclOk(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return OkStatus();
  return InternalError(std::string(what) + ": " + ncclGetErrorString(r));
}

#define BENCH_CUDA(call) ELASTRA_RETURN_IF_ERROR(CudaOk((call), #call))
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

// --- Checkpoint of device shards ---------------------------------------------------------------

StatusOr<double> RunDd(const std::string& cmd) {
  const auto t = Clock::now();
  if (std::system((cmd + " 2>/dev/null").c_str()) != 0) return InternalError("failed: " + cmd);
  return Since(t);
}

// Removes a file when it goes out of scope (error paths included).
struct ScopedFile {
  std::string path;
  ~ScopedFile() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

struct PinnedHost {
  void* p = nullptr;
  ~PinnedHost() {
    if (p != nullptr) cudaFreeHost(p);
  }
};

// The checkpoint part in `work` (a fresh directory of its own).
StatusOr<Json> RunCheckpointIn(const Flags& flags, const std::string& work) {
  constexpr int kTensors = 8;
  const uint64_t bytes = static_cast<uint64_t>(flags.ckpt_mib) << 20;
  const uint64_t per_tensor = bytes / kTensors;
  const int64_t rows = static_cast<int64_t>(per_tensor / 4 / kCols);
  TensorCollection state;
  for (int t = 0; t < kTensors; ++t) {
    ELASTRA_RETURN_IF_ERROR(state.AddTensor("layer" + std::to_string(t) + ".weight", {rows, kCols},
                                            DataType::kFloat32));
  }
  ELASTRA_RETURN_IF_ERROR(state.AddScalar(kStepScalarName, 0));
  for (int t = 0; t < kTensors; ++t) {
    auto v = state.View<float>("layer" + std::to_string(t) + ".weight");
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(t) + 1e-3f * (i % 100003);
  }
  // dd's second source: the very same bytes in tmpfs, if /dev/shm has room (containers often
  // give it 64 MiB); the headline compares with /dev/zero.
  ScopedFile same_file;
  std::string& same_source = same_file.path;
  std::string same_skipped;
  if (std::filesystem::is_directory("/dev/shm")) {
    same_source = "/dev/shm/elastra_bench_device_src_" + std::to_string(::getpid());
    FILE* f = std::fopen(same_source.c_str(), "wb");
    bool ok = f != nullptr;
    for (int t = 0; ok && t < kTensors; ++t) {
      auto v = state.View<float>("layer" + std::to_string(t) + ".weight");
      ok = std::fwrite(v.data(), 1, per_tensor, f) == per_tensor;
    }
    if (f != nullptr) ok = std::fclose(f) == 0 && ok;
    if (!ok) {
      std::remove(same_source.c_str());
      same_source.clear();  // nothing left for ScopedFile
      same_skipped = "cannot write the state to /dev/shm";
    }
  } else {
    same_skipped = "no /dev/shm";
  }
  ELASTRA_RETURN_IF_ERROR(state.SetDevice(0));
  ELASTRA_RETURN_IF_ERROR(state.MoveToDevice());

  const std::string root = ck::JoinPath(work, "ckpt");
  const std::string dd_file = ck::JoinPath(work, "dd.bin");
  ck::WriterOptions wo;
  wo.root = root;
  wo.reserve_bytes = bytes + ck::kShardHeaderBytes + kTensors * ck::kRegionAlignment;
  wo.copy_from_device = [](std::byte* dst, const std::byte* src, size_t n) {
    return CopyDeviceToHost(dst, src, n, 0);
  };
  wo.pin_staging = [](void* p, size_t n) { return PinHostMemory(p, n); };
  wo.unpin_staging = [](void* p) { UnpinHostMemory(p); };
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<ck::CheckpointWriter> writer,
                           ck::CheckpointWriter::Create(wo));

  PinnedHost pinned;
  BENCH_CUDA(cudaMallocHost(&pinned.p, bytes));
  std::memset(pinned.p, 1, bytes);

  std::vector<double> save_s, stall_s, snapshot_s, dd_zero_s, dd_same_s, memcpy_s;
  bool dd_direct = true;
  for (int rep = 0; rep < flags.reps; ++rep) {
    const int64_t step = rep + 1;
    state.SetScalar(kStepScalarName, step);
    const ck::StateView view = ck::ViewOf(state);
    // Save: Snapshot (the stall) + the background write + the commit, as seen by a caller that
    // waits for it.
    const auto t0 = Clock::now();
    ELASTRA_RETURN_IF_ERROR(writer->Snapshot({"bench_device", step, 1}, view).status());
    snapshot_s.push_back(Since(t0));
    stall_s.push_back(writer->last_copy_seconds());
    ELASTRA_ASSIGN_OR_RETURN(ck::ShardDescriptor desc, writer->WaitForWrite());
    ELASTRA_RETURN_IF_ERROR(
        ck::CommitCheckpoint({nullptr, root, 1}, {"bench_device", step, 1}, {}, {desc}).status());
    save_s.push_back(Since(t0));

    const std::string zero_cmd = "dd if=/dev/zero of=" + dd_file +
                                 " bs=64M count=" + std::to_string(bytes >> 26) + " conv=fsync";
    StatusOr<double> dd_zero = RunDd(zero_cmd + (dd_direct ? " oflag=direct" : ""));
    if (!dd_zero.ok() && rep == 0 && dd_direct) {
      // A filesystem without O_DIRECT (tmpfs, some overlays): the writer falls back to buffered
      // writes there too (Env::NewDirectWritableFile), so dd does the same.
      dd_direct = false;
      dd_zero = RunDd(zero_cmd);
    }
    if (!dd_zero.ok()) return dd_zero.status();
    dd_zero_s.push_back(*dd_zero);
    if (!same_source.empty()) {
      ELASTRA_ASSIGN_OR_RETURN(
          double dd_same, RunDd("dd if=" + same_source + " of=" + dd_file + " bs=64M conv=fsync" +
                                (dd_direct ? " oflag=direct" : "")));
      dd_same_s.push_back(dd_same);
    }

    // The stall's reference: the same device bytes into pinned host memory, one copy per tensor
    // as the writer makes.
    const auto t1 = Clock::now();
    size_t at = 0;
    for (const TensorCollection::Tensor& t : state.tensors()) {
      BENCH_CUDA(cudaMemcpy(static_cast<std::byte*>(pinned.p) + at, t.device_data.data(), t.bytes(),
                            cudaMemcpyDeviceToHost));
      at += t.bytes();
    }
    memcpy_s.push_back(Since(t1));
    std::fprintf(stderr,
                 "bench_device checkpoint rep %d: save %.3f s (stall %.1f ms, Snapshot %.1f ms), "
                 "dd /dev/zero %.3f s, dd same bytes %.3f s, memcpy D2H %.1f ms\n",
                 rep, save_s.back(), stall_s.back() * 1e3, snapshot_s.back() * 1e3, *dd_zero,
                 dd_same_s.empty() ? 0.0 : dd_same_s.back(), memcpy_s.back() * 1e3);
  }
  writer.reset();

  const double b = static_cast<double>(bytes);
  const double save = Median(save_s), stall = Median(stall_s), zero = Median(dd_zero_s),
               mc = Median(memcpy_s);
  Json out{
      {"bytes", bytes},
      {"tensors", kTensors},
      {"reps", flags.reps},
      {"dir", work},
      {"figures", "medians of reps"},
      {"cache", dd_direct ? "writes O_DIRECT + fsync for both"
                          : "no O_DIRECT on this filesystem: buffered writes + fsync for both"},
      {"save_s", save},
      {"dd_zero_s", zero},
      {"stall_ms", stall * 1e3},
      {"snapshot_ms", Median(snapshot_s) * 1e3},
      {"memcpy_d2h_ms", mc * 1e3},
      {"save_gbps", GBps(b, save)},
      {"dd_zero_write_gbps", GBps(b, zero)},
      {"snapshot_copy_gbps", GBps(b, stall)},
      {"memcpy_d2h_gbps", GBps(b, mc)},
      {"save_vs_dd", save > 0 ? zero / save : 0.0},
      {"stall_vs_memcpy_d2h", mc > 0 ? stall / mc : 0.0}};
  if (!dd_same_s.empty()) {
    const double same = Median(dd_same_s);
    out["dd_same_bytes_write_gbps"] = GBps(b, same);
    out["save_vs_dd_same_bytes"] = save > 0 ? same / save : 0.0;
  } else {
    out["dd_same_bytes_write_gbps"] = nullptr;
    out["save_vs_dd_same_bytes"] = nullptr;
    out["dd_same_bytes_skipped"] = same_skipped;
  }
  return out;
}

StatusOr<Json> RunCheckpoint(const Flags& flags) {
  std::string base = flags.dir;
  if (base.empty()) base = getenv("TMPDIR") != nullptr ? getenv("TMPDIR") : "/tmp";
  std::error_code ec;
  std::filesystem::create_directories(base, ec);
  std::string templ = base + "/elastra_bench_device_XXXXXX";
  if (::mkdtemp(templ.data()) == nullptr) {
    return InternalError("cannot create a directory in " + base);
  }
  StatusOr<Json> out = RunCheckpointIn(flags, templ);
  std::filesystem::remove_all(templ, ec);
  return out;
}

// --- The JSON line -----------------------------------------------------------------------------

Json Field(const Json& part, const char* key) {
  if (part.is_object() && part.contains(key)) return part[key];
  return nullptr;
}

Json Line(const Json& reshard, const Json& ckpt, const Json& reason, const Json& errors) {
  return Json{{"bench", "device"},
              {"reshard_vs_raw_nccl", Field(reshard, "time_vs_raw")},
              {"checkpoint_save_vs_dd", Field(ckpt, "save_vs_dd")},
              {"stall_vs_memcpy_d2h", Field(ckpt, "stall_vs_memcpy_d2h")},
              {"reshard_ours_gbps", Field(reshard, "ours_gbps")},
              {"reshard_raw_nccl_gbps", Field(reshard, "raw_gbps")},
              {"reshard_transfer_phase_vs_raw", Field(reshard, "transfer_phase_vs_raw")},
              {"checkpoint_save_gbps", Field(ckpt, "save_gbps")},
              {"dd_write_gbps", Field(ckpt, "dd_zero_write_gbps")},
              {"checkpoint_save_vs_dd_same_bytes", Field(ckpt, "save_vs_dd_same_bytes")},
              {"snapshot_copy_gbps", Field(ckpt, "snapshot_copy_gbps")},
              {"memcpy_d2h_gbps", Field(ckpt, "memcpy_d2h_gbps")},
              {"stall_ms", Field(ckpt, "stall_ms")},
              {"memcpy_d2h_ms", Field(ckpt, "memcpy_d2h_ms")},
              {"ratios",
               "reshard: our time / raw NCCL time (lower is better); checkpoint save: "
               "save GB/s / dd GB/s (higher is better); stall: stall / memcpy time "
               "(lower is better)"},
              {"reshard", reshard},
              {"checkpoint", ckpt},
              {"reason", reason},
              {"errors", errors}};
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_device: %s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    auto number = [&]() -> int {
      const std::string v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 0 || n > (1 << 20)) {
        std::fprintf(stderr, "bench_device: %s needs a non-negative integer, got %s\n", a.c_str(),
                     v.c_str());
        std::exit(64);
      }
      return static_cast<int>(n);
    };
    if (a == "--state-mib") {
      flags.state_mib = number();
    } else if (a == "--ckpt-mib") {
      flags.ckpt_mib = number();
    } else if (a == "--reps") {
      flags.reps = number();
    } else if (a == "--dir") {
      flags.dir = value();
    } else if (a == "--rank-timeout-s") {
      flags.rank_timeout_s = number();
    } else if (a == "--no-reshard") {
      flags.reshard = false;
    } else if (a == "--no-checkpoint") {
      flags.checkpoint = false;
    } else if (a == "--rank") {
      flags.rank = number();
    } else if (a == "--size") {
      flags.size = number();
    } else if (a == "--store") {
      flags.store = value();
    } else {
      std::fprintf(stderr, "bench_device: unknown flag %s (see the top of the source)\n",
                   a.c_str());
      return 64;
    }
  }
  if (flags.state_mib < 1 || flags.reps < 1 || flags.rank_timeout_s < 1 || flags.ckpt_mib < 64 ||
      flags.ckpt_mib % 64 != 0) {
    std::fprintf(stderr,
                 "bench_device: --state-mib, --reps and --rank-timeout-s must be >= 1, "
                 "--ckpt-mib a multiple of 64\n");
    return 64;
  }
  if (flags.rank >= 0) {
    if (flags.size != kWorkers || flags.rank >= kWorkers || flags.store.empty()) {
      std::fprintf(stderr, "bench_device: rank mode needs --rank 0|1 --size 2 --store DIR\n");
      return 64;
    }
    return RankMain(flags);
  }

  if (CudaDeviceCount() < 1) {
    std::printf("%s\n", Line(nullptr, nullptr, kNoDevice, Json::array()).dump().c_str());
    return 0;
  }
  Json reshard = nullptr, ckpt = nullptr, errors = Json::array();
  if (flags.reshard) {
    StatusOr<Json> r = RunReshard(flags);
    if (r.ok()) {
      reshard = std::move(r).value();
      for (const Json& c : reshard["changes"]) {
        std::printf(
            "reshard %-14s -> %-14s moved %7.1f MiB  ours %.4f s  raw NCCL %.4f s  "
            "(%.2fx; %.2f vs %.2f GB/s)\n",
            c["from"].get<std::string>().c_str(), c["to"].get<std::string>().c_str(),
            c["bytes_moved"].get<double>() / 1048576.0, c["ours_s"].get<double>(),
            c["raw_s"].get<double>(), c["time_vs_raw"].get<double>(), c["ours_gbps"].get<double>(),
            c["raw_gbps"].get<double>());
      }
    } else {
      errors.push_back("reshard: " + r.status().ToString());
    }
    std::fflush(stdout);
  }
  if (flags.checkpoint) {
    StatusOr<Json> c = RunCheckpoint(flags);
    if (c.ok()) {
      ckpt = std::move(c).value();
      std::printf(
          "checkpoint %llu MiB: save %.2f GB/s, dd %.2f GB/s (%.2fx); stall %.1f ms, "
          "memcpy D2H %.1f ms (%.2fx)\n",
          static_cast<unsigned long long>(ckpt["bytes"].get<uint64_t>() >> 20),
          ckpt["save_gbps"].get<double>(), ckpt["dd_zero_write_gbps"].get<double>(),
          ckpt["save_vs_dd"].get<double>(), ckpt["stall_ms"].get<double>(),
          ckpt["memcpy_d2h_ms"].get<double>(), ckpt["stall_vs_memcpy_d2h"].get<double>());
    } else {
      errors.push_back("checkpoint: " + c.status().ToString());
    }
  }
  std::printf("%s\n", Line(reshard, ckpt, nullptr, errors).dump().c_str());
  return errors.empty() ? 0 : 1;
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) { return elastra::Main(argc, argv); }
