// bench_reshard: live resharding of a small Megatron-style GPT's state (parameters and Adam
// state, ZeRO-1) through layout changes that move every dimension, ranks as threads over Gloo on
// loopback, each with a gloo device (an I/O thread) of its own, as separate processes have.
//
// For each change: the planner assigns workers to the new layout (fewest bytes moved), the reshard
// planner builds the transfers, and then, in the same run,
//   ours: ExecuteReshard on every rank, in its four schedules: batched (the default, as a worker
//         runs it: every transfer of a group at once in one ExchangeV(), straight from the old
//         shards' rows and into the new ones'), staged (the same through the staging arena:
//         strided rectangles packed, one Exchange() of contiguous buffers, unpacked; the batched
//         schedule of every backend without ExchangeV), concurrent (a thread per peer and
//         direction) and serial (pairwise rounds on one thread). Includes allocating the new
//         shards, the local copies and freeing the old shards;
//   raw:  a raw gloo context sends the same bytes per (sender, receiver) pair as one unbound
//         buffer each, every send and receive posted at once, then waited on.
// Each is timed from a barrier before to a barrier after, best of --reps. The first repetition
// of ours is checked bit for bit against the global tensors.
//
// Flags: --hidden N (default 256) --layers N (8) --reps N (3) --quick (hidden 128, 2 reps)
//        --chunk-kib N, --direct-min-kib N, --group-mib N (executor options)
//        --no-huge-pages, --no-reuse-memory, --no-keep-arena, --no-vectored (batched = staged),
//        --tcp-streams (ExchangeV over TCP, as between hosts, not Unix sockets),
//        --change K (only the K-th change, from 1; for profiling),
//        --batched-only (only the staged and batched schedules)
// BENCH_RESHARD_VERBOSE=1 prints rank 0's phases of every repetition, =all every rank's.
// Profiling: with BENCH_RESHARD_PERF_CTL=<fifo> (perf record -D -1 --control fifo:<fifo>) and
// BENCH_RESHARD_PERF_WHAT=batched|staged|raw, perf samples only inside that timed region.
// Last line: {"bench":"reshard", "changes":[...], "moved_vs_lower_bound":x, "time_vs_raw":y,
// "staged_time_vs_raw":s, "concurrent_time_vs_raw":c, "serial_time_vs_raw":z,
// "transfer_phase_vs_raw":t} with x = sum bytes moved / sum lower bounds, y = sum of our batched
// (default) times / sum of raw times, s, c and z the same for the staged, concurrent and serial
// schedules, t the batched transfer phase alone (slowest rank's sends and receives, without
// allocating the new shards, local copies and freeing) over raw, and "cpu_vs_raw" (and
// "staged_cpu_vs_raw") the CPU time of the whole process (every rank and its gloo threads) in our
// batched (staged) timed region over raw's, summed over the changes (least of the repetitions):
// on a loaded machine less noisy than the wall times.
#include <sys/resource.h>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <nlohmann/json.hpp>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"
#include "planner/model_description.h"
#include "planner/planner.h"
#include "elastra/sharding.h"
#include "tests/collectives/gloo_thread_ranks.h"
#include "tests/reshard/global_shards.h"
#include "state/reshard_executor.h"
#include "state/plan/reshard_plan.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

using testing::ShardsOf;

// ExchangeV between the ranks (all on this host) through Unix sockets, as a worker's; false
// (--tcp-streams): over TCP, as between hosts.
bool g_local_streams = true;

// Our communicators for n thread-ranks (retried when socket discovery misses a socket).
std::vector<std::unique_ptr<Communicator>> ConnectAll(KeyValueStore* store,
                                                      const std::string& prefix, int n) {
  auto comms = testing::ConnectThreadRanks(store, prefix, n, std::chrono::milliseconds(120000),
                                           std::chrono::milliseconds(30000),
                                           /*own_devices=*/true, g_local_streams);
  if (comms.empty()) {
    std::fprintf(stderr, "bench_reshard: cannot connect %d ranks\n", n);
    std::exit(1);
  }
  return comms;
}

struct ChangeResult {
  Json json;
  int64_t moved = 0, lower_bound = 0;
  double ours_s = 0, staged_s = 0, concurrent_s = 0, serial_s = 0, raw_s = 0, transfer_s = 0;
  // CPU time of the whole process (every rank), batched (ExchangeV) and staged
  double ours_cpu_s = 0, staged_cpu_s = 0, raw_cpu_s = 0;
};

