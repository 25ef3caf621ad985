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

}  // namespace

int main(int argc, char** argv) {
  uint64_t bytes = 1ull << 30;
  int tensors = 16;
  int reps = 3;
  int load_threads = 4;
  int writer_nice = ck::WriterOptions{}.write_thread_nice;
  bool overlap = ck::WriterOptions{}.write_while_copying;
  std::string dir = "/tmp/elastra_bench_checkpoint_" + std::to_string(::getpid());
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string f = argv[i], v = argv[i + 1];
    if (f == "--bytes") bytes = std::strtoull(v.c_str(), nullptr, 10);
    else if (f == "--tensors") tensors = std::atoi(v.c_str());
    else if (f == "--reps") reps = std::atoi(v.c_str());
    else if (f == "--dir") dir = v;
    else if (f == "--load-threads") load_threads = std::atoi(v.c_str());
    else if (f == "--writer-nice") writer_nice = std::atoi(v.c_str());
    else if (f == "--overlap") overlap = std::atoi(v.c_str()) != 0;
    else Die("unknown flag " + f + " (flags: --bytes N --tensors T --reps R --dir DIR --load-threads N --writer-nice N --overlap 0|1)");
  }
  if (argc % 2 == 0) Die("every flag takes a value");
  const uint64_t block = 64ull << 20;
  if (tensors < 1 || reps < 1 || bytes < block || bytes % (block) != 0) {
    Die("--bytes must be a multiple of 64 MiB, --tensors and --reps at least 1");
  }
  const uint64_t per_tensor = bytes / tensors / 8 * 8;
  bytes = per_tensor * tensors;
  elastra::Env* env = elastra::Env::Default();
  if (!env->CreateDir(dir).ok()) Die("cannot create " + dir);
  const std::string root = elastra::JoinPath(dir, "ckpt");
  const std::string dd_file = elastra::JoinPath(dir, "dd.bin");

  // The training state: `tensors` float64 tensors, filled (so every page is real).
  std::vector<std::vector<double>> state(tensors, std::vector<double>(per_tensor / 8));
  for (int t = 0; t < tensors; ++t) {
    for (size_t i = 0; i < state[t].size(); ++i) state[t][i] = t * 1e9 + static_cast<double>(i);
  }
  ck::StateView view;
  std::vector<ck::RegionRequest> requests;
  for (int t = 0; t < tensors; ++t) {
    ck::TensorShard s;
    s.name = "layer" + std::to_string(t) + ".weight";
    s.shape = {static_cast<int64_t>(per_tensor / 8)};
    s.dtype = elastra::DataType::kFloat64;
    s.region = ck::Box::Whole(s.shape);
    s.data = {reinterpret_cast<const std::byte*>(state[t].data()), per_tensor};
    view.tensors.push_back(s);
    requests.push_back({s.name, {s.region}, s.shape, s.dtype});
  }
  view.scalars = {{"elastra.step", 0}, {"data.cursor", 0}};

  ck::WriterOptions wo;
  wo.root = root;
  wo.write_thread_nice = writer_nice;
  wo.write_while_copying = overlap;
  wo.reserve_bytes = bytes + ck::kShardHeaderBytes + tensors * ck::kRegionAlignment;
  auto writer = ck::CheckpointWriter::Create(wo);
  if (!writer.ok()) Die(writer.status().ToString());

  // dd's source: the state's bytes in tmpfs (memory), so dd writes exactly what we write.
  const std::string dd_source =
      (env->IsDirectory("/dev/shm") ? std::string("/dev/shm") : dir) + "/elastra_bench_src_" +
      std::to_string(::getpid());
  {
    auto f = env->NewWritableFile(dd_source);
    if (!f.ok()) Die(f.status().ToString());
    for (int t = 0; t < tensors; ++t) {
      if (!(*f)->Append({reinterpret_cast<const std::byte*>(state[t].data()), per_tensor}).ok()) {
        Die("cannot write " + dd_source);
      }
    }
    if (!(*f)->Close().ok()) Die("cannot write " + dd_source);
  }

  std::vector<double> dd_zero_s;
  std::vector<double> save_s, dd_write_s, load_s, load_fresh_s, dd_read_s, stall_s, memcpy_s;
  // What a load in place overwrites: a state of the same size, already in memory.
  std::vector<std::vector<double>> restored(tensors, std::vector<double>(per_tensor / 8, -1.0));
  std::vector<std::span<std::byte>> into;
  for (auto& t : restored) into.push_back({reinterpret_cast<std::byte*>(t.data()), per_tensor});
  // memcpy baseline: the same bytes into a destination that is already touched, as the
  // writer's reserved staging buffer is.
  // Memory of the same kind as the writer's staging image (huge pages where the kernel gives
  // them, common/host_memory.h): on the test VM a memcpy into 4 KiB pages that sat idle was up to
  // 8x slower than into huge pages, which would compare the pages, not the copies.
  elastra::HostBytes dst = elastra::NewHostBuffer(bytes);
  std::memset(dst.data(), 1, bytes);

  for (int r = 0; r < reps; ++r) {
    const int64_t step = r + 1;
    view.scalars[0].second = step;
    // The stall's reference right before it, in the same conditions: a memcpy of the same bytes
    // into a buffer already touched, as the writer's reserved staging buffer is. First the state
    // is read once, untimed, so that neither copy is the one that brings it back into memory
    // after the rest of the repetition (on the test VM idle pages cost up to 8x on their next
    // touch); dst and the staging image have both sat idle since the last repetition.
    double sum = 0;
    for (const auto& t : state) {
      for (size_t i = 0; i < t.size(); i += 512) sum += t[i];
    }
    if (sum < 0) Die("impossible");
    auto t2 = Clock::now();
    for (int t = 0; t < tensors; ++t) {
      std::memcpy(dst.data() + t * per_tensor, state[t].data(), per_tensor);
    }
    memcpy_s.push_back(Since(t2));
    // Save: the stall (Snapshot) + the background write + the commit, as seen by a caller that
    // waits for it.
    auto t0 = Clock::now();
    auto started = (*writer)->Snapshot({"bench", step, 1}, view);
    const double stall = Since(t0);
    if (!started.ok()) Die(started.status().ToString());
    auto desc = (*writer)->WaitForWrite();
    if (!desc.ok()) Die(desc.status().ToString());
    auto committed =
        ck::CommitCheckpoint({nullptr, root, 1}, {"bench", step, 1}, {}, {*desc});
    if (!committed.ok()) Die(committed.status().ToString());
    save_s.push_back(Since(t0));
    stall_s.push_back(stall);
    DropCacheDir(*committed);

    dd_zero_s.push_back(RunDd("dd if=/dev/zero of=" + dd_file + " bs=64M count=" +
                              std::to_string(bytes / block) + " oflag=direct conv=fsync"));
    DropCache(dd_file);
    dd_write_s.push_back(
        RunDd("dd if=" + dd_source + " of=" + dd_file + " bs=64M oflag=direct conv=fsync"));
    DropCache(dd_file);

    // Load: manifest, seek-and-read every region, verify every checksum; into place, then into
    // fresh buffers.
    DropCacheDir(*committed);
    auto t1 = Clock::now();
    auto in_place = ck::LoadLatestInto(env, root, requests, into, load_threads);
    load_s.push_back(Since(t1));
    if (!in_place.ok()) Die(in_place.status().ToString());
    for (int t = 0; t < tensors; ++t) {
      if (in_place->step != step || restored[t] != state[t]) {
        Die("the state loaded in place differs from the saved one");
      }
    }
    for (auto& t : restored) std::fill(t.begin(), t.end(), -1.0);
    DropCacheDir(*committed);
    auto t3 = Clock::now();
    auto loaded = ck::LoadLatest(env, root, requests, load_threads);
    load_fresh_s.push_back(Since(t3));
    if (!loaded.ok()) Die(loaded.status().ToString());
    if (loaded->step != step ||
        std::memcmp(loaded->regions.back().data(), state.back().data(), per_tensor) != 0) {
      Die("the loaded state differs from the saved one");
    }
    loaded = elastra::NotFoundError("released");

    DropCache(dd_file);
    dd_read_s.push_back(RunDd("dd if=" + dd_file + " of=/dev/null bs=64M"));

    std::fprintf(stderr,
                 "rep %d: save %.3f s (stall %.1f ms), dd write %.3f s (from /dev/zero %.3f s), "
                 "load %.3f s (fresh buffers %.3f s), dd read %.3f s, memcpy %.1f ms\n",
                 r, save_s.back(), stall * 1e3, dd_write_s.back(), dd_zero_s.back(), load_s.back(),
                 load_fresh_s.back(), dd_read_s.back(), memcpy_s.back() * 1e3);
  }
  writer->reset();
  env->RemoveFile(dd_source).IgnoreError();
  if (!env->RemoveFile(dd_file).ok()) std::fprintf(stderr, "could not remove %s\n", dd_file.c_str());
  std::error_code ec;
  auto list = ck::ListCheckpoints(env, root);
  if (list.ok()) {
    for (const auto& c : *list) env->RemoveDirRecursively(c.dir).IgnoreError();
  }
  env->RemoveDir(root).IgnoreError();
  env->RemoveDir(dir).IgnoreError();

  const double gib = static_cast<double>(bytes) / (1ull << 30);
  const double save = Median(save_s), ddw = Median(dd_write_s), load = Median(load_s),
               ddr = Median(dd_read_s), stall = Median(stall_s), mc = Median(memcpy_s);
  nlohmann::ordered_json out;
  out["bench"] = "checkpoint";
  out["bytes"] = bytes;
  out["tensors"] = tensors;
  out["reps"] = reps;
  out["dir"] = dir;
  out["cache"] = "writes O_DIRECT+fsync for both, reads after posix_fadvise(DONTNEED) for both";
  out["dd_source"] = "the same bytes, from tmpfs";
  out["save_gib_s"] = gib / save;
  out["dd_write_gib_s"] = gib / ddw;
  out["dd_zero_write_gib_s"] = gib / Median(dd_zero_s);
  out["load_gib_s"] = gib / load;
  out["load_fresh_gib_s"] = gib / Median(load_fresh_s);
  out["dd_read_gib_s"] = gib / ddr;
  out["stall_ms"] = stall * 1e3;
  out["memcpy_ms"] = mc * 1e3;
  out["save_vs_dd"] = ddw / save;
  out["load_vs_dd"] = ddr / load;
  out["load_fresh_vs_dd"] = ddr / Median(load_fresh_s);
  out["stall_vs_memcpy"] = stall / mc;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
