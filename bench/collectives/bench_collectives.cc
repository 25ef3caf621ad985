// bench_collectives: allreduce bus bandwidth of our communicators against the raw library calls on
// the same buffers in the same run.
//   NCCL: ranks as processes (this binary re-executed with --nccl-rank, one process per rank, so
//         that ranks can share one GPU; see tests/gpu/rank_process.h), device buffers, our
//         NcclCommunicator::Allreduce vs ncclAllReduce + cudaStreamSynchronize on a blocking raw
//         communicator. Skipped (null) without a GPU or without NCCL in the build.
//   Gloo: ranks as threads over TCP on loopback, host buffers, our Gloo communicator vs
//         gloo::allreduce with the same (default, ring) algorithm and reduce function.
// busbw = algbw * 2(n-1)/n, as nccl-tests. Each variant runs in alternating rounds and keeps its
// best round (shared machines are noisy). The last line is one JSON object:
//   {"bench":"collectives", "nccl":{...}|null, "gloo":{...}, "nccl_vs_raw":x|null,
//    "gloo_vs_raw":y}
// with x and y the geometric mean over sizes of ours/raw busbw (1.0 = no overhead).
//
// Flags: --nccl-ranks N (2) --gloo-ranks N (4) --nccl-max-mib M (256) --gloo-max-mib M (64)
//        --quick (smaller sizes and fewer iterations) --no-nccl --no-gloo
#include <unistd.h>

#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <nlohmann/json.hpp>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"
#include "elastra/config.h"

#if ELASTRA_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include "collectives/nccl/nccl_communicator.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/rank_process.h"
#endif

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

struct Flags {
  int nccl_ranks = 2;
  int gloo_ranks = 4;
  int nccl_max_mib = 256;
  int gloo_max_mib = 64;
  bool quick = false;
  bool nccl = true;
  bool gloo = true;
  // Child mode.
  int nccl_rank = -1;
  std::string dir;
};

std::vector<size_t> SizesMib(int max_mib, bool quick) {
  std::vector<size_t> sizes;
  for (size_t m = 1; m <= static_cast<size_t>(max_mib); m *= 4) sizes.push_back(m);
  if (quick && sizes.size() > 2) sizes.resize(2);
  return sizes;
}

int ItersFor(size_t mib, bool quick) {
  int iters = mib <= 1 ? 20 : mib <= 4 ? 10 : mib <= 16 ? 5 : mib <= 64 ? 3 : 2;
  return quick ? std::max(1, iters / 4) : iters;
}

double BusBwGBps(size_t bytes, double seconds_per_iter, int n) {
  if (seconds_per_iter <= 0) return 0;
  return bytes / seconds_per_iter / 1e9 * 2.0 * (n - 1) / n;
}

double GeoMeanRatio(const std::vector<double>& ours, const std::vector<double>& raw) {
  double log_sum = 0;
  int n = 0;
  for (size_t i = 0; i < ours.size() && i < raw.size(); ++i) {
    if (ours[i] > 0 && raw[i] > 0) {
      log_sum += std::log(ours[i] / raw[i]);
      ++n;
    }
  }
  return n > 0 ? std::exp(log_sum / n) : 0;
}

// --- Gloo -----------------------------------------------------------------------------------------

