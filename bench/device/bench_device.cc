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
#include "bench/device/bench_device.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "elastra/device_buffer.h"

namespace elastra::bench_device {
namespace {

constexpr char kNoDevice[] = "no CUDA device";

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
}  // namespace elastra::bench_device

int main(int argc, char** argv) { return elastra::bench_device::Main(argc, argv); }
