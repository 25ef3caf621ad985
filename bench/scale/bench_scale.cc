// bench_scale: the coordinator's control plane at thousands of workers (docs/scale.md).
//
// The real CoordinatorCore (with its real codec and journal) is driven by N simulated workers and
// N/8 agents in a discrete-event loop over its FakeClock; every frame it emits reaches its
// recipient after a modelled latency, and the simulated processes answer as the real ones do
// (sim_job.h). At each N it runs a join storm, the first generation, heartbeats at the default
// period, a planned grow and shrink by one host, 1% of the workers failing at once, a host lost
// with its agent, and a coordinator restart from its journal (scenario.h), and reports per event
// the coordinator's CPU time (DecodeEnvelope + Handle and Tick, each timed by the call clock:
// sim.h, CallClock), the bytes and messages it sends and receives, and the simulated time to the
// outcome. ZeroMQ and CURVE are not simulated: their CPU per message is measured apart
// (curve_probe.h) and reported beside, as is a heartbeat handled with nothing run between two
// (lone_heartbeats.h: heartbeat_alone_us, per size). Each size runs --repeat times (passes over
// all sizes), each event counting with its median run (MedianOf). A table, then one JSON line:
// max_workers, change_cpu_ms and change_bytes (the planned grow at max_workers),
// heartbeat_core_fraction (and _curve_, _zmq_), exponents (least-squares slope of log cost over
// log N per cost).
//
// Sizes whose NewGeneration broadcast would not fit in this machine's memory, or whose run would
// not fit in the time budget, are skipped and their figures extrapolated from the fit (said so in
// the output and in the JSON).
//
// Flags: --max-workers N (16384)  sizes 256, 1024, 4096, 16384 up to N, and N
//        --sizes A,B,...          exactly these sizes
//        --quick                  256 and 1024 only, 5 heartbeat periods, 16 sampled ranks
//        --budget-s S (270)       wall-clock budget for all sizes
//        --heartbeat-periods K (10)  --rendezvous-sample S (32)  --seed N (1)
//        --server-batch B (0: drain the socket before ticking; 256: CoordinatorServer's batch)
//        --fsync-ms X (0.1)  --latency-us X (30)  --coordinator-gbps X (25)  --step-ms X (1000)
//        --journal-dir DIR (/dev/shm, else /tmp)  --no-nccl  --no-curve
//        --every-rank-sets        every rank writes its rendezvous keys for real (the store's bound
//                                 applies)   --event-timeout-s S (180)  simulated time per event
//        --store-rendezvous       workers serve no rendezvous records: the world's address records
//                                 go through the coordinator's store, as before protocol 7
//        --thread-clock           time each call by the thread CPU clock (a system call per
//                                 reading) instead of the monotonic clock (CallClock)
//        --no-look-ahead          decode and handle each message alone, not with the next ones
//                                 prefetched as CoordinatorServer does (PrefetchAhead)
//        --repeat R (5; 1 with --quick or --scenario 3d)  runs of each size, in passes over all
//                                 sizes; each event counts with its median run
//        --scenario 3d            instead of the events above, the 3-D job of scenario_3d.h
//                                 (tp = 8, pp = 8, sizes multiples of 64) losing one worker (a
//                                 spare takes its rank), then one host, then growing back: per
//                                 change its layout, the communicators built and kept, the
//                                 coordinator's CPU and bytes and the simulated time (a table,
//                                 then one JSON line, bench "scale_3d")
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/scale/curve_probe.h"
#include "bench/scale/flags.h"
#include "bench/scale/lone_heartbeats.h"
#include "bench/scale/report.h"
#include "bench/scale/scenario.h"
#include "bench/scale/scenario_3d.h"
#include "protocol/codec.h"
#include "elastra/config.h"