Json RunGloo(const Flags& flags) {
  const int n = flags.gloo_ranks;
  const auto sizes = SizesMib(flags.gloo_max_mib, flags.quick);
  const int kRounds = 2;
  InMemoryKeyValueStore ours_store;
  auto raw_store = std::make_shared<gloo::rendezvous::HashStore>();
  std::barrier sync(n);
  // [size][variant] best seconds per iteration, written by rank 0.
  std::vector<double> ours_s(sizes.size(), 1e30), raw_s(sizes.size(), 1e30);
  std::vector<std::string> errors(n);

  auto rank_main = [&](int rank) {
    GlooOptions o;
    o.store = &ours_store;
    o.prefix = "bench/gloo/";
    o.rank = rank;
    o.size = n;
    o.timeout = std::chrono::milliseconds(60000);
    auto ours = CreateGlooCommunicator(o);
    std::shared_ptr<gloo::rendezvous::Context> raw;
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      raw = std::make_shared<gloo::rendezvous::Context>(rank, n);
      gloo::rendezvous::PrefixStore prefixed("bench/raw/", *raw_store);
      raw->connectFullMesh(prefixed, device);
      raw->setTimeout(std::chrono::milliseconds(60000));
    } catch (const std::exception& e) {
      errors[rank] = std::string("raw gloo context: ") + e.what();
    }
    if (!ours.ok()) errors[rank] = "our gloo communicator: " + ours.status().ToString();
    sync.arrive_and_wait();
    for (const auto& e : errors) {
      if (!e.empty()) return;  // every rank sees the same errors after the barrier
    }
    std::vector<float> buf((sizes.back() << 20) / sizeof(float));
    for (size_t si = 0; si < sizes.size(); ++si) {
      const size_t count = (sizes[si] << 20) / sizeof(float);
      const int iters = ItersFor(sizes[si], flags.quick);
      std::fill(buf.begin(), buf.begin() + count, 1.0f);
      auto run_ours = [&] {
        Status s = (*ours)->Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
        if (!s.ok()) errors[rank] = s.ToString();
      };
      auto run_raw = [&] {
        gloo::AllreduceOptions opts(raw);
        opts.setOutput(buf.data(), count);
        opts.setReduceFunction(
            static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
        gloo::allreduce(opts);
      };
      run_ours();  // warm-up
      run_raw();
      for (int round = 0; round < kRounds; ++round) {
        for (int variant = 0; variant < 2; ++variant) {
          sync.arrive_and_wait();
          auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) variant == 0 ? run_ours() : run_raw();
          const double per = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
          if (rank == 0) {
            auto& best = variant == 0 ? ours_s[si] : raw_s[si];
            best = std::min(best, per);
          }
        }
      }
      // Values stay finite (the sum grows by n each call): check the reduction really happened.
      if (buf[0] < 2.0f) errors[rank] = "allreduce did not change the buffer";
    }
  };
  std::vector<std::thread> threads;
  try {
    for (int r = 0; r < n; ++r) threads.emplace_back(rank_main, r);
    for (auto& t : threads) t.join();
  } catch (const std::exception& e) {
    return Json{{"error", e.what()}};
  }
  for (const auto& e : errors) {
    if (!e.empty()) return Json{{"error", e}};
  }
  Json out{{"ranks", n}, {"transport", "tcp loopback, ranks as threads"}, {"algorithm", "ring"}};
  std::vector<double> ours_bw, raw_bw;
  for (size_t si = 0; si < sizes.size(); ++si) {
    ours_bw.push_back(BusBwGBps(sizes[si] << 20, ours_s[si], n));
    raw_bw.push_back(BusBwGBps(sizes[si] << 20, raw_s[si], n));
    std::printf("gloo  %4zu MiB  ours %8.3f GB/s  raw %8.3f GB/s  (busbw, %d ranks)\n", sizes[si],
                ours_bw.back(), raw_bw.back(), n);
  }
  out["sizes_mib"] = sizes;
  out["ours_busbw_gbps"] = ours_bw;
  out["raw_busbw_gbps"] = raw_bw;
  out["ratio"] = GeoMeanRatio(ours_bw, raw_bw);
  return out;
}

// --- NCCL -----------------------------------------------------------------------------------------

#if ELASTRA_HAVE_NCCL

constexpr int kNoGpuExit = 77;

#define BENCH_CHECK(cond, msg)                                           \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "bench nccl rank %d: %s\n", rank, (msg));     \
      return 1;                                                          \
    }                                                                    \
  } while (0)

