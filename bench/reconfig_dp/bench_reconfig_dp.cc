// bench_reconfig_dp: the downtime of a planned data-parallel resize, split into its phases, beside
// raw Gloo doing the same work in the same run.
//
// Ours: `elastra run --nproc 2` with this binary as the worker (a state of --state-mb MiB and a
// short step), resized 2 -> 4 -> 2 several times through the admin API. The coordinator reports
// per resize: pause agreement, communicator rebuild (slowest worker), state transfer (slowest
// worker) and the downtime (first worker paused -> last worker ready).
// Raw: 4 processes that connectFullMesh a fresh gloo context over a FileStore and broadcast the
// same bytes from rank 0: what any elastic DP system must at least do for the same change.
//
// With --change tp, the same two workers go from dp=2 to tp=2 and back instead (the state is
// split over tp): to tp=2 nothing moves (each keeps its half), back to dp=2 each receives the
// other's half. Raw: 2 processes connect and swap halves over unbound buffers.
//
// With --hosts K (2..4; root, Linux namespaces), the same grow and shrink also run across K hosts
// of a namespace cluster (testbed/namespace_cluster.h: hosts 198.18.0.10.. on a bridge, real TCP
// between their addresses): `elastra coordinator` on host 0, `elastra agent` with ceil(4/K) slots
// on each host (the first generation fills host 0 first, so a grow starts its workers on the next
// hosts and the state crosses hosts), resized by `elastra resize --wait` run in host 0. Raw Gloo
// runs its 4 ranks placed the same way, each bound to its host's address. The loopback run is made
// as without --hosts, in the same process, so the two are measured under the same load.
//
// Prints one JSON line at the end: ... "rebuild_vs_raw": x, "downtime_vs_raw": y (for --change
// tp: of the change back to dp=2, which moves the bytes); with --hosts, a "hosts" object with the
// figures across hosts, their ratios to raw Gloo across the same hosts ("downtime_vs_raw") and to
// the loopback run ("grow_downtime_vs_loopback", "shrink_downtime_vs_loopback").
//
// With --workers-sweep [--iters K] [--reps R] [--max-workers M], instead: the worker's own Gloo world at 2, 4, 8, 16 and 32
// processes, ours beside raw Gloo's full mesh (workers_sweep.cc): pairs and sockets per worker,
// build time, and the per-step agreement allreduce's median latency.
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "protocol/control_client.h"
#include "protocol/keys.h"
#include "elastra/worker.h"
#include "testbed/namespace_cluster.h"
#include "workers_sweep.h"

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Worker mode: a replicated state of `state_mb` MiB and a 2 ms step, until SIGTERM.
int RunWorker(size_t state_mb) {
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!options.ok()) return 2;
  auto worker = elastra::Worker::Create(*options);
  if (!worker.ok()) return 1;
  auto& w = *worker;
  // Split over tp: whole on every worker while tp = 1 (a replica), halves at tp = 2.
  if (!w->state()
           .AddTensor("blob", {static_cast<int64_t>(state_mb << 18)}, elastra::DataType::kFloat32,
                      elastra::SplitOverTp(0))
           .ok()) {
    return 1;
  }
  auto blob = w->state().View<float>("blob");
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<float>(i % 1000);
  if (!w->Start().ok()) return 1;
  while (true) {
    std::this_thread::sleep_for(milliseconds(2));
    auto action = w->StepEnd(elastra::OkStatus());
    if (!action.ok()) return 1;
    if (*action == elastra::StepAction::kLeave) return 0;
  }
}

// Raw Gloo: one rank of connectFullMesh + broadcast over a FileStore (size > 2), or of
// connectFullMesh + a swap of halves with the other rank (size == 2). Writes "connect_ms move_ms".
int RunRawSwap(gloo::rendezvous::Context& context, std::vector<float>& data, int rank);