namespace elastra::scale {
namespace {

// Below this share of its wall time on the CPU, a run's thread was kept off its core long enough
// that the calls timed by the monotonic clock may show it.
constexpr double kOnCpuWarning = 0.95;

// The allocator this process (and the elastra command, which runs the coordinator) links.
constexpr const char* kAllocator = ELASTRA_HAVE_JEMALLOC ? "jemalloc" : "glibc malloc";

using Json = nlohmann::json;

double MemAvailableGb() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::atof(line.c_str() + 13) / (1 << 20);
  }
  return 8;
}

// The size of the NewGeneration a member that takes no part in the state move gets at `n`
// workers, built as GenerationManager::StartBuild addresses it (its own entry in both tables, ids
// and hosts as the simulation names them). The core holds n of them at once.
size_t NewGenerationBytes(int n) {
  proto::NewGeneration ng;
  ng.layout.dp = n;
  {
    const int r = n - 1;
    proto::Member m;
    m.worker_id = "w" + std::to_string(r);
    m.host = "node" + std::to_string(r / 8);
    m.device = r % 8;
    m.coords = CoordinatesOf(ng.layout, r);
    m.rank = m.worker = r;
    ng.members.push_back(m);
  }
  ng.prev_layout = ng.layout;
  ng.move.plan = proto::MovePlan::kMove;
  ng.move.workers = n;
  ng.prev_members = ng.members;
  ng.kv_prefix = "g9/";
  return proto::MakeFrame(proto::MessageType::kNewGeneration, ng, "scale", 9, "coordinator", 0)
      .size();
}

// CPU seconds a run at `n` takes here, with room to spare. From the last size run, `last_n` in
// `last_cpu_s`, as N^1.5 (a run's cost grows about as N; the exponent allows for the caches it
// outgrows); for the first size, 1 ms per worker (0.3-0.4 ms measured at 16,384) and 2 s.
double PredictCpuSeconds(int n, int last_n, double last_cpu_s) {
  if (last_n > 0) return last_cpu_s * std::pow(static_cast<double>(n) / last_n, 1.5);
  return n * 1e-3 + 2;
}

double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