ReshardExecutorOptions g_options;
bool g_batched_only = false;
// Each rank's staging arena, kept across the changes as a worker keeps its own for its life
// (worker/generation_builder.h); --no-keep-arena: each reshard allocates its own.
bool g_keep_arena = true;
std::vector<std::unique_ptr<ReshardArena>> g_arenas;

// perf's control fifo (perf record --control fifo:PATH), when profiling one timed region.
class PerfControl {
 public:
  PerfControl() {
    const char* path = getenv("BENCH_RESHARD_PERF_CTL");
    const char* what = getenv("BENCH_RESHARD_PERF_WHAT");
    if (path != nullptr) file_ = std::fopen(path, "w");
    if (what != nullptr) what_ = what;
  }
  // Enables (disables) sampling when `region` is the one asked for.
  void Enable(const char* region, bool on) {
    if (file_ == nullptr || what_ != region) return;
    std::fputs(on ? "enable\n" : "disable\n", file_);
    std::fflush(file_);
  }

 private:
  std::FILE* file_ = nullptr;
  std::string what_;
};
PerfControl* g_perf = nullptr;

// CPU time of the whole process (every rank's thread), user and system.
double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Page faults of the whole process so far: on the test VM each costs about 10 us, so a change
// that faults in fresh memory shows here.
long PageFaults() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt + u.ru_majflt;
}

// The schedules, in the order each repetition runs them: pairwise rounds, a thread per peer, the
// batched exchange through the staging arena, and the batched exchange as the worker runs it
// (ExchangeV: straight from and into the shards' rows; the figure time_vs_raw is about).
constexpr const char* kModeNames[] = {"serial", "concurrent", "staged", "batched"};
constexpr int kModes = 4;
constexpr int kStaged = 2;
constexpr int kBatched = 3;

// The plan of one change: the planner's assignment of workers to `to` (fewest bytes moved), then
// the reshard plan's transfers. Exits on an error.
ReshardPlan PlanChange(const ModelDescription& model, const StateSpec& state, const Layout& from,
                       const Layout& to, const std::vector<int>& hosts) {
  std::vector<int> identity(from.world());
  std::iota(identity.begin(), identity.end(), 0);
  PlannerOptions po;
  po.kept_bytes = [&](int fr, const Layout& tl, int tr) {
    const Coordinates c = CoordinatesOf(from, fr);
    return KeptBytes(state, from, &c, tl, CoordinatesOf(tl, tr));
  };
  auto assign = AssignRanks(model, to, hosts, CurrentPlacement{from, identity}, po);
  if (!assign.ok()) {
    std::fprintf(stderr, "bench_reshard: %s\n", assign.status().ToString().c_str());
    std::exit(1);
  }
  auto plan = BuildReshardPlan(state, Placement{from, identity}, Placement{to, *assign}, hosts);
  if (!plan.ok()) {
    std::fprintf(stderr, "bench_reshard: %s\n", plan.status().ToString().c_str());
    std::exit(1);
  }
  return std::move(*plan);
}

// Raw gloo contexts for n thread-ranks, each with a device of its own, connected in a full mesh.
std::vector<std::shared_ptr<gloo::rendezvous::Context>> ConnectRaw(int n, int index) {
  auto raw_store = std::make_shared<gloo::rendezvous::HashStore>();
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> raw(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      raw[w] = std::make_shared<gloo::rendezvous::Context>(w, n);
      gloo::rendezvous::PrefixStore prefixed("raw" + std::to_string(index), *raw_store);
      raw[w]->connectFullMesh(prefixed, device);
      raw[w]->setTimeout(std::chrono::milliseconds(120000));
    });
  }
  for (auto& t : threads) t.join();
  return raw;
}

// What the rank threads of one change share: the plan, the connections, and the best times.
struct ChangeRun {
  ChangeRun(const StateSpec& spec, ReshardPlan change_plan, int workers, int repetitions)
      : state(spec), plan(std::move(change_plan)), n(workers), reps(repetitions), sync(workers),
        rank_transfer(workers, 0), errors(workers) {}

