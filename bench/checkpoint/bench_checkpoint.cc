// bench_checkpoint: save and load throughput of a checkpoint beside dd writing and reading the
// same bytes in the same directory, and the training stall of an asynchronous checkpoint (the
// Snapshot() call) beside a plain memcpy of the same bytes. Ends with one JSON line.
//
// dd writes the same bytes as the checkpoint (copied from a tmpfs file holding the state), not
// /dev/zero: on thin-provisioned or compressing storage zeros are written and read far faster
// than real data, which would compare different work. A dd from /dev/zero is reported beside it.
//
// Page cache, the same way for both sides: writes bypass it (O_DIRECT: our writer's default,
// dd oflag=direct) and end with fsync (dd conv=fsync); reads go through it after its pages for
// the file were dropped (fdatasync, then posix_fadvise(DONTNEED)) for both.
//
// Two loads: into place (LoadLatestInto, into buffers that already hold a state of this size, as
// a worker restoring its collection does; dd too reads into a buffer it reuses), which is
// load_vs_dd; and into fresh buffers (LoadLatest, which allocates the 1 GiB it returns and pays
// for its first touch), which is load_fresh_vs_dd.
//
//   bench_checkpoint [--bytes N] [--tensors T] [--reps R] [--dir DIR] [--load-threads N (4)] [--writer-nice N (0)] [--overlap 0|1 (0)]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/env.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "common/host_memory.h"

namespace ck = elastra::checkpoint;
using Clock = std::chrono::steady_clock;

namespace {

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bench_checkpoint: %s\n", what.c_str());
  std::exit(1);
}

void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  ::fdatasync(fd);
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) Die("posix_fadvise " + path);
  ::close(fd);
}

void DropCacheDir(const std::string& dir) {
  auto names = elastra::Env::Default()->GetChildren(dir);
  if (!names.ok()) Die(names.status().ToString());
  for (const std::string& n : *names) DropCache(elastra::JoinPath(dir, n));
}

double RunDd(const std::string& cmd) {
  auto t = Clock::now();
  if (std::system((cmd + " 2>/dev/null").c_str()) != 0) Die("failed: " + cmd);
  return Since(t);
}

constexpr uint64_t kBlock = 64ull << 20;

struct Flags {
  uint64_t bytes = 1ull << 30;
  int tensors = 16;
  int reps = 3;
  int load_threads = 4;
  int writer_nice = ck::WriterOptions{}.write_thread_nice;
  bool overlap = ck::WriterOptions{}.write_while_copying;
  std::string dir = "/tmp/elastra_bench_checkpoint_" + std::to_string(::getpid());
};

// Reads the flags; dies on a flag it does not know or a bad value.
Flags ParseFlags(int argc, char** argv) {
  Flags fl;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--bytes") fl.bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (f == "--tensors") fl.tensors = std::atoi(v.c_str());
    else if (f == "--reps") fl.reps = std::atoi(v.c_str());
    else if (f == "--dir") fl.dir = v;
    else if (f == "--load-threads") fl.load_threads = std::atoi(v.c_str());
    else if (f == "--writer-nice") fl.writer_nice = std::atoi(v.c_str());
    else if (f == "--overlap") fl.overlap = std::atoi(v.c_str()) != 0;
    else Die("unknown flag " + f + " (flags: --bytes N --tensors T --reps R --dir DIR --load-threads N --writer-nice N --overlap 0|1)");
  }
  if (argc % 2 == 0) Die("every flag takes a value");
  if (fl.tensors < 1 || fl.reps < 1 || fl.bytes < kBlock || fl.bytes % (kBlock) != 0) {
    Die("--bytes must be a multiple of 64 MiB, --tensors and --reps at least 1");
  }
  return fl;
}

