// bench_device's checkpoint case: a device-resident TensorCollection saved through a pinned
// staging image against dd, and its stall against a plain cudaMemcpy D2H (see bench_device.cc).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "bench/device/bench_device.h"
#include "common/env.h"
#include "checkpoint/writer.h"
#include "elastra/device_buffer.h"
#include "elastra/tensor_collection.h"
#include "worker/collection_adapter.h"

namespace elastra::bench_device {
namespace {

namespace ck = checkpoint;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
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

  const std::string root = elastra::JoinPath(work, "ckpt");
  const std::string dd_file = elastra::JoinPath(work, "dd.bin");
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

}  // namespace

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

}  // namespace elastra::bench_device