  const StateSpec& state;
  const ReshardPlan plan;
  const int n;
  const int reps;
  std::map<std::pair<int, int>, int64_t> pair_bytes;  // bytes per (src, dst) pair, for raw
  std::vector<ShardMap> initial;                        // each worker's shards before
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::shared_ptr<gloo::rendezvous::Context>> raw;
  std::barrier<> sync;
  double best_ours[kModes] = {1e30, 1e30, 1e30, 1e30}, best_raw = 1e30;
  // CPU seconds of the whole process (all ranks and their gloo threads) in the timed region,
  // least over the repetitions: less noisy than wall time on a loaded machine.
  double best_cpu[kModes] = {1e30, 1e30, 1e30, 1e30}, best_cpu_raw = 1e30;
  // The transfer phase alone (sends, receives, packing; without allocating the new shards,
  // the local copies and freeing the old shards): the slowest rank's, best repetition.
  double best_transfer[kModes] = {1e30, 1e30, 1e30, 1e30};
  std::vector<double> rank_transfer;
  std::vector<std::string> errors;
};

// A rank's raw buffers: one per pair, sized like the plan's traffic.
struct RawBuffers {
  std::vector<std::vector<uint8_t>> send_bufs, recv_bufs;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> sends, recvs;
  std::vector<int> send_peer, recv_peer;
};

void MakeRawBuffers(ChangeRun& run, int w, RawBuffers* b) {
  for (const auto& [pair, bytes] : run.pair_bytes) {
    if (pair.first == w) {
      b->send_bufs.emplace_back(bytes, 1);
      b->sends.push_back(run.raw[w]->createUnboundBuffer(b->send_bufs.back().data(), bytes));
      b->send_peer.push_back(pair.second);
    }
    if (pair.second == w) {
      b->recv_bufs.emplace_back(bytes, 0);
      b->recvs.push_back(run.raw[w]->createUnboundBuffer(b->recv_bufs.back().data(), bytes));
      b->recv_peer.push_back(pair.first);
    }
  }
}

// BENCH_RESHARD_VERBOSE: one rank's phases of one repetition of one schedule.
void PrintRankPhases(int w, int rep, int mode, double cpu_ours, long faults, double ours,
                     const ReshardExecutorStats& st) {
  const char* verbose = getenv("BENCH_RESHARD_VERBOSE");
  if (verbose != nullptr && (w == 0 || std::strcmp(verbose, "all") == 0)) {
    std::printf(
        "  rank%d rep %d %s: cpu %.4f faults %ld total %.4f plan %.4f alloc %.4f local "
        "%.4f transfer %.4f (sent %lld, received %lld, staged %lld bytes, %lld messages; new "
        "shards: %lld bytes allocated, %lld reused, %lld in place)\n",
        w, rep, kModeNames[mode], cpu_ours, faults, ours, st.seconds_plan, st.seconds_allocate,
        st.seconds_local, st.seconds_transfer, static_cast<long long>(st.bytes_sent),
        static_cast<long long>(st.bytes_received), static_cast<long long>(st.bytes_staged),
        static_cast<long long>(st.messages_sent),
        static_cast<long long>(st.bytes_allocated), static_cast<long long>(st.bytes_reused),
        static_cast<long long>(st.bytes_in_place));
  }
}

// Rank w's ExecuteReshard in schedule `mode`, timed from a barrier before to a barrier after.
void RunOurs(ChangeRun& run, int w, int rep, int mode) {
  ReshardExecutorOptions options = g_options;
  options.concurrent_peers = mode == 1;
  options.batched = mode >= kStaged;
  if (mode == kStaged) options.vectored = false;
  if (g_keep_arena) options.arena = g_arenas[w].get();
  ShardMap shards = run.initial[w];
  run.sync.arrive_and_wait();
  const auto t0 = Clock::now();
  const double c0 = CpuSeconds();
  const long f0 = PageFaults();
  if (w == 0) g_perf->Enable(kModeNames[mode], true);
  run.sync.arrive_and_wait();
  ReshardExecutorStats st;
  Status s = ExecuteReshard(run.plan, *run.comms[w], &shards, options, &st);
  run.sync.arrive_and_wait();
  if (w == 0) g_perf->Enable(kModeNames[mode], false);
  const double ours = std::chrono::duration<double>(Clock::now() - t0).count();
  const double cpu_ours = CpuSeconds() - c0;
  const long faults = PageFaults() - f0;
  if (!s.ok()) run.errors[w] = s.ToString();
  if (rep == 0 && ShardsOf(run.state, run.plan.to, w) != shards) {
    run.errors[w] = "worker " + std::to_string(w) + ": shards differ from the global slices";
  }
  PrintRankPhases(w, rep, mode, cpu_ours, faults, ours, st);
  if (w == 0) run.best_ours[mode] = std::min(run.best_ours[mode], ours);
  if (w == 0) run.best_cpu[mode] = std::min(run.best_cpu[mode], cpu_ours);
  run.rank_transfer[w] = st.seconds_transfer;
  run.sync.arrive_and_wait();
  if (w == 0) {
    double slowest = 0;
    for (double x : run.rank_transfer) slowest = std::max(slowest, x);
    run.best_transfer[mode] = std::min(run.best_transfer[mode], slowest);
  }
}