// What every repetition works on: the training state, the checkpoint writer, dd's files, and the
// buffers the loads and the memcpy go into.
struct Bench {
  Flags flags;
  uint64_t per_tensor = 0;
  uint64_t bytes = 0;  // flags.bytes, rounded down to whole float64 tensors
  elastra::Env* env = nullptr;
  std::string root, dd_file, dd_source;
  std::vector<std::vector<double>> state;
  ck::StateView view;
  std::vector<ck::RegionRequest> requests;
  std::unique_ptr<ck::CheckpointWriter> writer;
  std::vector<std::vector<double>> restored;
  std::vector<std::span<std::byte>> into;
  elastra::HostBytes dst;
};

// The medians' inputs: one entry per repetition.
struct Timings {
  std::vector<double> dd_zero_s;
  std::vector<double> save_s, dd_write_s, load_s, load_fresh_s, dd_read_s, stall_s, memcpy_s;
};

// The training state: `tensors` float64 tensors, filled (so every page is real), and the view the
// writer saves and the requests the loads ask for.
void MakeState(Bench* b) {
  const int tensors = b->flags.tensors;
  const uint64_t per_tensor = b->per_tensor;
  b->state.assign(tensors, std::vector<double>(per_tensor / 8));
  for (int t = 0; t < tensors; ++t) {
    for (size_t i = 0; i < b->state[t].size(); ++i) {
      b->state[t][i] = t * 1e9 + static_cast<double>(i);
    }
  }
  for (int t = 0; t < tensors; ++t) {
    ck::TensorShard s;
    s.name = "layer" + std::to_string(t) + ".weight";
    s.shape = {static_cast<int64_t>(per_tensor / 8)};
    s.dtype = elastra::DataType::kFloat64;
    s.region = ck::Box::Whole(s.shape);
    s.data = {reinterpret_cast<const std::byte*>(b->state[t].data()), per_tensor};
    b->view.tensors.push_back(s);
    b->requests.push_back({s.name, {s.region}, s.shape, s.dtype});
  }
  b->view.scalars = {{"elastra.step", 0}, {"data.cursor", 0}};
}

void CreateWriter(Bench* b) {
  ck::WriterOptions wo;
  wo.root = b->root;
  wo.write_thread_nice = b->flags.writer_nice;
  wo.write_while_copying = b->flags.overlap;
  wo.reserve_bytes = b->bytes + ck::kShardHeaderBytes + b->flags.tensors * ck::kRegionAlignment;
  auto writer = ck::CheckpointWriter::Create(wo);
  if (!writer.ok()) Die(writer.status().ToString());
  b->writer = std::move(*writer);
}

// dd's source: the state's bytes in tmpfs (memory), so dd writes exactly what we write.
void WriteDdSource(Bench* b) {
  b->dd_source = (b->env->IsDirectory("/dev/shm") ? std::string("/dev/shm") : b->flags.dir) +
                 "/elastra_bench_src_" + std::to_string(::getpid());
  auto f = b->env->NewWritableFile(b->dd_source);
  if (!f.ok()) Die(f.status().ToString());
  for (const auto& t : b->state) {
    if (!(*f)->Append({reinterpret_cast<const std::byte*>(t.data()), b->per_tensor}).ok()) {
      Die("cannot write " + b->dd_source);
    }
  }
  if (!(*f)->Close().ok()) Die("cannot write " + b->dd_source);
}

void MakeTargets(Bench* b) {
  // What a load in place overwrites: a state of the same size, already in memory.
  b->restored.assign(b->flags.tensors, std::vector<double>(b->per_tensor / 8, -1.0));
  for (auto& t : b->restored) {
    b->into.push_back({reinterpret_cast<std::byte*>(t.data()), b->per_tensor});
  }
  // memcpy baseline: the same bytes into a destination that is already touched, as the
  // writer's reserved staging buffer is.
  // Memory of the same kind as the writer's staging image (huge pages where the kernel gives
  // them, common/host_memory.h): on the test VM a memcpy into 4 KiB pages that sat idle was up to
  // 8x slower than into huge pages, which would compare the pages, not the copies.
  b->dst = elastra::NewHostBuffer(b->bytes);
  std::memset(b->dst.data(), 1, b->bytes);
}

