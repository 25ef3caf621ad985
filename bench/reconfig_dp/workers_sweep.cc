// bench_reconfig_dp --workers-sweep: what a worker's own Gloo world costs at 2..32 workers, ours
// (collectives/gloo/gloo_mesh.h: pairs to r +- 2^k only, recursive-doubling agreement) beside raw
// Gloo's connectFullMesh of the same size, in the same run.
//
// For each size n, n processes (forked and exec'd, oversubscribed on this machine) build one
// context over the same store (gloo's FileStore in a fresh directory, polled every 10 ms, for
// both), all released at once when every one of them has started (a byte each down a pipe);
// each then runs `iters` agreement allreduces of two int64 (16 bytes: the per-step agreement's
// size) and times each. Ours and raw alternate, `reps` times per size; per size and side the
// median over reps of:
//   build_ms       from the release to the last rank connected (the Gloo part of a generation
//                  build);
//   pairs          connected pairs per rank (max over ranks);
//   sockets        TCP sockets the build opened in the process (/proc/self/fd, max over ranks);
//   agreement_us   the median agreement allreduce on rank 0 (ours: recursive doubling; raw:
//                  gloo::allreduce, its ring), wall clock: on this oversubscribed
//                  machine mostly waiting to be scheduled;
//   agreement_min_us  the fastest agreement on rank 0: what one costs when nothing else runs;
//   agreement_cpu_us  the CPU time (all threads, user + system) one agreement costs a rank, the
//                  mean over ranks: what a rank spends per agreement whatever the load.
// The JSON line also has the worst ratio to raw over the sizes, of the median and of the CPU.
#include "workers_sweep.h"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Our KeyValueStore over gloo's FileStore, so that both sides rendezvous through the same store.
class FileStoreKv : public elastra::KeyValueStore {
 public:
  explicit FileStoreKv(const std::string& dir) : store_(dir) {}
  elastra::Status Set(const std::string& key, const std::string& value) override {
    try {
      store_.set(key, std::vector<char>(value.begin(), value.end()));
      return elastra::OkStatus();
    } catch (const std::exception& e) {
      return elastra::UnavailableError(e.what());
    }
  }
  elastra::StatusOr<std::string> Get(const std::string& key, milliseconds timeout) override {
    ELASTRA_RETURN_IF_ERROR(Wait({key}, timeout));
    try {
      std::vector<char> v = store_.get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return elastra::UnavailableError(e.what());
    }
  }
  elastra::Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    try {
      store_.wait(keys, timeout);
      return elastra::OkStatus();
    } catch (const std::exception& e) {
      return elastra::TimedOutError(e.what());
    }
  }
  elastra::StatusOr<int64_t> Add(const std::string&, int64_t) override {
    return elastra::InvalidArgumentError("FileStoreKv: no Add");
  }

 private:
  gloo::rendezvous::FileStore store_;
};

int CountSockets() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target.string().rfind("socket:", 0) == 0) ++n;
  }
  return n;
}

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct RankFigures {
  int64_t end_ns = 0;  // steady clock: connected
  int pairs = 0;
  int sockets = 0;
  double agreement_us = 0;
  double agreement_min_us = 0;
  double agreement_cpu_us = 0;
};

double ProcessCpuUs() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