// Rank w's raw sends and receives of the same bytes, every one posted at once, then waited on.
void RunRaw(ChangeRun& run, int w, int rep, RawBuffers& b) {
  run.sync.arrive_and_wait();
  const auto t1 = Clock::now();
  const double c1 = CpuSeconds();
  if (w == 0) g_perf->Enable("raw", true);
  run.sync.arrive_and_wait();
  try {
    for (size_t i = 0; i < b.recvs.size(); ++i) b.recvs[i]->recv(b.recv_peer[i], 7);
    for (size_t i = 0; i < b.sends.size(); ++i) b.sends[i]->send(b.send_peer[i], 7);
    for (auto& s : b.sends) s->waitSend();
    for (auto& r : b.recvs) r->waitRecv();
  } catch (const std::exception& e) {
    run.errors[w] = std::string("raw gloo: ") + e.what();
  }
  run.sync.arrive_and_wait();
  const double rawt = std::chrono::duration<double>(Clock::now() - t1).count();
  const double cpu_raw = CpuSeconds() - c1;
  if (w == 0) g_perf->Enable("raw", false);
  if (w == 0 && getenv("BENCH_RESHARD_VERBOSE")) {
    std::printf("  rank0 rep %d raw: cpu %.4f total %.4f\n", rep, cpu_raw, rawt);
  }
  if (w == 0) run.best_raw = std::min(run.best_raw, rawt);
  if (w == 0) run.best_cpu_raw = std::min(run.best_cpu_raw, cpu_raw);
}

// Rank w's thread: every repetition, each schedule of ours and then raw.
void RankLoop(ChangeRun& run, int w) {
  RawBuffers bufs;
  MakeRawBuffers(run, w, &bufs);
  for (int rep = 0; rep < run.reps; ++rep) {
    for (int mode = g_batched_only ? kStaged : 0; mode < kModes; ++mode) RunOurs(run, w, rep, mode);
    RunRaw(run, w, rep, bufs);
  }
}