int RunRawRank(const std::string& dir, const std::string& prefix, int rank, int size,
               size_t state_mb, const std::string& bind) {
  std::vector<float> data(state_mb << 18, rank == 0 ? 1.0f : 0.0f);
  gloo::transport::tcp::attr attr;
  attr.hostname = bind;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(dir);
  gloo::rendezvous::PrefixStore store(prefix, file_store);
  auto t0 = Clock::now();
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
  context->setTimeout(milliseconds(60000));
  context->connectFullMesh(store, device);
  auto t1 = Clock::now();
  if (size == 2) {
    std::vector<float> whole(state_mb << 18, static_cast<float>(rank + 1));
    const int rc = RunRawSwap(*context, whole, rank);
    std::ofstream(dir + "/" + prefix + "_" + std::to_string(rank))
        << Ms(t0, t1) << " " << Ms(t1, Clock::now());
    return rc;
  }
  gloo::BroadcastOptions opts(context);
  opts.setRoot(0);
  opts.setOutput(data.data(), data.size());
  gloo::broadcast(opts);
  auto t2 = Clock::now();
  std::ofstream(dir + "/" + prefix + "_" + std::to_string(rank)) << Ms(t0, t1) << " " << Ms(t1, t2);
  return data[data.size() - 1] == 1.0f ? 0 : 1;
}

// Rank r holds half r of `data` and receives the other half into it, both posted at once.
int RunRawSwap(gloo::rendezvous::Context& context, std::vector<float>& data, int rank) {
  const size_t half = data.size() / 2;
  float* mine = data.data() + (rank == 0 ? 0 : half);
  float* theirs = data.data() + (rank == 0 ? half : 0);
  auto send = context.createUnboundBuffer(mine, half * sizeof(float));
  auto recv = context.createUnboundBuffer(theirs, half * sizeof(float));
  recv->recv(1 - rank, 0);
  send->send(1 - rank, 0);
  send->waitSend();
  recv->waitRecv();
  return theirs[half - 1] == static_cast<float>(2 - rank) ? 0 : 1;
}

struct RawResult {
  double connect_ms = 0;
  double broadcast_ms = 0;
};

// Where raw Gloo's ranks run: on this machine over loopback (no cluster), or rank r in host
// r / slots_per_host of `cluster`, bound to that host's address.
struct RawPlacement {
  elastra::testing::NamespaceCluster* cluster = nullptr;
  int slots_per_host = 1;
};