int RunSweepRank(const std::string& side, const std::string& dir, int rank, int size, int iters,
                 int ready_fd, int go_fd) {
  const int sockets_before = CountSockets();
  char byte = 1;
  if (write(ready_fd, &byte, 1) != 1 || read(go_fd, &byte, 1) != 1) return 1;
  close(ready_fd);
  close(go_fd);
  RankFigures f;
  std::vector<double> lat;
  lat.reserve(iters);
  if (side == "ours") {
    FileStoreKv store(dir);
    elastra::GlooOptions o;
    o.store = &store;
    o.prefix = "sweep/";
    o.rank = rank;
    o.size = size;
    o.timeout = milliseconds(120000);
    o.connect_timeout = milliseconds(120000);
    auto comm = elastra::CreateGlooCommunicator(o);
    if (!comm.ok()) {
      std::fprintf(stderr, "sweep rank %d: %s\n", rank, comm.status().ToString().c_str());
      return 1;
    }
    f.end_ns = NowNs();
    f.pairs = elastra::GlooConnectedPairs(**comm);
    f.sockets = CountSockets() - sockets_before;
    if (!(*comm)->Barrier().ok()) return 1;
    const double cpu = ProcessCpuUs();
    for (int i = 0; i < iters; ++i) {
      int64_t agree[2] = {rank, 1};
      const auto t = Clock::now();
      if (!(*comm)->Allreduce(agree, 2, elastra::DataType::kInt64, elastra::ReduceOp::kSum).ok() ||
          agree[1] != size) {
        return 1;
      }
      lat.push_back(Us(t, Clock::now()));
    }
    f.agreement_cpu_us = (ProcessCpuUs() - cpu) / iters;
  } else {
    gloo::rendezvous::FileStore file_store(dir);
    gloo::rendezvous::PrefixStore store("raw", file_store);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(milliseconds(120000));
    context->connectFullMesh(store, device);
    f.end_ns = NowNs();
    for (int p = 0; p < size; ++p) f.pairs += p != rank && context->getPair(p) != nullptr;
    f.sockets = CountSockets() - sockets_before;
    gloo::BarrierOptions barrier(context);
    gloo::barrier(barrier);
    const double cpu = ProcessCpuUs();
    for (int i = 0; i < iters; ++i) {
      int64_t agree[2] = {rank, 1};
      const auto t = Clock::now();
      gloo::AllreduceOptions opts(context);
      opts.setInput(agree, 2);
      opts.setOutput(agree, 2);
      opts.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<int64_t>));
      opts.setTag(static_cast<uint32_t>(i));
      gloo::allreduce(opts);
      if (agree[1] != size) return 1;
      lat.push_back(Us(t, Clock::now()));
    }
    f.agreement_cpu_us = (ProcessCpuUs() - cpu) / iters;
  }
  f.agreement_us = Median(lat);
  f.agreement_min_us = lat.empty() ? 0 : *std::min_element(lat.begin(), lat.end());
  std::ofstream(dir + "/result_" + std::to_string(rank))
      << f.end_ns << " " << f.pairs << " " << f.sockets << " " << f.agreement_us << " "
      << f.agreement_min_us << " " << f.agreement_cpu_us;
  return 0;
}