// The change's figures, its JSON and its table line.
ChangeResult Report(ChangeRun& run, const Layout& from, const Layout& to, bool verified) {
  const ReshardPlan& plan = run.plan;
  const int n = run.n;
  auto& best_ours = run.best_ours;
  const auto& best_cpu = run.best_cpu;
  auto& best_transfer = run.best_transfer;
  const double best_raw = run.best_raw, best_cpu_raw = run.best_cpu_raw;
  // --batched-only ran neither the serial nor the concurrent schedule.
  if (g_batched_only) best_ours[0] = best_ours[1] = best_transfer[0] = best_transfer[1] = 0;
  ChangeResult out;
  out.moved = plan.bytes_moved;
  out.lower_bound = plan.bytes_lower_bound;
  out.ours_s = best_ours[kBatched];
  out.staged_s = best_ours[kStaged];
  out.concurrent_s = best_ours[1];
  out.serial_s = best_ours[0];
  out.raw_s = best_raw;
  out.transfer_s = best_transfer[kBatched];
  out.ours_cpu_s = best_cpu[kBatched];
  out.staged_cpu_s = best_cpu[kStaged];
  out.raw_cpu_s = best_cpu_raw;
  out.json = {{"from", from.ToString()}, {"to", to.ToString()}, {"workers", n},
              {"bytes_moved", plan.bytes_moved}, {"bytes_lower_bound", plan.bytes_lower_bound},
              {"bytes_local", plan.bytes_local}, {"transfers", plan.num_transfers()},
              {"max_sent", plan.max_sent}, {"max_received", plan.max_received},
              {"ours_batched_s", best_ours[kBatched]}, {"ours_staged_s", best_ours[kStaged]},
              {"ours_concurrent_s", best_ours[1]}, {"ours_serial_s", best_ours[0]},
              {"raw_s", best_raw},
              {"time_vs_raw", best_raw > 0 ? best_ours[kBatched] / best_raw : 0.0},
              {"staged_time_vs_raw", best_raw > 0 ? best_ours[kStaged] / best_raw : 0.0},
              {"concurrent_time_vs_raw", best_raw > 0 ? best_ours[1] / best_raw : 0.0},
              {"serial_time_vs_raw", best_raw > 0 ? best_ours[0] / best_raw : 0.0},
              {"transfer_phase_batched_s", best_transfer[kBatched]},
              {"transfer_phase_staged_s", best_transfer[kStaged]},
              {"transfer_phase_concurrent_s", best_transfer[1]},
              {"transfer_phase_serial_s", best_transfer[0]},
              {"ours_batched_cpu_s", best_cpu[kBatched]}, {"ours_staged_cpu_s", best_cpu[kStaged]},
              {"raw_cpu_s", best_cpu_raw}, {"verified", verified}};
  std::printf("%-16s -> %-16s %d workers  moved %7.1f MiB = lower bound %7.1f MiB  batched %.3f s"
              "  staged %.3f s  concurrent %.3f s  serial %.3f s  raw %.3f s  (%.2fx, %.2fx, "
              "%.2fx, %.2fx)\n",
              from.ToString().c_str(), to.ToString().c_str(), n, plan.bytes_moved / 1048576.0,
              plan.bytes_lower_bound / 1048576.0, best_ours[kBatched], best_ours[kStaged],
              best_ours[1], best_ours[0], best_raw, best_ours[kBatched] / best_raw,
              best_ours[kStaged] / best_raw, best_ours[1] / best_raw, best_ours[0] / best_raw);
  std::fflush(stdout);
  return out;
}

ChangeResult RunChange(const ModelDescription& model, const StateSpec& state, const Layout& from,
                       const Layout& to, int per_host, int reps, int index) {
  const int n = std::max(from.world(), to.world());
  std::vector<int> hosts(n);
  for (int w = 0; w < n; ++w) hosts[w] = w / per_host;
  ChangeRun run(state, PlanChange(model, state, from, to, hosts), n, reps);
  for (const Transfer& t : run.plan.transfers) run.pair_bytes[{t.src, t.dst}] += t.bytes;
  run.initial.resize(n);
  for (int w = 0; w < n; ++w) run.initial[w] = ShardsOf(state, run.plan.from, w);

  InMemoryKeyValueStore store;
  run.comms = ConnectAll(&store, "c" + std::to_string(index) + "/", n);
  run.raw = ConnectRaw(n, index);

  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) threads.emplace_back([&run, w] { RankLoop(run, w); });
  for (auto& t : threads) t.join();
  bool ok = true;
  for (const auto& e : run.errors) {
    if (!e.empty()) {
      std::fprintf(stderr, "bench_reshard: %s -> %s: %s\n", from.ToString().c_str(),
                   to.ToString().c_str(), e.c_str());
      ok = false;
    }
  }
  if (!ok) std::exit(1);
  return Report(run, from, to, /*verified=*/ok);
}