void PrintModel(const Flags& f) {
  const ScaleParams& p = f.params;
  std::printf(
      "bench_scale: the real CoordinatorCore (codec, journal) with N simulated workers in hosts of "
      "%d\n  modelled: latency %lld us one way (+0-%lld us), coordinator link %.0f Gb/s, worker "
      "link %.0f Gb/s,\n  journal fdatasync %.2f ms (journal in %s), step %.0f ms, %s, "
      "rendezvous sampled on %d ranks,\n  server loop: %s, allocator: %s, calls timed by the %s "
      "clock\n",
      p.job.host_size, static_cast<long long>(p.net.latency_us),
      static_cast<long long>(p.net.jitter_us), p.net.coordinator_gbps, p.net.worker_gbps,
      p.server.fsync_us / 1000, f.journal_dir.c_str(), static_cast<double>(p.job.step_us) / kMs,
      p.job.nccl ? "NCCL job (Gloo control world + NCCL)" : "Gloo job",
      p.job.rendezvous_sample,
      p.server.batch > 0 ? ("ticks after every " + std::to_string(p.server.batch) + " messages").c_str()
                         : "drains its socket before each tick",
      kAllocator, CallClockName(GetCallClock()));
  if (f.three_d) {
    const StateSpec state = ThreeDState();
    std::printf("  scenario 3d: tp = %d, pp = %d, %s of state (%zu tensors), %lld GiB declared a "
                "worker, 8 spares on one more host\n",
                kThreeDTp, kThreeDPp, Bytes(static_cast<double>(state.TotalBytes())).c_str(),
                state.tensors.size(), static_cast<long long>(ThreeDMemoryBytes() >> 30));
  }
  std::fflush(stdout);
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Why the first run at `n` would not fit (this machine's memory, or the `left` seconds of the
// budget at `slowdown` wall seconds per CPU second); empty when it fits.
std::string SkipReason(int n, int last_n, double last_cpu_s, double slowdown, double left) {
  const size_t frame_bytes = NewGenerationBytes(n);
  // The core builds every member's NewGeneration in one call (Outbox::Take returns them all).
  const double need_gb = static_cast<double>(frame_bytes) * n * 1.3 / 1e9 + 0.5;
  const double avail_gb = MemAvailableGb();
  const double predict_s = PredictCpuSeconds(n, last_n, last_cpu_s) * slowdown;
  char why[320];
  if (need_gb > 0.8 * avail_gb) {
    std::snprintf(why, sizeof(why),
                  "one NewGeneration broadcast holds %d frames of %s at once (%.1f GB; %.1f "
                  "GB available)",
                  n, Bytes(static_cast<double>(frame_bytes)).c_str(), need_gb, avail_gb);
    return why;
  }
  if (predict_s > left) {
    std::snprintf(why, sizeof(why),
                  "predicted %.0f s here (%.1fx wall per CPU second); %.0f s of the budget "
                  "left (--budget-s)",
                  predict_s, slowdown, left);
    return why;
  }
  return "";
}

// One run's line, and what went wrong in it.
void PrintRun(int n, int pass, int repeat, const ScaleRun& run, double cpu_s) {
  char which[32] = "";
  if (repeat > 1) std::snprintf(which, sizeof(which), " (run %d of %d)", pass + 1, repeat);
  std::printf(
      "N=%d%s: %.1f s wall (%.1f s CPU, its thread on the CPU %.0f%% of the time), %s "
      "simulated events, %s messages handled, journal %s in %s syncs, replay %.1f ms, %d "
      "sampled rendezvous ranks%s\n",
      n, which, run.wall_s, cpu_s, run.on_cpu * 100,
      Count(static_cast<double>(run.sim_events)).c_str(),
      Count(static_cast<double>(run.messages_handled)).c_str(),
      Bytes(static_cast<double>(run.journal_bytes)).c_str(),
      Count(static_cast<double>(run.journal_syncs)).c_str(), run.replay_cpu_ms,
      run.rendezvous_sample, run.ok() ? "" : "  (FAILED)");
  if (GetCallClock() == CallClock::kMonotonic && run.on_cpu < kOnCpuWarning) {
    std::printf("  the thread lost the core %.0f%% of the time: the calls' times include some "
                "of that (run again on an idle machine, or with --thread-clock)\n",
                (1 - run.on_cpu) * 100);
  }
  if (run.expired_heartbeats > 0) {
    std::printf("  %llu workers were declared lost for missed heartbeats\n",
                static_cast<unsigned long long>(run.expired_heartbeats));
  }
  if (run.build_failures > 0) {
    std::printf("  %d times a rank could not build its generation: %s\n", run.build_failures,
                run.first_build_error.c_str());
  }
  for (const auto& line : run.first_errors) std::printf("  logged: %s\n", line.c_str());
  for (const auto& e : run.events) {
    if (!e.ok) std::printf("  %s: %s\n", e.name.c_str(), e.detail.c_str());
  }
  std::fflush(stdout);
}

// The runs of every size, and the sizes skipped.
struct Sweep {
  std::map<int, std::vector<ScaleRun>> repeats;  // each size's runs, in the order run
  std::map<int, std::string> skipped;
  bool all_ok = true;
  int passes = 0;
};

// The sizes run in passes, each pass every size once: a slow spell of this machine (another
// tenant's memory traffic) then falls on all sizes alike instead of on one, and each event of a
// size counts with its median run (MedianOf).
Sweep RunSizes(const Flags& f, std::chrono::steady_clock::time_point wall0) {
  Sweep sweep;
  double run_wall = 0, run_cpu = 0;  // of the sizes run: how much wall time a CPU second costs here
  int last_n = 0;
  double last_cpu_s = 0;
  for (int pass = 0; pass < f.repeat; ++pass) {
    for (int n : f.sizes) {
      if (sweep.skipped.count(n)) continue;
      const double left = f.budget_s - SecondsSince(wall0);
      if (pass > 0) {
        // Again only when the first run of this size fits what is left of the budget.
        if (sweep.repeats[n].front().wall_s * 1.5 > left) {
          std::printf("N=%d: no run %d of %d (%.0f s of the budget left; --budget-s)\n", n,
                      pass + 1, f.repeat, left);
          continue;
        }
      } else {
        const double slowdown = run_cpu > 1 ? std::max(1.0, run_wall / run_cpu) : 1.5;
        const std::string why = SkipReason(n, last_n, last_cpu_s, slowdown, left);
        if (!why.empty()) {
          sweep.skipped[n] = why;
          std::printf("N=%d skipped: %s\n", n, sweep.skipped[n].c_str());
          std::fflush(stdout);
          continue;
        }
      }
      ScaleParams run_params = f.params;
      run_params.wall_budget_s = std::max(10.0, left);
      const double cpu0 = ProcessCpuSeconds();
      ScaleRun run = f.three_d ? RunScale3D(n, run_params) : RunScale(n, run_params);
      const double cpu_s = ProcessCpuSeconds() - cpu0;
      run_cpu += cpu_s;
      run_wall += run.wall_s;
      if (pass == 0) {
        last_n = n;
        last_cpu_s = cpu_s;
      }
      sweep.passes = std::max(sweep.passes, pass + 1);
      PrintRun(n, pass, f.repeat, run, cpu_s);
      sweep.all_ok = sweep.all_ok && run.ok();
      sweep.repeats[n].push_back(std::move(run));
    }
  }
  return sweep;
}

// Growth exponents over the sizes run, printed and returned by series (rounded to 0.01).
std::map<std::string, double> PrintExponents(const std::vector<ScaleRun>& runs) {
  std::map<std::string, double> exponents;
  std::printf("\ngrowth exponents (cost ~ N^k, least squares over N =");
  for (const auto& r : runs) std::printf(" %d", r.n);
  std::printf("):\n");
  int column = 0;
  for (const auto& s : AllSeries()) {
    std::vector<std::pair<double, double>> points;
    for (const auto& r : runs) points.push_back({static_cast<double>(r.n), s.value(r)});
    const double k = Exponent(points);
    if (std::isnan(k)) continue;
    exponents[s.name] = std::round(k * 100) / 100;
    std::printf("  %-26s %5.2f%s", s.name.c_str(), k, ++column % 3 == 0 ? "\n" : "");
  }
  std::printf("\n");
  return exponents;
}

// The figures at max_workers: measured when it ran, else extrapolated from the largest run.
struct AtMax {
  const ScaleRun& top;
  int max_workers;
  const std::map<std::string, double>& exponents;

  bool measured() const { return top.n == max_workers; }
  double operator()(const std::string& series, double value) const {
    if (measured() || value <= 0) return value;
    auto it = exponents.find(series);
    if (it == exponents.end()) return -1.0;  // one size only: nothing to extrapolate with
    return value * std::pow(static_cast<double>(max_workers) / top.n, it->second);
  }
};

// Heartbeats at max_workers: the core's share of a core, and ZeroMQ's and CURVE's beside it.
struct HeartbeatFigures {
  coordinator::CoordinatorOptions sized;  // the options the core uses at max_workers
  double period_s = 0;
  double rate = 0;  // heartbeats per second, the agents' included
  double cpu_per_msg_ms = -1;
  double core_fraction = -1;
  double curve_fraction = -1;
  double zmq_fraction = -1;
};

HeartbeatFigures HeartbeatsAtMax(const AtMax& at_max, const ScaleParams& p) {
  HeartbeatFigures h;
  const int max_workers = at_max.max_workers;
  const EventResult* hb = at_max.top.Find("heartbeats");
  // Heartbeats per second at max_workers: the workers' at the period the core uses for that size
  // (ScaledHeartbeats; the scenario's options), the agents' (one per host) at their 200 ms.
  h.sized.initial_workers = max_workers;
  h.sized.max_workers = max_workers + p.job.host_size * 8;
  h.sized = coordinator::ScaledHeartbeats(h.sized);
  h.period_s = static_cast<double>(h.sized.heartbeat_interval.count()) / 1000;
  h.rate = max_workers / h.period_s + static_cast<double>(max_workers) / p.job.host_size / 0.2;
  // The core's share: measured at max_workers when it ran; else the CPU per message of the largest
  // run's heartbeat window (heartbeats, agent messages and ticks) times that rate. The period
  // differs between sizes, so the CPU per second does not follow one power of N.
  h.cpu_per_msg_ms = hb ? hb->CpuPerMessageMs() : -1;
  const double cpu_per_s = at_max.measured()
                               ? (hb ? hb->CpuPerSecond() : -1)
                               : (h.cpu_per_msg_ms > 0 ? h.cpu_per_msg_ms * h.rate : -1);
  h.core_fraction = cpu_per_s > 0 ? cpu_per_s / 1000 : -1;
  return h;
}

// A heartbeat with nothing run between two (lone_heartbeats.h), beside the simulation's; printed
// and returned by size, in us.
std::vector<std::pair<int, double>> PrintLoneHeartbeats(const std::vector<ScaleRun>& runs,
                                                        bool quick, uint64_t seed) {
  std::printf("\na heartbeat, us: the core alone (nothing run between two, senders at random) / in "
              "the simulation (its window's CPU over its messages):");
  std::vector<std::pair<int, double>> lone;
  for (const auto& r : runs) {
    lone.emplace_back(r.n, MeasureLoneHeartbeats(r.n, quick ? 20000 : 100000, 3, seed));
    const EventResult* window = r.Find("heartbeats");
    const double in_sim_ms = window ? window->CpuPerMessageMs() : -1;
    std::printf("%s %d: %.2f / %.2f", lone.size() > 1 ? ";" : "", r.n, lone.back().second,
                in_sim_ms > 0 ? in_sim_ms * 1000 : -1);
  }
  std::printf("\n");
  return lone;
}

CurveFigures PrintCurve(bool quick) {
  const std::string hb_frame = proto::MakeFrame(proto::MessageType::kHeartbeat,
                                                proto::Heartbeat{123456}, "scale", 7, "w12345", 0);
  CurveFigures curve = MeasureCurve(hb_frame.size(), 16, quick ? 40000 : 200000);
  std::printf(
      "\nZeroMQ and CURVE on this machine (a %zu-byte heartbeat frame): libsodium box open %.2f "
      "us; libzmq ROUTER receive %.2f us (NULL) / %.2f us (CURVE) per message%s%s\n",
      curve.message_bytes, curve.sodium_open_us, curve.zmq_null_us, curve.zmq_curve_us,
      curve.error.empty() ? "" : "; ", curve.error.c_str());
  return curve;
}

// The one JSON line.
Json ResultJson(const Flags& f, const std::vector<ScaleRun>& runs, const Sweep& sweep,
                const AtMax& at_max, const HeartbeatFigures& hbf, const CurveFigures& curve,
                const std::vector<std::pair<int, double>>& lone) {
  const ScaleRun& top = at_max.top;
  const EventResult* grow = top.Find("grow");
  const EventResult* fail = top.Find("fail_1pct");
  const double change_core_cpu = at_max("grow.cpu", grow ? grow->cost.change_cpu_ms() : -1);
  const double change_core_bytes =
      at_max("grow.bytes", grow ? static_cast<double>(grow->cost.change_bytes()) : -1);
  const double change_kv_cpu = at_max("rendezvous.cpu", grow ? grow->cost.kv_cpu_ms_all : -1);
  const double change_kv_bytes = at_max("rendezvous.bytes", grow ? grow->cost.kv_bytes_all : -1);
  Json out;
  out["bench"] = "scale";
  out["max_workers"] = at_max.max_workers;
  out["allocator"] = kAllocator;
  out["call_clock"] = CallClockName(GetCallClock());
  out["look_ahead"] = f.params.server.look_ahead;
  double on_cpu = 1;
  for (const auto& r : runs) on_cpu = std::min(on_cpu, r.on_cpu);
  out["on_cpu_min"] = std::round(on_cpu * 1000) / 1000;
  out["measured_max_workers"] = top.n;
  out["at_max_workers"] = at_max.measured() ? "measured" : "extrapolated";
  Json sizes = Json::array();
  for (const auto& r : runs) sizes.push_back(r.n);
  out["sizes"] = sizes;
  out["runs_per_size"] = sweep.passes;
  Json skips = Json::object();
  for (const auto& [n, why] : sweep.skipped) skips[std::to_string(n)] = why;
  out["skipped"] = skips;
  out["change_cpu_ms"] = change_core_cpu + std::max(0.0, change_kv_cpu);
  out["change_bytes"] = change_core_bytes + std::max(0.0, change_kv_bytes);
  out["change_core_cpu_ms"] = change_core_cpu;
  out["change_own_cpu_ms"] = at_max("grow.own_cpu", grow ? grow->cost.change_own_cpu_ms() : -1);
  out["change_new_generation_encode_ms"] =
      at_max("grow.cpu", grow ? grow->cost.new_generation_encode_ms : -1);
  out["change_core_bytes"] = change_core_bytes;
  out["change_kv_cpu_ms"] = change_kv_cpu;
  out["change_kv_bytes"] = change_kv_bytes;
  out["change_time_s"] = at_max("grow.time", grow ? grow->time_s : -1);
  out["change_time_with_rendezvous_s"] =
      grow && at_max.measured() ? TimeWithRendezvous(*grow) : -1;
  out["failure_time_s"] = at_max("fail_1pct.time", fail ? fail->time_s : -1);
  out["heartbeat_core_fraction"] = hbf.core_fraction;
  out["heartbeat_curve_fraction"] = hbf.curve_fraction;
  out["heartbeat_zmq_fraction"] = hbf.zmq_fraction;
  out["heartbeat_total_fraction"] = hbf.core_fraction + std::max(0.0, hbf.zmq_fraction);
  out["curve_us_per_msg"] = curve.curve_us();
  out["heartbeat_period_ms"] = hbf.sized.heartbeat_interval.count();
  out["heartbeat_core_us_per_msg"] = hbf.cpu_per_msg_ms * 1000;
  Json alone = Json::object();
  for (const auto& [n, us] : lone) alone[std::to_string(n)] = std::round(us * 1000) / 1000;
  out["heartbeat_alone_us"] = alone;
  out["heartbeat_timeout_ms"] = hbf.sized.heartbeat_timeout.count();
  out["exponents"] = at_max.exponents;
  out["ok"] = sweep.all_ok;
  return out;
}

// `v` to `digits` decimals (the nearest double, which prints short).
double Round(double v, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(v * scale) / scale;
}

// The one JSON line of the 3-D scenario: per size, each change as its median run measured it.
Json ResultJson3D(const std::vector<ScaleRun>& runs, const Sweep& sweep) {
  Json out;
  out["bench"] = "scale_3d";
  out["tp"] = kThreeDTp;
  out["pp"] = kThreeDPp;
  out["allocator"] = kAllocator;
  out["call_clock"] = CallClockName(GetCallClock());
  out["runs_per_size"] = sweep.passes;
  Json sizes = Json::array(), by_size = Json::object(), skips = Json::object();
  bool keeps = true;
  for (const auto& r : runs) {
    sizes.push_back(r.n);
    Json changes = Json::object();
    for (const auto& e : r.events) {
      if (e.name == "join") continue;
      Json c;
      c["ok"] = e.ok;
      if (!e.ok) c["detail"] = e.detail;
      c["layout"] = e.groups_rebuilt >= 0 ? e.layout.ToString() : "";
      c["groups_rebuilt"] = e.groups_rebuilt;
      c["groups_kept"] = e.groups_kept;
      c["standby"] = e.standby;
      c["time_s"] = Round(e.time_s, 3);
      c["decision_s"] = Round(e.decision_s, 3);
      c["change_cpu_ms"] = Round(e.cost.change_cpu_ms(), 2);
      c["change_own_cpu_ms"] = Round(e.cost.change_own_cpu_ms(), 2);
      c["change_bytes"] = e.cost.change_bytes();
      c["change_msgs"] = e.cost.change_msgs();
      c["longest_call_ms"] = Round(e.cost.longest_call_ms, 2);
      changes[e.name] = c;
    }
    by_size[std::to_string(r.n)] = changes;
    keeps = keeps && KeepsModelParallelism(r);
  }
  for (const auto& [n, why] : sweep.skipped) skips[std::to_string(n)] = why;
  out["sizes"] = sizes;
  out["skipped"] = skips;
  out["changes"] = by_size;
  out["keeps_tp_pp"] = keeps;
  out["ok"] = sweep.all_ok && keeps;
  return out;
}

}  // namespace

int Main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f) || !ApplyDefaults(&f)) return Usage();
  const ScaleParams& p = f.params;
  const int max_workers = std::max(f.max_workers, f.sizes.back());
  PrintModel(f);

  const auto wall0 = std::chrono::steady_clock::now();
  Sweep sweep = RunSizes(f, wall0);
  std::vector<ScaleRun> runs;
  for (int n : f.sizes) {
    if (sweep.repeats.count(n)) runs.push_back(MedianOf(std::move(sweep.repeats[n])));
  }
  if (runs.empty()) {
    std::fprintf(stderr, "bench_scale: no size could run\n");
    return 1;
  }

  if (sweep.passes > 1) {
    std::printf("\neach event below: the median of its %d runs at that size (by coordinator CPU)\n",
                sweep.passes);
  }
  if (f.three_d) {
    PrintChanges(runs);
    PrintHot(runs.back());
    Json out = ResultJson3D(runs, sweep);
    out["wall_s"] = std::round(SecondsSince(wall0) * 10) / 10;
    std::printf("%s\n", out.dump().c_str());
    return sweep.all_ok ? 0 : 1;
  }
  PrintTable(runs);
  PrintHot(runs.back());
  const std::map<std::string, double> exponents = PrintExponents(runs);
  const AtMax at_max{runs.back(), max_workers, exponents};
  HeartbeatFigures hbf = HeartbeatsAtMax(at_max, p);
  const auto lone = PrintLoneHeartbeats(runs, f.quick, p.seed);
  CurveFigures curve;
  if (f.curve) curve = PrintCurve(f.quick);
  hbf.curve_fraction = curve.curve_us() > 0 ? hbf.rate * curve.curve_us() / 1e6 : -1;
  hbf.zmq_fraction = curve.zmq_curve_us > 0 ? hbf.rate * curve.zmq_curve_us / 1e6 : -1;
  std::printf(
      "heartbeats at %d workers (period %.0f ms, timeout %lld ms): core %.4f of a core%s, CURVE "
      "%.4f, libzmq receive with CURVE %.4f (%.0f heartbeats/s with the agents')\n",
      max_workers, hbf.period_s * 1000, static_cast<long long>(hbf.sized.heartbeat_timeout.count()),
      hbf.core_fraction, at_max.measured() ? "" : " (extrapolated)", hbf.curve_fraction,
      hbf.zmq_fraction, hbf.rate);

  Json out = ResultJson(f, runs, sweep, at_max, hbf, curve, lone);
  out["wall_s"] = std::round(SecondsSince(wall0) * 10) / 10;
  std::printf("%s\n", out.dump().c_str());
  return sweep.all_ok ? 0 : 1;
}

}  // namespace elastra::scale

int main(int argc, char** argv) { return elastra::scale::Main(argc, argv); }