RawResult RunRaw(const std::string& self, int size, size_t state_mb, int rep,
                 const RawPlacement& placement = {}) {
  char tmpl[] = "/tmp/elastra_bench_raw_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string prefix = "rep" + std::to_string(rep);
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    if (placement.cluster != nullptr) {
      const int host = r / placement.slots_per_host;
      auto pid = placement.cluster->Spawn(
          host,
          {self, "--raw-rank", dir, prefix, std::to_string(r), std::to_string(size),
           std::to_string(state_mb), placement.cluster->Address(host)},
          {}, dir + "/rank" + std::to_string(r) + ".log");
      if (pid.ok()) pids.push_back(*pid);
      continue;
    }
    pid_t pid = fork();
    if (pid == 0) {
      execl(self.c_str(), self.c_str(), "--raw-rank", dir.c_str(), prefix.c_str(),
            std::to_string(r).c_str(), std::to_string(size).c_str(),
            std::to_string(state_mb).c_str(), "127.0.0.1", nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  RawResult out;
  for (int r = 0; r < size; ++r) {
    std::ifstream in(dir + "/" + prefix + "_" + std::to_string(r));
    double c = 0, b = 0;
    in >> c >> b;
    out.connect_ms = std::max(out.connect_ms, c);
    out.broadcast_ms = std::max(out.broadcast_ms, b);
  }
  std::filesystem::remove_all(dir);
  return out;
}

struct Phases {
  std::vector<double> downtime, agreement, rebuild, transfer;
  nlohmann::json Json() const {
    return {{"downtime_ms", Median(downtime)},
            {"agreement_ms", Median(agreement)},
            {"rebuild_ms", Median(rebuild)},
            {"transfer_ms", Median(transfer)}};
  }
};

bool Resize(elastra::ControlClient* admin, int workers, Phases* phases,
            const elastra::Layout* layout = nullptr) {
  elastra::proto::ResizeRequest req;
  req.workers = workers;
  req.wait = true;
  if (layout != nullptr) {
    req.has_layout = true;
    req.layout = *layout;
  }
  auto first = admin->Call<elastra::proto::ResizeReply>(elastra::proto::MessageType::kResize, req,
                                                        milliseconds(10000));
  if (!first.ok()) {
    std::fprintf(stderr, "resize refused: %s\n", first.status().ToString().c_str());
    return false;
  }
  auto done = admin->AwaitReply(admin->last_request_id(), milliseconds(120000));
  if (!done.ok()) return false;
  auto r = elastra::proto::DecodePayload<elastra::proto::ResizeReply>(done->payload);
  if (!r.ok() || r->phase != elastra::proto::ResizePhase::kDone) return false;
  phases->downtime.push_back(r->downtime_ms);
  phases->agreement.push_back(r->agreement_ms);
  phases->rebuild.push_back(r->rebuild_ms);
  phases->transfer.push_back(r->transfer_ms);
  std::fprintf(stderr,
               "resize to %d (%s): downtime %.1f ms (agreement %.1f, rebuild %.1f, "
               "transfer %.1f)\n",
               workers, r->layout.ToString().c_str(), r->downtime_ms, r->agreement_ms,
               r->rebuild_ms, r->transfer_ms);
  return true;
}

// The loopback run: `elastra run --nproc 2` on this machine, resized through the admin API,
// `reps` times to `first` and back to `second` (dp: grow to 4, shrink to 2; tp: to tp=2 and back to
// dp=2). False when the job did not start or a resize failed (said on stderr).
bool RunLoopback(const std::string& self, size_t state_mb, int reps, bool tp, Phases* first,
                 Phases* second) {
  char tmpl[] = "/tmp/elastra_bench_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string state_dir = dir + "/state";
  pid_t launcher = fork();
  if (launcher == 0) {
    std::string log = dir + "/launcher.log";
    if (std::freopen(log.c_str(), "w", stderr) == nullptr) _exit(1);
    execl(ELASTRA_BINARY, ELASTRA_BINARY, "run", "--nproc", "2", "--max-workers", tp ? "2" : "4",
          "--state-dir", state_dir.c_str(), "--", self.c_str(), "--worker",
          std::to_string(state_mb).c_str(), nullptr);
    _exit(127);
  }
  auto kill_launcher = [&] {
    kill(launcher, SIGTERM);
    waitpid(launcher, nullptr, 0);
  };

  // Connect as admin once the coordinator has written its connection file and formed generation 1.
  std::unique_ptr<elastra::ControlClient> admin;
  for (int i = 0; i < 300 && admin == nullptr; ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    auto info = elastra::ReadConnectionInfo(state_dir + "/coordinator.json");
    if (!info.ok()) continue;
    elastra::ControlClientOptions o;
    o.address = info->address;
    o.server_public = info->server_public;
    o.client_keys = info->admin;
    o.job = info->job;
    o.sender = "bench";
    auto c = elastra::ControlClient::Connect(o);
    if (c.ok()) admin = std::move(c).value();
  }
  bool running = false;
  for (int i = 0; admin && i < 600 && !running; ++i) {
    auto st = admin->Call<elastra::proto::StatusReply>(elastra::proto::MessageType::kStatusRequest,
                                                       elastra::proto::StatusRequest{},
                                                       milliseconds(2000));
    running = st.ok() && st->status.state == elastra::proto::JobState::kRunning;
    if (!running) std::this_thread::sleep_for(milliseconds(100));
  }
  if (!running) {
    std::fprintf(stderr, "bench_reconfig_dp: the job did not start (see %s/launcher.log)\n",
                 dir.c_str());
    kill_launcher();
    return false;
  }
  const elastra::Layout to_tp{1, 1, 2}, to_dp{2, 1, 1};
  for (int rep = 0; rep < reps; ++rep) {
    const bool ok =
        tp ? Resize(admin.get(), 2, first, &to_tp) && Resize(admin.get(), 2, second, &to_dp)
           : Resize(admin.get(), 4, first) && Resize(admin.get(), 2, second);
    if (!ok) {
      std::fprintf(stderr, "bench_reconfig_dp: resize failed (see %s/launcher.log)\n", dir.c_str());
      kill_launcher();
      return false;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  admin->Close();
  kill_launcher();
  std::filesystem::remove_all(dir);
  return true;
}

// The lines of the file at `path`.
std::vector<std::string> FileLines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Waits until the file at `path` has a line starting with `prefix`; false after `timeout`.
bool WaitForLine(const std::string& path, const std::string& prefix, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    for (const std::string& line : FileLines(path)) {
      if (line.rfind(prefix, 0) == 0) return true;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return false;
}

// The first line of `text` that parses as a JSON object; an empty object when none does.
nlohmann::json JsonLine(const std::string& text) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind('{', 0) != 0) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) return j;
  }
  return nlohmann::json::object();
}

// The same grow and shrink across the K hosts of `cluster` (see the top of this file): the
// coordinator on host 0, an agent with `slots` slots on each host, `elastra resize --wait` run in
// host 0. False when the job did not start or a resize failed (said on stderr, with the folder of
// the logs, kept then).
bool RunAcrossHosts(elastra::testing::NamespaceCluster& cluster, const std::string& self,
                    size_t state_mb, int reps, int slots, Phases* grow, Phases* shrink) {
  char tmpl[] = "/tmp/elastra_bench_hosts_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string state = dir + "/state";
  const std::string elastra = ELASTRA_BINARY;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "bench_reconfig_dp --hosts: %s (logs in %s)\n", why.c_str(), dir.c_str());
    return false;
  };
  auto coordinator = cluster.Spawn(0,
                                   {elastra, "coordinator", "--state-dir", state, "--workers", "2",
                                    "--max-workers", "4", "--bind", "tcp://0.0.0.0:5555"},
                                   {}, dir + "/coordinator.log");
  if (!coordinator.ok())
    return fail("cannot start the coordinator: " + coordinator.status().ToString());
  if (!WaitForLine(dir + "/coordinator.log", "{\"address\"", milliseconds(60000))) {
    return fail("the coordinator did not start");
  }
  // One agent after the other, so that registration order is host order.
  for (int k = 0; k < cluster.size(); ++k) {
    const std::string log = dir + "/agent" + std::to_string(k) + ".log";
    auto agent = cluster.Spawn(
        k,
        {elastra, "agent", "--join", state + "/join.json", "--name", cluster.Name(k), "--slots",
         std::to_string(slots), "--", self, "--worker", std::to_string(state_mb)},
        {}, log);
    if (!agent.ok() || !WaitForLine(log, "{\"address\"", milliseconds(60000))) {
      return fail("the agent of " + cluster.Name(k) + " did not register");
    }
  }
  auto run_in_host0 = [&](std::vector<std::string> args, std::chrono::seconds timeout) {
    args.insert(args.begin(), elastra);
    args.insert(args.end(), {"--state-dir", state});
    auto r = cluster.Run(0, args, timeout);
    return r.ok() ? *r : elastra::testing::RunResult{-1, r.status().ToString()};
  };
  bool running = false;
  for (int i = 0; i < 600 && !running; ++i) {
    auto st = JsonLine(run_in_host0({"status", "--json"}, std::chrono::seconds(30)).output);
    running = st.value("state", std::string()) == "running";
    if (!running) std::this_thread::sleep_for(milliseconds(100));
  }
  if (!running) return fail("the job did not start");
  auto resize = [&](int workers, Phases* phases) {
    auto r =
        run_in_host0({"resize", "--workers", std::to_string(workers), "--wait", "--timeout", "120"},
                     std::chrono::seconds(150));
    auto j = JsonLine(r.output);
    if (r.exit_code != 0 || j.value("phase", std::string()) != "done") {
      std::fprintf(stderr, "resize to %d across hosts failed: %s\n", workers, r.output.c_str());
      return false;
    }
    phases->downtime.push_back(j.value("downtime_ms", 0.0));
    phases->agreement.push_back(j.value("agreement_ms", 0.0));
    phases->rebuild.push_back(j.value("rebuild_ms", 0.0));
    phases->transfer.push_back(j.value("transfer_ms", 0.0));
    std::fprintf(stderr,
                 "across %d hosts, resize to %d: downtime %.1f ms (agreement %.1f, rebuild %.1f, "
                 "transfer %.1f)\n",
                 cluster.size(), workers, phases->downtime.back(), phases->agreement.back(),
                 phases->rebuild.back(), phases->transfer.back());
    return true;
  };
  for (int rep = 0; rep < reps; ++rep) {
    if (!resize(4, grow) || !resize(2, shrink)) return fail("a resize failed");
    std::this_thread::sleep_for(milliseconds(200));
  }
  // The cluster's owner kills the job with the hosts.
  std::filesystem::remove_all(dir);
  return true;
}