int Main(int argc, char** argv) {
  int hidden = 256, layers = 8, reps = 3, only_change = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](int* v) {
      if (i + 1 >= argc || (*v = std::atoi(argv[++i])) < 1) {
        std::fprintf(stderr, "bench_reshard: %s needs a positive integer\n", a.c_str());
        std::exit(2);
      }
    };
    if (a == "--hidden") {
      next(&hidden);
    } else if (a == "--layers") {
      next(&layers);
    } else if (a == "--reps") {
      next(&reps);
    } else if (a == "--direct-min-kib") {
      int v = 0;
      next(&v);
      g_options.direct_min_bytes = static_cast<int64_t>(v) << 10;
    } else if (a == "--chunk-kib") {
      int v = 0;
      next(&v);
      g_options.chunk_bytes = static_cast<size_t>(v) << 10;
    } else if (a == "--group-mib") {
      int v = 0;
      next(&v);
      g_options.group_bytes = static_cast<int64_t>(v) << 20;
    } else if (a == "--no-huge-pages") {
      g_options.huge_pages = false;
    } else if (a == "--no-reuse-memory") {
      g_options.reuse_memory = false;
    } else if (a == "--no-keep-arena") {
      g_keep_arena = false;
    } else if (a == "--change") {
      next(&only_change);
    } else if (a == "--tcp-streams") {
      g_local_streams = false;
    } else if (a == "--no-vectored") {
      g_options.vectored = false;
    } else if (a == "--batched-only") {
      g_batched_only = true;
    } else if (a == "--quick") {
      hidden = 128;
      reps = 2;
    } else {
      std::fprintf(stderr, "usage: bench_reshard [--hidden N] [--layers N] [--reps N] [--quick]\n");
      return 2;
    }
  }
  PerfControl perf;
  g_perf = &perf;
  for (int w = 0; w < 64; ++w) g_arenas.push_back(std::make_unique<ReshardArena>());
  ModelDescription model;
  model.layers = layers;
  model.hidden = hidden;
  model.heads = 8;
  model.ffn_hidden = 4 * hidden;
  model.vocab = 8000;
  model.seq_len = 512;
  model.global_batch = 64;
  model.micro_batch = 1;
  model.dtype = "fp32";
  model.zero = 1;
  model.device_memory_gib = 80;
  GptConfig g;
  g.layers = layers;
  g.hidden = hidden;
  g.ffn_hidden = 4 * hidden;
  g.vocab = model.vocab;
  g.seq_len = model.seq_len;
  g.param_size = 4;
  g.adam = true;
  g.zero = true;
  const StateSpec state = GptState(g);
  std::printf("GPT: %d layers, hidden %d, state %.1f MiB (fp32 parameters + Adam, ZeRO-1), "
              "4 workers per host\n",
              layers, hidden, state.TotalBytes() / 1048576.0);
  const std::vector<std::pair<Layout, Layout>> changes = {
      {{2, 1, 2}, {1, 2, 2}}, {{1, 2, 2}, {4, 1, 1}}, {{4, 1, 1}, {1, 2, 4}},
      {{1, 2, 4}, {2, 2, 2}}, {{2, 2, 2}, {8, 1, 1}}, {{8, 1, 1}, {2, 1, 4}},
      {{2, 1, 4}, {1, 4, 1}}};
  Json list = Json::array();
  int64_t moved = 0, lb = 0;
  double ours = 0, staged = 0, concurrent = 0, serial = 0, rawt = 0, transfer = 0, ours_cpu = 0,
         staged_cpu = 0, raw_cpu = 0;
  for (size_t i = 0; i < changes.size(); ++i) {
    if (only_change > 0 && static_cast<int>(i) + 1 != only_change) continue;
    ChangeResult r = RunChange(model, state, changes[i].first, changes[i].second, 4, reps,
                               static_cast<int>(i));
    list.push_back(r.json);
    moved += r.moved;
    lb += r.lower_bound;
    ours += r.ours_s;
    staged += r.staged_s;
    staged_cpu += r.staged_cpu_s;
    concurrent += r.concurrent_s;
    serial += r.serial_s;
    transfer += r.transfer_s;
    rawt += r.raw_s;
    ours_cpu += r.ours_cpu_s;
    raw_cpu += r.raw_cpu_s;
  }
  Json out = {{"bench", "reshard"}, {"hidden", hidden}, {"layers", layers},
              {"streams", g_local_streams ? "unix" : "tcp"},
              {"state_bytes", state.TotalBytes()}, {"changes", list},
              {"moved_vs_lower_bound", lb > 0 ? static_cast<double>(moved) / lb : 1.0},
              {"staged_time_vs_raw", rawt > 0 ? staged / rawt : 0.0},
              {"staged_cpu_vs_raw", raw_cpu > 0 ? staged_cpu / raw_cpu : 0.0},
              {"concurrent_time_vs_raw", rawt > 0 ? concurrent / rawt : 0.0},
              {"serial_time_vs_raw", rawt > 0 ? serial / rawt : 0.0},
              {"transfer_phase_vs_raw", rawt > 0 ? transfer / rawt : 0.0},
              {"cpu_vs_raw", raw_cpu > 0 ? ours_cpu / raw_cpu : 0.0},
              {"time_vs_raw", rawt > 0 ? ours / rawt : 0.0}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace elastra

int main(int argc, char** argv) { return elastra::Main(argc, argv); }