// Everything the repetitions need, in the order it was always set up.
void SetUp(Bench* b) {
  const Flags& fl = b->flags;
  b->per_tensor = fl.bytes / fl.tensors / 8 * 8;
  b->bytes = b->per_tensor * fl.tensors;
  b->env = elastra::Env::Default();
  if (!b->env->CreateDir(fl.dir).ok()) Die("cannot create " + fl.dir);
  b->root = elastra::JoinPath(fl.dir, "ckpt");
  b->dd_file = elastra::JoinPath(fl.dir, "dd.bin");
  MakeState(b);
  CreateWriter(b);
  WriteDdSource(b);
  MakeTargets(b);
}

// The stall's reference right before it, in the same conditions: a memcpy of the same bytes
// into a buffer already touched, as the writer's reserved staging buffer is. First the state
// is read once, untimed, so that neither copy is the one that brings it back into memory
// after the rest of the repetition (on the test VM idle pages cost up to 8x on their next
// touch); dst and the staging image have both sat idle since the last repetition.
double TimeMemcpy(Bench* b) {
  double sum = 0;
  for (const auto& t : b->state) {
    for (size_t i = 0; i < t.size(); i += 512) sum += t[i];
  }
  if (sum < 0) Die("impossible");
  auto t2 = Clock::now();
  for (int t = 0; t < b->flags.tensors; ++t) {
    std::memcpy(b->dst.data() + t * b->per_tensor, b->state[t].data(), b->per_tensor);
  }
  return Since(t2);
}

// Save: the stall (Snapshot) + the background write + the commit, as seen by a caller that
// waits for it. Returns the committed checkpoint's directory.
std::string TimeSave(Bench* b, int64_t step, Timings* tm) {
  auto t0 = Clock::now();
  auto started = b->writer->Snapshot({"bench", step, 1}, b->view);
  const double stall = Since(t0);
  if (!started.ok()) Die(started.status().ToString());
  auto desc = b->writer->WaitForWrite();
  if (!desc.ok()) Die(desc.status().ToString());
  auto committed =
      ck::CommitCheckpoint({nullptr, b->root, 1}, {"bench", step, 1}, {}, {*desc});
  if (!committed.ok()) Die(committed.status().ToString());
  tm->save_s.push_back(Since(t0));
  tm->stall_s.push_back(stall);
  return *committed;
}

void TimeDdWrites(Bench* b, Timings* tm) {
  tm->dd_zero_s.push_back(RunDd("dd if=/dev/zero of=" + b->dd_file + " bs=64M count=" +
                                std::to_string(b->bytes / kBlock) + " oflag=direct conv=fsync"));
  DropCache(b->dd_file);
  tm->dd_write_s.push_back(
      RunDd("dd if=" + b->dd_source + " of=" + b->dd_file + " bs=64M oflag=direct conv=fsync"));
  DropCache(b->dd_file);
}

// Load: manifest, seek-and-read every region, verify every checksum; into place, then into
// fresh buffers (released on return, before dd reads).
void TimeLoads(Bench* b, int64_t step, const std::string& committed, Timings* tm) {
  const int load_threads = b->flags.load_threads;
  DropCacheDir(committed);
  auto t1 = Clock::now();
  auto in_place = ck::LoadLatestInto(b->env, b->root, b->requests, b->into, load_threads);
  tm->load_s.push_back(Since(t1));
  if (!in_place.ok()) Die(in_place.status().ToString());
  for (int t = 0; t < b->flags.tensors; ++t) {
    if (in_place->step != step || b->restored[t] != b->state[t]) {
      Die("the state loaded in place differs from the saved one");
    }
  }
  for (auto& t : b->restored) std::fill(t.begin(), t.end(), -1.0);
  DropCacheDir(committed);
  auto t3 = Clock::now();
  auto loaded = ck::LoadLatest(b->env, b->root, b->requests, load_threads);
  tm->load_fresh_s.push_back(Since(t3));
  if (!loaded.ok()) Die(loaded.status().ToString());
  if (loaded->step != step ||
      std::memcmp(loaded->regions.back().data(), b->state.back().data(), b->per_tensor) != 0) {
    Die("the loaded state differs from the saved one");
  }
  loaded = elastra::NotFoundError("released");
}

