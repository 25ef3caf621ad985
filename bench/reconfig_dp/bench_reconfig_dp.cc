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
// Prints one JSON line at the end: ... "rebuild_vs_raw": x, "downtime_vs_raw": y (for --change
// tp: of the change back to dp=2, which moves the bytes).
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
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/control_client.h"
#include "common/keys.h"
#include "elastra/worker.h"

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
  if (!w->state().AddTensor("blob", {static_cast<int64_t>(state_mb << 18)},
                            elastra::DataType::kFloat32, elastra::SplitOverTp(0)).ok()) {
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
               size_t state_mb) {
  std::vector<float> data(state_mb << 18, rank == 0 ? 1.0f : 0.0f);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
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

RawResult RunRaw(const std::string& self, int size, size_t state_mb, int rep) {
  char tmpl[] = "/tmp/elastra_bench_raw_XXXXXX";
  std::string dir = mkdtemp(tmpl);
  std::string prefix = "rep" + std::to_string(rep);
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self.c_str(), self.c_str(), "--raw-rank", dir.c_str(), prefix.c_str(),
            std::to_string(r).c_str(), std::to_string(size).c_str(),
            std::to_string(state_mb).c_str(), nullptr);
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

}  // namespace

int main(int argc, char** argv) {
  size_t state_mb = 64;
  int reps = 3;
  std::string change = "dp";
  std::string self = argv[0];
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--worker" && i + 2 < argc + 1) {
      return RunWorker(std::strtoull(argv[i + 1], nullptr, 10));
    }
    if (a == "--raw-rank" && i + 5 < argc) {
      return RunRawRank(argv[i + 1], argv[i + 2], std::atoi(argv[i + 3]), std::atoi(argv[i + 4]),
                        std::strtoull(argv[i + 5], nullptr, 10));
    }
    if (a == "--state-mb" && i + 1 < argc) state_mb = std::strtoull(argv[++i], nullptr, 10);
    if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    if (a == "--change" && i + 1 < argc) change = argv[++i];
  }
  if (change != "dp" && change != "tp") {
    std::fprintf(stderr, "bench_reconfig_dp: --change takes dp or tp\n");
    return 2;
  }
  const bool tp = change == "tp";
  if (self.find('/') == std::string::npos) self = "/proc/self/exe";
  self = std::filesystem::canonical("/proc/self/exe").string();

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
    return 1;
  }
  // dp: grow to 4 and shrink to 2. tp: to tp=2 and back to dp=2 (first, second).
  Phases grow, shrink;
  const elastra::Layout to_tp{1, 1, 2}, to_dp{2, 1, 1};
  for (int rep = 0; rep < reps; ++rep) {
    const bool ok =
        tp ? Resize(admin.get(), 2, &grow, &to_tp) && Resize(admin.get(), 2, &shrink, &to_dp)
           : Resize(admin.get(), 4, &grow) && Resize(admin.get(), 2, &shrink);
    if (!ok) {
      std::fprintf(stderr, "bench_reconfig_dp: resize failed (see %s/launcher.log)\n", dir.c_str());
      kill_launcher();
      return 1;
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  admin->Close();
  kill_launcher();

  std::vector<double> raw_connect, raw_total, raw_bcast;
  for (int rep = 0; rep < reps; ++rep) {
    RawResult r = RunRaw(self, tp ? 2 : 4, state_mb, rep);
    raw_connect.push_back(r.connect_ms);
    raw_bcast.push_back(r.broadcast_ms);
    raw_total.push_back(r.connect_ms + r.broadcast_ms);
    std::fprintf(stderr, "raw gloo, %d ranks: connect %.1f ms, %s %.1f ms\n", tp ? 2 : 4,
                 r.connect_ms, tp ? "swap of halves" : "broadcast", r.broadcast_ms);
  }
  std::filesystem::remove_all(dir);

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
  out["raw_gloo"] = {{"connect_ms", Median(raw_connect)},
                     {tp ? "swap_ms" : "broadcast_ms", Median(raw_bcast)},
                     {"total_ms", Median(raw_total)}};
  out["rebuild_vs_raw"] = Median(moving.rebuild) / std::max(Median(raw_connect), 1e-9);
  out["downtime_vs_raw"] = Median(moving.downtime) / std::max(Median(raw_total), 1e-9);
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