namespace {

// One size, one side: n processes; the figures described at the top (build_ms and sockets the
// maxima over ranks, agreement on rank 0, agreement_cpu_us the mean over ranks).
bool RunSide(const std::string& self, const std::string& side, int n, int iters,
             nlohmann::json* out) {
  char tmpl[] = "/tmp/elastra_sweep_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  int ready[2], go[2];
  if (pipe(ready) != 0 || pipe(go) != 0) return false;
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      execl(self.c_str(), self.c_str(), "--sweep-rank", side.c_str(), dir.c_str(),
            std::to_string(r).c_str(), std::to_string(n).c_str(), std::to_string(iters).c_str(),
            std::to_string(ready[1]).c_str(), std::to_string(go[0]).c_str(), nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  close(ready[1]);
  close(go[0]);
  // Every rank has started (and counted its sockets): release them all at once.
  bool ok = true;
  for (int r = 0; r < n && ok; ++r) {
    char byte = 0;
    ok = read(ready[0], &byte, 1) == 1;
  }
  const int64_t released = NowNs();
  const std::string bytes(n, '\1');
  ok &= write(go[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  close(ready[0]);
  close(go[1]);
  for (pid_t p : pids) {
    int status = 0;
    waitpid(p, &status, 0);
    ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  RankFigures agg;
  double cpu = 0;
  for (int r = 0; r < n && ok; ++r) {
    std::ifstream in(dir + "/result_" + std::to_string(r));
    RankFigures f;
    ok &= static_cast<bool>(in >> f.end_ns >> f.pairs >> f.sockets >> f.agreement_us >>
                            f.agreement_min_us >> f.agreement_cpu_us);
    agg.end_ns = std::max(agg.end_ns, f.end_ns);
    agg.pairs = std::max(agg.pairs, f.pairs);
    agg.sockets = std::max(agg.sockets, f.sockets);
    if (r == 0) {
      agg.agreement_us = f.agreement_us;
      agg.agreement_min_us = f.agreement_min_us;
    }
    cpu += f.agreement_cpu_us / n;
  }
  std::filesystem::remove_all(dir);
  if (!ok) return false;
  *out = {{"build_ms", static_cast<double>(agg.end_ns - released) / 1e6},
          {"pairs", agg.pairs},
          {"sockets", agg.sockets},
          {"agreement_us", agg.agreement_us},
          {"agreement_min_us", agg.agreement_min_us},
          {"agreement_cpu_us", cpu}};
  return true;
}

// The median over reps of each figure.
nlohmann::json MedianOf(const std::vector<nlohmann::json>& reps) {
  nlohmann::json out;
  for (const char* key : {"build_ms", "agreement_us", "agreement_min_us", "agreement_cpu_us"}) {
    std::vector<double> v;
    for (const auto& r : reps) v.push_back(r[key].get<double>());
    out[key] = Median(v);
  }
  for (const char* key : {"pairs", "sockets"}) {
    int m = 0;
    for (const auto& r : reps) m = std::max(m, r[key].get<int>());
    out[key] = m;
  }
  return out;
}

}  // namespace

int RunWorkersSweep(const std::string& self, int iters, int reps, int max_workers) {
  nlohmann::json sizes = nlohmann::json::array();
  std::printf("%7s | %9s %9s | %5s %5s | %7s %7s | %12s %9s | %8s %8s | %8s %8s\n", "workers",
              "build ms", "raw", "pairs", "raw", "sockets", "raw", "agreement us", "raw",
              "min us", "raw", "cpu us", "raw");
  nlohmann::json last;
  // The worst ratio over sizes: the agreement must cost no more than raw Gloo's at any size.
  double worst_cpu = 0, worst_median = 0;
  for (int n : {2, 4, 8, 16, 32}) {
    if (n > max_workers) break;
    std::vector<nlohmann::json> ours_reps, raw_reps;
    for (int rep = 0; rep < reps; ++rep) {
      nlohmann::json ours, raw;
      if (!RunSide(self, "ours", n, iters, &ours) || !RunSide(self, "raw", n, iters, &raw)) {
        std::fprintf(stderr, "bench_reconfig_dp --workers-sweep: a rank failed at %d workers\n",
                     n);
        return 1;
      }
      ours_reps.push_back(ours);
      raw_reps.push_back(raw);
    }
    const nlohmann::json ours = MedianOf(ours_reps), raw = MedianOf(raw_reps);
    auto d = [](const nlohmann::json& j, const char* k) { return j[k].get<double>(); };
    auto i = [](const nlohmann::json& j, const char* k) { return j[k].get<int>(); };
    std::printf(
        "%7d | %9.1f %9.1f | %5d %5d | %7d %7d | %12.1f %9.1f | %8.1f %8.1f | %8.1f %8.1f\n", n,
        d(ours, "build_ms"), d(raw, "build_ms"), i(ours, "pairs"), i(raw, "pairs"),
        i(ours, "sockets"), i(raw, "sockets"), d(ours, "agreement_us"), d(raw, "agreement_us"),
        d(ours, "agreement_min_us"), d(raw, "agreement_min_us"), d(ours, "agreement_cpu_us"),
        d(raw, "agreement_cpu_us"));
    std::fflush(stdout);
    last = {{"workers", n},
            {"ours", ours},
            {"raw", raw},
            {"build_vs_raw", d(ours, "build_ms") / d(raw, "build_ms")},
            {"pairs_vs_raw", d(ours, "pairs") / d(raw, "pairs")},
            {"agreement_vs_raw", d(ours, "agreement_us") / d(raw, "agreement_us")},
            {"agreement_min_vs_raw", d(ours, "agreement_min_us") / d(raw, "agreement_min_us")},
            {"agreement_cpu_vs_raw", d(ours, "agreement_cpu_us") / d(raw, "agreement_cpu_us")}};
    sizes.push_back(last);
    worst_cpu = std::max(worst_cpu, last["agreement_cpu_vs_raw"].get<double>());
    worst_median = std::max(worst_median, last["agreement_vs_raw"].get<double>());
  }
  nlohmann::json out;
  out["bench"] = "reconfig_dp_workers_sweep";
  out["iters"] = iters;
  out["reps"] = reps;
  out["sizes"] = sizes;
  out["max_workers"] = last["workers"];
  out["max_pairs_ours"] = last["ours"]["pairs"];
  out["max_pairs_raw"] = last["raw"]["pairs"];
  out["build_vs_raw_at_max"] = last["build_vs_raw"];
  out["pairs_vs_raw_at_max"] = last["pairs_vs_raw"];
  out["agreement_vs_raw_at_max"] = last["agreement_vs_raw"];
  out["agreement_min_vs_raw_at_max"] = last["agreement_min_vs_raw"];
  out["agreement_cpu_vs_raw_at_max"] = last["agreement_cpu_vs_raw"];
  out["agreement_cpu_vs_raw_worst"] = worst_cpu;
  out["agreement_vs_raw_worst"] = worst_median;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