void RunRep(Bench* b, int r, Timings* tm) {
  const int64_t step = r + 1;
  b->view.scalars[0].second = step;
  tm->memcpy_s.push_back(TimeMemcpy(b));
  const std::string committed = TimeSave(b, step, tm);
  DropCacheDir(committed);

  TimeDdWrites(b, tm);
  TimeLoads(b, step, committed, tm);

  DropCache(b->dd_file);
  tm->dd_read_s.push_back(RunDd("dd if=" + b->dd_file + " of=/dev/null bs=64M"));

  std::fprintf(stderr,
               "rep %d: save %.3f s (stall %.1f ms), dd write %.3f s (from /dev/zero %.3f s), "
               "load %.3f s (fresh buffers %.3f s), dd read %.3f s, memcpy %.1f ms\n",
               r, tm->save_s.back(), tm->stall_s.back() * 1e3, tm->dd_write_s.back(),
               tm->dd_zero_s.back(), tm->load_s.back(), tm->load_fresh_s.back(),
               tm->dd_read_s.back(), tm->memcpy_s.back() * 1e3);
}

void CleanUp(Bench* b) {
  b->writer.reset();
  elastra::Env* env = b->env;
  env->RemoveFile(b->dd_source).IgnoreError();
  if (!env->RemoveFile(b->dd_file).ok()) {
    std::fprintf(stderr, "could not remove %s\n", b->dd_file.c_str());
  }
  auto list = ck::ListCheckpoints(env, b->root);
  if (list.ok()) {
    for (const auto& c : *list) env->RemoveDirRecursively(c.dir).IgnoreError();
  }
  env->RemoveDir(b->root).IgnoreError();
  env->RemoveDir(b->flags.dir).IgnoreError();
}

void PrintJson(const Bench& b, const Timings& tm) {
  const double gib = static_cast<double>(b.bytes) / (1ull << 30);
  const double save = Median(tm.save_s), ddw = Median(tm.dd_write_s), load = Median(tm.load_s),
               ddr = Median(tm.dd_read_s), stall = Median(tm.stall_s), mc = Median(tm.memcpy_s);
  nlohmann::ordered_json out;
  out["bench"] = "checkpoint";
  out["bytes"] = b.bytes;
  out["tensors"] = b.flags.tensors;
  out["reps"] = b.flags.reps;
  out["dir"] = b.flags.dir;
  out["cache"] = "writes O_DIRECT+fsync for both, reads after posix_fadvise(DONTNEED) for both";
  out["dd_source"] = "the same bytes, from tmpfs";
  out["save_gib_s"] = gib / save;
  out["dd_write_gib_s"] = gib / ddw;
  out["dd_zero_write_gib_s"] = gib / Median(tm.dd_zero_s);
  out["load_gib_s"] = gib / load;
  out["load_fresh_gib_s"] = gib / Median(tm.load_fresh_s);
  out["dd_read_gib_s"] = gib / ddr;
  out["stall_ms"] = stall * 1e3;
  out["memcpy_ms"] = mc * 1e3;
  out["save_vs_dd"] = ddw / save;
  out["load_vs_dd"] = ddr / load;
  out["load_fresh_vs_dd"] = ddr / Median(tm.load_fresh_s);
  out["stall_vs_memcpy"] = stall / mc;
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Bench b;
  b.flags = ParseFlags(argc, argv);
  SetUp(&b);
  Timings tm;
  for (int r = 0; r < b.flags.reps; ++r) RunRep(&b, r, &tm);
  CleanUp(&b);
  PrintJson(b, tm);
  return 0;
}