// Median raw Gloo figures over `reps` runs of `size` ranks (loopback, or placed on a cluster).
struct RawFigures {
  double connect_ms = 0, move_ms = 0, total_ms = 0;
};
RawFigures RunRawReps(const std::string& self, int size, size_t state_mb, int reps, bool tp,
                      const RawPlacement& placement, const std::string& where) {
  std::vector<double> connect, move, total;
  for (int rep = 0; rep < reps; ++rep) {
    RawResult r = RunRaw(self, size, state_mb, rep, placement);
    connect.push_back(r.connect_ms);
    move.push_back(r.broadcast_ms);
    total.push_back(r.connect_ms + r.broadcast_ms);
    std::fprintf(stderr, "raw gloo, %d ranks%s: connect %.1f ms, %s %.1f ms\n", size, where.c_str(),
                 r.connect_ms, tp ? "swap of halves" : "broadcast", r.broadcast_ms);
  }
  return {Median(connect), Median(move), Median(total)};
}

}  // namespace

int main(int argc, char** argv) {
  size_t state_mb = 64;
  int reps = 3;
  int hosts = 0;
  std::string change = "dp";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--worker" && i + 1 < argc) {
      return RunWorker(std::strtoull(argv[i + 1], nullptr, 10));
    }
    if (a == "--raw-rank" && i + 6 < argc) {
      return RunRawRank(argv[i + 1], argv[i + 2], std::atoi(argv[i + 3]), std::atoi(argv[i + 4]),
                        std::strtoull(argv[i + 5], nullptr, 10), argv[i + 6]);
    }
    if (a == "--sweep-rank" && i + 7 < argc) {
      return RunSweepRank(argv[i + 1], argv[i + 2], std::atoi(argv[i + 3]), std::atoi(argv[i + 4]),
                          std::atoi(argv[i + 5]), std::atoi(argv[i + 6]), std::atoi(argv[i + 7]));
    }
    if (a == "--workers-sweep") {
      int iters = 300, sweep_reps = 3, max_workers = 32;
      for (int j = i + 1; j + 1 < argc; j += 2) {
        if (std::string(argv[j]) == "--iters") iters = std::atoi(argv[j + 1]);
        if (std::string(argv[j]) == "--reps") sweep_reps = std::atoi(argv[j + 1]);
        if (std::string(argv[j]) == "--max-workers") max_workers = std::atoi(argv[j + 1]);
      }
      return RunWorkersSweep(std::filesystem::canonical("/proc/self/exe").string(),
                             std::max(1, iters), std::max(1, sweep_reps), max_workers);
    }
    if (a == "--state-mb" && i + 1 < argc) state_mb = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (a == "--change" && i + 1 < argc) change = argv[++i];
    if (a == "--hosts" && i + 1 < argc) hosts = std::atoi(argv[++i]);
  }
  if (change != "dp" && change != "tp") {
    std::fprintf(stderr, "bench_reconfig_dp: --change takes dp or tp\n");
    return 2;
  }
  const bool tp = change == "tp";
  if (hosts != 0 && (tp || hosts < 2 || hosts > 4)) {
    std::fprintf(stderr, "bench_reconfig_dp: --hosts takes 2 to 4, with --change dp\n");
    return 2;
  }
  const std::string self = std::filesystem::canonical("/proc/self/exe").string();

  // The cluster first: without namespaces there is nothing to compare, so say so before the
  // loopback run.
  std::unique_ptr<elastra::testing::NamespaceCluster> cluster;
  if (hosts > 0) {
    if (std::string why = elastra::testing::NamespaceCluster::Unavailable(); !why.empty()) {
      std::fprintf(stderr, "bench_reconfig_dp --hosts: no namespace cluster here: %s\n",
                   why.c_str());
      return 1;
    }
    auto made = elastra::testing::NamespaceCluster::Create(hosts);
    if (!made.ok()) {
      std::fprintf(stderr, "bench_reconfig_dp --hosts: %s\n", made.status().ToString().c_str());
      return 1;
    }
    cluster = std::move(made).value();
  }

  // dp: grow to 4 and shrink to 2. tp: to tp=2 and back to dp=2 (first, second).
  Phases grow, shrink;
  if (!RunLoopback(self, state_mb, reps, tp, &grow, &shrink)) return 1;
  const RawFigures raw = RunRawReps(self, tp ? 2 : 4, state_mb, reps, tp, RawPlacement{}, "");

  nlohmann::json out;
  out["bench"] = "reconfig_dp";
  out["state_mb"] = state_mb;
  out["reps"] = reps;
  // The two changes by name, and the one that moves the bytes (compared with raw).
  out["change"] = tp ? "dp=2 -> tp=2 (nothing moves) and tp=2 -> dp=2 (halves swapped)"
                     : "dp 2 -> 4 (grow) and 4 -> 2 (shrink)";
  out[tp ? "to_tp" : "grow"] = grow.Json();
  out[tp ? "to_dp" : "shrink"] = shrink.Json();
  const Phases& moving = tp ? shrink : grow;
  out["raw_gloo"] = {{"connect_ms", raw.connect_ms},
                     {tp ? "swap_ms" : "broadcast_ms", raw.move_ms},
                     {"total_ms", raw.total_ms}};
  out["rebuild_vs_raw"] = Median(moving.rebuild) / std::max(raw.connect_ms, 1e-9);
  out["downtime_vs_raw"] = Median(moving.downtime) / std::max(raw.total_ms, 1e-9);

  if (cluster != nullptr) {
    const int slots = (4 + hosts - 1) / hosts;
    Phases host_grow, host_shrink;
    if (!RunAcrossHosts(*cluster, self, state_mb, reps, slots, &host_grow, &host_shrink)) return 1;
    const RawFigures host_raw =
        RunRawReps(self, 4, state_mb, reps, tp, RawPlacement{cluster.get(), slots},
                   " across " + std::to_string(hosts) + " hosts");
    nlohmann::json h;
    h["count"] = hosts;
    h["slots_per_host"] = slots;
    nlohmann::json addresses = nlohmann::json::array();
    for (int k = 0; k < hosts; ++k) addresses.push_back(cluster->Address(k));
    h["addresses"] = addresses;
    h["grow"] = host_grow.Json();
    h["shrink"] = host_shrink.Json();
    h["raw_gloo"] = {{"connect_ms", host_raw.connect_ms},
                     {"broadcast_ms", host_raw.move_ms},
                     {"total_ms", host_raw.total_ms}};
    h["rebuild_vs_raw"] = Median(host_grow.rebuild) / std::max(host_raw.connect_ms, 1e-9);
    h["downtime_vs_raw"] = Median(host_grow.downtime) / std::max(host_raw.total_ms, 1e-9);
    h["grow_downtime_vs_loopback"] =
        Median(host_grow.downtime) / std::max(Median(grow.downtime), 1e-9);
    h["shrink_downtime_vs_loopback"] =
        Median(host_shrink.downtime) / std::max(Median(shrink.downtime), 1e-9);
    out["hosts"] = h;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