// One rank. Rank 0 writes the figures to the store under "nccl_result".
int NcclRankMain(const Flags& flags) {
  const int rank = flags.nccl_rank;
  const int n = flags.nccl_ranks;
  if (!NcclDeviceAvailable()) return kNoGpuExit;
  testing::FileKeyValueStore store(flags.dir);
  NcclOptions o{&store, "bench/ours/", rank, n, 0, std::chrono::milliseconds(120000),
                std::chrono::milliseconds(120000)};
  auto ours = CreateNcclCommunicator(o);
  BENCH_CHECK(ours.ok(), ours.status().ToString().c_str());

  ncclUniqueId id;
  if (rank == 0) {
    BENCH_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    BENCH_CHECK(store.Set("bench/raw_id", std::string(id.internal, sizeof(id.internal))).ok(),
                "store set");
  } else {
    auto got = store.Get("bench/raw_id", std::chrono::milliseconds(120000));
    BENCH_CHECK(got.ok() && got->size() == sizeof(id.internal), "raw id");
    std::memcpy(id.internal, got->data(), sizeof(id.internal));
  }
  ncclComm_t raw = nullptr;
  BENCH_CHECK(ncclCommInitRank(&raw, n, id, rank) == ncclSuccess, "ncclCommInitRank");
  cudaStream_t raw_stream = nullptr;
  BENCH_CHECK(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking) == cudaSuccess,
              "cudaStreamCreate");

  const auto sizes = SizesMib(flags.nccl_max_mib, flags.quick);
  float* buf = nullptr;
  BENCH_CHECK(cudaMalloc(&buf, sizes.back() << 20) == cudaSuccess, "cudaMalloc");
  BENCH_CHECK(cudaMemset(buf, 0, sizes.back() << 20) == cudaSuccess, "cudaMemset");
  const int kRounds = 2;
  std::vector<double> ours_s(sizes.size(), 1e30), raw_s(sizes.size(), 1e30);
  for (size_t si = 0; si < sizes.size(); ++si) {
    const size_t count = (sizes[si] << 20) / sizeof(float);
    const int iters = ItersFor(sizes[si], flags.quick);
    auto run_ours = [&]() -> bool {
      return (*ours)->Allreduce(buf, count, DataType::kFloat32, ReduceOp::kSum).ok();
    };
    auto run_raw = [&]() -> bool {
      return ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, raw, raw_stream) == ncclSuccess &&
             cudaStreamSynchronize(raw_stream) == cudaSuccess;
    };
    BENCH_CHECK(run_ours() && run_raw(), "warm-up allreduce failed");
    for (int round = 0; round < kRounds; ++round) {
      for (int variant = 0; variant < 2; ++variant) {
        // Both ranks start each timed block together (our allreduce doubles as the barrier).
        BENCH_CHECK((*ours)->Barrier().ok(), "barrier");
        auto t0 = Clock::now();
        for (int i = 0; i < iters; ++i) {
          BENCH_CHECK(variant == 0 ? run_ours() : run_raw(), "allreduce failed");
        }
        const double per = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
        auto& best = variant == 0 ? ours_s[si] : raw_s[si];
        best = std::min(best, per);
      }
    }
  }
  cudaFree(buf);
  ncclCommDestroy(raw);
  cudaStreamDestroy(raw_stream);
  if (rank == 0) {
    Json out{{"ranks", n},
             {"transport", "one process per rank, NCCL_HOSTID per rank, sockets over loopback"}};
    std::vector<double> ours_bw, raw_bw;
    for (size_t si = 0; si < sizes.size(); ++si) {
      ours_bw.push_back(BusBwGBps(sizes[si] << 20, ours_s[si], n));
      raw_bw.push_back(BusBwGBps(sizes[si] << 20, raw_s[si], n));
    }
    out["sizes_mib"] = sizes;
    out["ours_busbw_gbps"] = ours_bw;
    out["raw_busbw_gbps"] = raw_bw;
    out["ratio"] = GeoMeanRatio(ours_bw, raw_bw);
    BENCH_CHECK(store.Set("nccl_result", out.dump()).ok(), "store set");
  }
  return 0;
}

