// bench_gpt: what Elastra costs a LibTorch GPT (examples/gpt), beside references measured in the
// same run.
//
// 1. Step time at dp=1: the elastic loop (`elastra run --nproc 1` with this binary as the worker:
//    the model's step over views of the worker's shards, then StepEnd with its agreement and an
//    in-memory commit every 10 steps) against the same model trained by plain LibTorch in this
//    process (its own tensors, no Worker). Plain runs before and after the elastic run and the
//    two are pooled. overhead_vs_plain is the ratio of the mean CPU time of a step (every thread
//    of the process, commits and the worker's own threads included) after --warmup steps, which
//    another program's load on the machine does not change; overhead_wall_vs_plain is the same
//    for wall-clock time.
// 2. A dp -> tp change: the job at one worker (dp=1) grows to two as tp=2; the new worker takes
//    its tp half of the split weights, master weights and moments, and all the replicated ones.
//    The coordinator's downtime (first worker paused -> last worker ready) is compared with raw
//    Gloo moving the same bytes: two fresh processes that connect a gloo context over a FileStore
//    and send those bytes from one to the other over unbound buffers (the median of --reps).
//
//   bench_gpt [--steps 60] [--warmup 10] [--layers 2] [--hidden 64] [--heads 4] [--seq-len 64]
//             [--global-batch 16] [--reps 3]
//
// Prints one JSON line at the end with overhead_vs_plain and downtime_vs_raw.
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "elastra/worker.h"
#include "examples/gpt/gpt_data.h"
#include "examples/gpt/gpt_model.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
// CPU seconds of this process (every thread), in milliseconds: what the step costs, whatever
// else the machine runs meanwhile.
double CpuMs(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec t;
  clock_gettime(clock, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
// The same for the calling (training) thread alone.
double ThreadCpuMs() { return CpuMs(CLOCK_THREAD_CPUTIME_ID); }

struct StepTimes {
  std::vector<double> wall, cpu, thread;
  void Add(const StepTimes& o) {
    wall.insert(wall.end(), o.wall.begin(), o.wall.end());
    cpu.insert(cpu.end(), o.cpu.begin(), o.cpu.end());
    thread.insert(thread.end(), o.thread.begin(), o.thread.end());
  }
};

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Args {
  gpt::ModelConfig model;
  int steps = 60, warmup = 10, reps = 3;
  std::vector<std::string> Model() const {
    return {"--layers",       std::to_string(model.layers),
            "--hidden",       std::to_string(model.hidden),
            "--heads",        std::to_string(model.heads),
            "--seq-len",      std::to_string(model.seq_len),
            "--global-batch", std::to_string(model.global_batch)};
  }
};

Args Parse(int argc, char** argv, int first) {
  Args a;
  a.model.hidden = 64;
  a.model.seq_len = 64;
  for (int i = first; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    if (k == "--steps")
      a.steps = v;
    else if (k == "--warmup")
      a.warmup = v;
    else if (k == "--reps")
      a.reps = v;
    else if (k == "--layers")
      a.model.layers = v;
    else if (k == "--hidden")
      a.model.hidden = v;
    else if (k == "--heads")
      a.model.heads = v;
    else if (k == "--seq-len")
      a.model.seq_len = v;
    else if (k == "--global-batch")
      a.model.global_batch = v;
    else {
      std::fprintf(stderr, "bench_gpt: unknown flag %s\n", k.c_str());
      std::exit(2);
    }
  }
  return a;
}

// Worker mode (under elastra run): the elastic loop; rank 0 appends each step's milliseconds to
// `times`. Runs `steps` steps, or until `stop` exists when steps is 0.
int RunWorker(const std::string& times, const std::string& stop, const Args& args) {
  auto corpus = gpt::Corpus::Load(gpt::kDefaultText, args.model.seq_len, args.model.seed);
  auto options = elastra::WorkerOptions::FromEnvironment();
  if (!corpus.ok() || !options.ok()) return 2;
  auto worker = elastra::Worker::Create(*options);
  if (!worker.ok()) return 1;
  auto& w = **worker;
  auto trainer = gpt::GptTrainer::Create(args.model, &*corpus, &w.state());
  if (!trainer.ok() || !w.Start().ok() || !(*trainer)->Bind(w.step()).ok()) return 1;
  std::ofstream out(times, std::ios::app);
  while (args.steps == 0 || w.step() < args.steps) {
    if (args.steps == 0) {
      int64_t seen = fs::exists(stop) ? 1 : 0;
      if (!w.world().Allreduce(&seen, 1, elastra::DataType::kInt64, elastra::ReduceOp::kMax).ok()) {
        return 1;
      }
      if (seen) break;
    }
    const auto t0 = Clock::now();
    const double c0 = CpuMs(), t0_thread = ThreadCpuMs();
    gpt::Placement at;
    at.layout = w.layout();
    at.coords = w.coordinates();
    at.dp = &w.dp_group();
    at.pp = &w.pp_group();
    at.tp = &w.tp_group();
    at.world = &w.world();
    double loss = 0;
    const elastra::Status s = (*trainer)->Step(at, &loss);
    auto action = w.StepEnd(s);
    if (!action.ok()) return 1;
    if (*action == elastra::StepAction::kLeave) return 0;
    if (*action == elastra::StepAction::kReconfigured && !(*trainer)->Bind(w.step()).ok()) return 1;
    if (w.rank() == 0)
      out << Ms(t0, Clock::now()) << " " << CpuMs() - c0 << " " << ThreadCpuMs() - t0_thread << "\n"
          << std::flush;
  }
  w.Finish();
  return 0;
}

StepTimes PlainSteps(const Args& args) {
  auto corpus = gpt::Corpus::Load(gpt::kDefaultText, args.model.seq_len, args.model.seed);
  auto trainer = gpt::GptTrainer::Create(args.model, &*corpus, nullptr);
  StepTimes times;
  gpt::Placement at;
  for (int s = 0; s < args.steps; ++s) {
    const auto t0 = Clock::now();
    const double c0 = CpuMs(), t0_thread = ThreadCpuMs();
    double loss = 0;
    if (!(*trainer)->Step(at, &loss).ok()) std::exit(1);
    if (s >= args.warmup) {
      times.wall.push_back(Ms(t0, Clock::now()));
      times.cpu.push_back(CpuMs() - c0);
      times.thread.push_back(ThreadCpuMs() - t0_thread);
    }
  }
  return times;
}

std::string Run(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

StepTimes ReadTimes(const std::string& path, int skip) {
  std::ifstream in(path);
  StepTimes t;
  double wall, cpu, thread;
  for (int i = 0; in >> wall >> cpu >> thread; ++i) {
    if (i < skip) continue;
    t.wall.push_back(wall);
    t.cpu.push_back(cpu);
    t.thread.push_back(thread);
  }
  return t;
}

// Raw Gloo: rank `rank` of 2 connects over a FileStore and rank 0 sends `bytes` to rank 1, which
// writes the milliseconds from before the connect to the end of the receive.
int RunRawRank(const std::string& dir, int rank, size_t bytes) {
  std::vector<char> data(bytes, rank == 0 ? 1 : 0);
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(dir);
  gloo::rendezvous::PrefixStore store("raw", file_store);
  // Both processes past their start (loading LibTorch takes seconds here) before the clock runs.
  std::ofstream(dir + "/ready" + std::to_string(rank)) << "1";
  while (!fs::exists(dir + "/ready" + std::to_string(1 - rank))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const auto t0 = Clock::now();
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
  context->setTimeout(std::chrono::milliseconds(60000));
  context->connectFullMesh(store, device);
  auto buf = context->createUnboundBuffer(data.data(), data.size());
  if (rank == 0) {
    buf->send(1, 0);
    buf->waitSend();
  } else {
    buf->recv(0, 0);
    buf->waitRecv();
    std::ofstream(dir + "/ms") << Ms(t0, Clock::now());
  }
  return rank == 1 && data.back() != 1 ? 1 : 0;
}

double RawMove(const std::string& self, size_t bytes) {
  char tmpl[] = "/tmp/elastra_bench_gpt_raw_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self.c_str(), self.c_str(), "--raw-rank", dir.c_str(), std::to_string(r).c_str(),
            std::to_string(bytes).c_str(), nullptr);
      _exit(127);
    }
    pids.push_back(pid);
  }
  for (pid_t p : pids) waitpid(p, nullptr, 0);
  double ms = 0;
  std::ifstream(dir + "/ms") >> ms;
  fs::remove_all(dir);
  return ms;
}

// The bytes a worker joining as tp rank 1 of (1, 1, 2) receives: its shard of every tensor.
size_t JoinerBytes(const Args& args) {
  auto corpus = gpt::Corpus::Load(gpt::kDefaultText, args.model.seq_len, args.model.seed);
  elastra::TensorCollection state;
  auto trainer = gpt::GptTrainer::Create(args.model, &*corpus, &state);
  if (!trainer.ok()) std::exit(1);
  const elastra::StateSpec spec = state.Spec();
  const elastra::Layout to{1, 1, 2};
  size_t bytes = 0;
  for (const auto& t : spec.tensors) {
    bytes +=
        elastra::LocalRegion(t, spec.num_layers, to, elastra::CoordinatesOf(to, 1)).elements() *
        t.element_size;
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string self = fs::canonical("/proc/self/exe").string();
  if (argc >= 5 && std::string(argv[1]) == "--raw-rank") {
    return RunRawRank(argv[2], std::atoi(argv[3]), std::strtoull(argv[4], nullptr, 10));
  }
  if (argc >= 4 && std::string(argv[1]) == "--worker") {
    return RunWorker(argv[2], argv[3], Parse(argc, argv, 4));
  }
  const Args args = Parse(argc, argv, 1);
  char tmpl[] = "/tmp/elastra_bench_gpt_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::string model;
  for (const auto& a : args.Model()) model += " " + a;

  // 1. Step time: plain, elastic, plain.
  StepTimes plain = PlainSteps(args);
  const std::string times = dir + "/elastic.txt";
  Run(std::string(ELASTRA_BINARY) + " run --nproc 1 --state-dir " + dir + "/s1 -- " + self +
      " --worker " + times + " " + dir + "/none --steps " + std::to_string(args.steps) + model);
  const StepTimes elastic = ReadTimes(times, args.warmup);
  plain.Add(PlainSteps(args));
  if (elastic.cpu.empty()) {
    std::fprintf(stderr, "bench_gpt: the elastic run logged no step\n");
    return 1;
  }
  std::fprintf(stderr,
               "step CPU: plain mean %.2f ms (median %.2f), elastic mean %.2f ms (median %.2f); "
               "wall: plain %.2f ms, elastic %.2f ms\n",
               Mean(plain.cpu), Median(plain.cpu), Mean(elastic.cpu), Median(elastic.cpu),
               Mean(plain.wall), Mean(elastic.wall));

  // 2. dp=1 -> tp=2 against raw Gloo moving the joiner's bytes.
  const std::string state_dir = dir + "/s2", stop = dir + "/stop";
  const std::string launch = std::string(ELASTRA_BINARY) + " run --nproc 1 --max-workers 2 " +
                             "--state-dir " + state_dir + " -- " + self + " --worker " + dir +
                             "/grow.txt " + stop + " --steps 0" + model;
  std::thread job([&] { Run(launch); });
  // Wait for a few steps, then resize.
  for (int i = 0; i < 600 && ReadTimes(dir + "/grow.txt", 0).cpu.size() < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const std::string resize = Run(std::string(ELASTRA_BINARY) + " resize --state-dir " + state_dir +
                                 " --workers 2 --layout dp=1,pp=1,tp=2 --wait --timeout 120");
  std::ofstream(stop) << "stop\n";
  job.join();
  auto r = nlohmann::json::parse(resize, nullptr, false);
  if (r.is_discarded() || !r.contains("downtime_ms")) {
    std::fprintf(stderr, "bench_gpt: resize failed: %s\n", resize.c_str());
    return 1;
  }
  const size_t bytes = JoinerBytes(args);
  std::vector<double> raw;
  for (int i = 0; i < args.reps; ++i) raw.push_back(RawMove(self, bytes));
  const double downtime = r["downtime_ms"].get<double>();
  std::fprintf(stderr,
               "dp=1 -> tp=2: downtime %.1f ms (transfer %.1f, rebuild %.1f); raw gloo "
               "connect + %zu bytes: %.1f ms\n",
               downtime, r.value("transfer_ms", 0.0), r.value("rebuild_ms", 0.0), bytes,
               Median(raw));
  fs::remove_all(dir);

  nlohmann::json out = {
      {"bench", "gpt"},
      {"model",
       {{"layers", args.model.layers},
        {"hidden", args.model.hidden},
        {"heads", args.model.heads},
        {"seq_len", args.model.seq_len},
        {"global_batch", args.model.global_batch}}},
      {"steps_timed", elastic.cpu.size()},
      {"plain_step_cpu_ms", Mean(plain.cpu)},
      {"elastic_step_cpu_ms", Mean(elastic.cpu)},
      {"plain_step_wall_ms", Mean(plain.wall)},
      {"elastic_step_wall_ms", Mean(elastic.wall)},
      {"overhead_vs_plain", Mean(elastic.cpu) / Mean(plain.cpu)},
      {"overhead_wall_vs_plain", Mean(elastic.wall) / Mean(plain.wall)},
      {"overhead_training_thread_vs_plain", Mean(elastic.thread) / Mean(plain.thread)},
      {"dp_to_tp",
       {{"change", "dp=1 -> dp=1,tp=2"},
        {"bytes_to_joiner", bytes},
        {"downtime_ms", downtime},
        {"transfer_ms", r.value("transfer_ms", 0.0)},
        {"rebuild_ms", r.value("rebuild_ms", 0.0)},
        {"raw_gloo_ms", Median(raw)}}},
      {"downtime_vs_raw", downtime / Median(raw)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