Json RunNccl(const Flags& flags) {
  if (!NcclDeviceAvailable()) return Json{{"skipped", "no CUDA device"}};
  const std::string dir = testing::MakeTempDir("elastra_bench");
  if (dir.empty()) return Json{{"error", "mkdtemp failed"}};
  std::vector<pid_t> pids;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  for (int r = 0; r < flags.nccl_ranks; ++r) {
    std::vector<std::string> args = {"--nccl-rank", std::to_string(r), "--nccl-ranks",
                                     std::to_string(flags.nccl_ranks), "--dir", dir,
                                     "--nccl-max-mib", std::to_string(flags.nccl_max_mib)};
    if (flags.quick) args.push_back("--quick");
    pids.push_back(testing::SpawnRank(self, args, r));
  }
  auto codes = testing::WaitRanks(pids, Clock::now() + std::chrono::seconds(120));
  Json result;
  testing::FileKeyValueStore store(dir);
  auto got = store.Get("nccl_result", std::chrono::milliseconds(0));
  bool all_ok = true;
  for (int c : codes) all_ok = all_ok && c == 0;
  if (all_ok && got.ok()) {
    result = Json::parse(*got);
    for (size_t si = 0; si < result["sizes_mib"].size(); ++si) {
      std::printf("nccl  %4d MiB  ours %8.3f GB/s  raw %8.3f GB/s  (busbw, %d ranks)\n",
                  result["sizes_mib"][si].get<int>(),
                  result["ours_busbw_gbps"][si].get<double>(),
                  result["raw_busbw_gbps"][si].get<double>(), flags.nccl_ranks);
    }
  } else if (!codes.empty() && codes[0] == kNoGpuExit) {
    result = Json{{"skipped", "no CUDA device in the rank processes"}};
  } else {
    result = Json{{"error", "rank exit codes"}, {"codes", codes}};
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return result;
}

#endif  // ELASTRA_HAVE_NCCL

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--nccl-ranks") flags.nccl_ranks = std::atoi(next().c_str());
    else if (a == "--gloo-ranks") flags.gloo_ranks = std::atoi(next().c_str());
    else if (a == "--nccl-max-mib") flags.nccl_max_mib = std::atoi(next().c_str());
    else if (a == "--gloo-max-mib") flags.gloo_max_mib = std::atoi(next().c_str());
    else if (a == "--quick") flags.quick = true;
    else if (a == "--no-nccl") flags.nccl = false;
    else if (a == "--no-gloo") flags.gloo = false;
    else if (a == "--nccl-rank") flags.nccl_rank = std::atoi(next().c_str());
    else if (a == "--dir") flags.dir = next();
    else {
      std::fprintf(stderr, "unknown flag %s (see the comment at the top of the source)\n",
                   a.c_str());
      return 64;
    }
  }
  if (flags.nccl_ranks < 2 || flags.gloo_ranks < 2 || flags.nccl_max_mib < 1 ||
      flags.gloo_max_mib < 1) {
    std::fprintf(stderr, "ranks must be >= 2 and sizes >= 1 MiB\n");
    return 64;
  }
#if ELASTRA_HAVE_NCCL
  if (flags.nccl_rank >= 0) return NcclRankMain(flags);
#endif

  Json nccl = nullptr, gloo = nullptr;
  if (flags.gloo) gloo = RunGloo(flags);
#if ELASTRA_HAVE_NCCL
  if (flags.nccl) nccl = RunNccl(flags);
#else
  if (flags.nccl) nccl = Json{{"skipped", "built without NCCL"}};
#endif
  auto ratio = [](const Json& j) -> Json {
    if (j.is_object() && j.contains("ratio")) return j["ratio"];
    return nullptr;
  };
  Json line{{"bench", "collectives"}, {"nccl", nccl}, {"gloo", gloo},
            {"nccl_vs_raw", ratio(nccl)}, {"gloo_vs_raw", ratio(gloo)}};
  std::printf("%s\n", line.dump().c_str());
  const bool failed = (gloo.is_object() && gloo.contains("error")) ||
                      (nccl.is_object() && nccl.contains("error"));
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) { return elastra::Main(argc, argv); }
