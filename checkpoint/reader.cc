#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/logging.h"

namespace elastra::checkpoint {
namespace {

// Region bytes read (and verified) per pread.
constexpr uint64_t kReadBlockBytes = 64ull << 20;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// Row-major element index of `idx` inside box `b`.
uint64_t LinearIndex(const Box& b, const std::vector<int64_t>& idx) {
  uint64_t lin = 0;
  for (size_t d = 0; d < idx.size(); ++d) {
    lin = lin * static_cast<uint64_t>(b.end[d] - b.begin[d]) +
          static_cast<uint64_t>(idx[d] - b.begin[d]);
  }
  return lin;
}

StatusOr<Manifest> ReadManifest(Env* env, const std::string& dir) {
  const std::string path = JoinPath(dir, kManifestName);
  auto file = env->NewRandomAccessFile(path);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kNotFound) {
      return NotFoundError(dir + " has no " + kManifestName + ": not a committed checkpoint");
    }
    return file.status();
  }
  ELASTRA_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
  if (size > kMaxManifestBytes + 64) {
    return CorruptError(path + ": " + std::to_string(size) + " bytes, more than a manifest may be");
  }
  std::vector<std::byte> bytes(size);
  ELASTRA_RETURN_IF_ERROR((*file)->Read(0, size, bytes.data()));
  return DecodeManifest(bytes, path);
}

}  // namespace

StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(Env* env, const std::string& root,
                                                      std::vector<std::string>* faults) {
  ELASTRA_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(root));
  std::vector<CheckpointInfo> out;
  for (const std::string& n : names) {
    int64_t step;
    uint64_t generation;
    if (!ParseCheckpointDirName(n, &step, &generation)) continue;
    const std::string dir = JoinPath(root, n);
    if (!env->FileExists(JoinPath(dir, kManifestName))) continue;  // never committed
    auto m = ReadManifest(env, dir);
    if (!m.ok()) {
      if (faults) faults->push_back(m.status().ToString());
      continue;
    }
    if (m->step != step || m->generation != generation) {
      if (faults) {
        faults->push_back(dir + ": the manifest is for step " + std::to_string(m->step) +
                          " generation " + std::to_string(m->generation));
      }
      continue;
    }
    CheckpointInfo info;
    info.dir = dir;
    info.job = m->job;
    info.step = m->step;
    info.generation = m->generation;
    info.layout = m->layout;
    info.bytes = m->total_file_bytes();
    info.files = m->files.size();
    info.tensors = m->tensors.size();
    out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(), [](const CheckpointInfo& a, const CheckpointInfo& b) {
    return a.step != b.step ? a.step > b.step : a.generation > b.generation;
  });
  return out;
}

CheckpointReader::CheckpointReader(Env* env, std::string dir, Manifest m)
    : env_(env), dir_(std::move(dir)), manifest_(std::move(m)) {}

StatusOr<std::unique_ptr<CheckpointReader>> CheckpointReader::Open(Env* env,
                                                                   const std::string& dir) {
  ELASTRA_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, dir));
  std::unique_ptr<CheckpointReader> r(new CheckpointReader(env, dir, std::move(m)));
  for (const FileEntry& f : r->manifest_.files) {
    const std::string path = JoinPath(dir, f.name);
    auto file = env->NewRandomAccessFile(path);
    if (!file.ok()) {
      if (file.status().code() == StatusCode::kNotFound) {
        return CorruptError(path + ": missing (the manifest names it)");
      }
      return file.status();
    }
    ELASTRA_ASSIGN_OR_RETURN(uint64_t size, (*file)->Size());
    if (size != f.size) {
      return CorruptError(path + ": " + (size < f.size ? "truncated: " : "wrong size: ") +
                          std::to_string(size) + " bytes, the manifest says " +
                          std::to_string(f.size));
    }
    std::byte header[64];
    ELASTRA_RETURN_IF_ERROR((*file)->Read(0, sizeof(header), header));
    ELASTRA_ASSIGN_OR_RETURN(ShardHeader h, DecodeShardHeader(header, path));
    if (h.rank != f.rank || h.step != r->manifest_.step ||
        h.generation != r->manifest_.generation) {
      return CorruptError(path + ": the header is for rank " + std::to_string(h.rank) + " step " +
                          std::to_string(h.step) + " generation " + std::to_string(h.generation) +
                          ", not what the manifest says");
    }
    r->files_.push_back(std::move(file).value());
  }
  return r;
}

Status CheckpointReader::ReadChunks(const TensorEntry& t, const RegionEntry& r, uint64_t c0,
                                    uint64_t c1, std::byte* dst) {
  const std::string path = JoinPath(dir_, manifest_.files[r.file].name);
  const RandomAccessFile& file = *files_[r.file];
  const uint64_t per_block = std::max<uint64_t>(1, kReadBlockBytes / r.chunk_bytes);
  const uint64_t start = c0 * r.chunk_bytes;
  for (uint64_t c = c0; c < c1; c += per_block) {
    const uint64_t cend = std::min(c1, c + per_block);
    const uint64_t lo = c * r.chunk_bytes;
    const uint64_t hi = std::min(cend * r.chunk_bytes, r.bytes);
    std::byte* p = dst + (lo - start);
    Status s = file.Read(r.offset + lo, hi - lo, p);
    if (!s.ok()) return s.WithContext("tensor '" + t.name + "'");
    bytes_read_ += hi - lo;
    for (uint64_t k = c; k < cend; ++k) {
      const uint64_t a = k * r.chunk_bytes;
      const uint64_t b = std::min(a + r.chunk_bytes, r.bytes);
      if (Checksum(dst + (a - start), b - a) != r.chunk_checksums[k]) {
        return CorruptError(path + ": checksum mismatch in tensor '" + t.name + "' region " +
                            r.box.ToString() + " chunk " + std::to_string(k) + " (file bytes " +
                            std::to_string(r.offset + a) + ".." + std::to_string(r.offset + b) +
                            ")");
      }
    }
  }
  return OkStatus();
}

Status CheckpointReader::CopyIntersection(const TensorEntry& t, const RegionEntry& r,
                                          const Box& want, std::span<std::byte> out) {
  const size_t esize = ElementSize(t.dtype);
  if (r.box == want) {  // the common case: read straight into the destination
    return ReadChunks(t, r, 0, r.chunk_checksums.size(), out.data());
  }
  const Box in = Intersect(r.box, want);
  const size_t nd = in.begin.size();
  std::vector<int64_t> last(in.end.size());
  for (size_t d = 0; d < nd; ++d) last[d] = in.end[d] - 1;
  // The stored bytes spanning the intersection, rounded out to whole checksum chunks.
  const uint64_t lo = LinearIndex(r.box, in.begin) * esize;
  const uint64_t hi = (LinearIndex(r.box, last) + 1) * esize;
  const uint64_t c0 = lo / r.chunk_bytes;
  const uint64_t c1 = (hi + r.chunk_bytes - 1) / r.chunk_bytes;
  const uint64_t base = c0 * r.chunk_bytes;
  std::vector<std::byte> buf(std::min(c1 * r.chunk_bytes, r.bytes) - base);
  ELASTRA_RETURN_IF_ERROR(ReadChunks(t, r, c0, c1, buf.data()));
  // Copy row by row (runs along the innermost dimension).
  const size_t run = nd == 0 ? esize : static_cast<size_t>(in.end[nd - 1] - in.begin[nd - 1]) * esize;
  std::vector<int64_t> idx = in.begin;
  while (true) {
    const uint64_t src = LinearIndex(r.box, idx) * esize - base;
    const uint64_t dst = LinearIndex(want, idx) * esize;
    std::memcpy(out.data() + dst, buf.data() + src, run);
    // Advance over every dimension but the innermost.
    int d = static_cast<int>(nd) - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < in.end[d]) break;
      idx[d] = in.begin[d];
    }
    if (d < 0) break;
  }
  return OkStatus();
}

Status CheckpointReader::ReadRegion(const std::string& tensor, const Box& want,
                                    std::span<std::byte> out) {
  const TensorEntry* t = manifest_.FindTensor(tensor);
  if (t == nullptr) {
    return InvalidArgumentError(dir_ + " has no tensor '" + tensor + "'");
  }
  if (want.begin.size() != t->shape.size() || want.end.size() != t->shape.size()) {
    return InvalidArgumentError("box " + want.ToString() + " does not match tensor '" + tensor +
                                "' of shape " + ShapeText(t->shape));
  }
  for (size_t d = 0; d < t->shape.size(); ++d) {
    if (want.begin[d] < 0 || want.begin[d] > want.end[d] || want.end[d] > t->shape[d]) {
      return InvalidArgumentError("box " + want.ToString() + " lies outside tensor '" + tensor +
                                  "' of shape " + ShapeText(t->shape));
    }
  }
  const size_t esize = ElementSize(t->dtype);
  if (out.size() != want.volume() * esize) {
    return InvalidArgumentError("buffer of " + std::to_string(out.size()) + " bytes for box " +
                                want.ToString() + " of '" + tensor + "' (" +
                                std::to_string(want.volume() * esize) + " needed)");
  }
  if (want.empty()) return OkStatus();
  uint64_t covered = 0;
  std::vector<Box> done;
  for (size_t i = 0; i < t->regions.size(); ++i) {
    const RegionEntry& r = t->regions[i];
    if (std::find(done.begin(), done.end(), r.box) != done.end()) continue;
    const Box in = Intersect(r.box, want);
    if (in.empty()) continue;
    Status s = CopyIntersection(*t, r, want, out);
    // A replica of the same box in another file may still be good.
    for (size_t j = i + 1; !s.ok() && j < t->regions.size(); ++j) {
      if (!(t->regions[j].box == r.box)) continue;
      LOG(WARNING) << s << "; trying the replica in " << manifest_.files[t->regions[j].file].name;
      s = CopyIntersection(*t, t->regions[j], want, out);
    }
    ELASTRA_RETURN_IF_ERROR(s);
    done.push_back(r.box);
    covered += in.volume();
  }
  if (covered != want.volume()) {
    return CorruptError(dir_ + ": the regions of tensor '" + tensor + "' cover " +
                        std::to_string(covered) + " of the " + std::to_string(want.volume()) +
                        " elements of " + want.ToString());
  }
  return OkStatus();
}

Status CheckpointReader::VerifyAll(uint64_t* bytes) {
  std::vector<std::byte> buf;
  uint64_t n = 0;
  for (const TensorEntry& t : manifest_.tensors) {
    for (const RegionEntry& r : t.regions) {
      const uint64_t chunks = r.chunk_checksums.size();
      const uint64_t per_block = std::max<uint64_t>(1, kReadBlockBytes / r.chunk_bytes);
      for (uint64_t c = 0; c < chunks; c += per_block) {
        const uint64_t cend = std::min(chunks, c + per_block);
        buf.resize(std::min(cend * r.chunk_bytes, r.bytes) - c * r.chunk_bytes);
        ELASTRA_RETURN_IF_ERROR(ReadChunks(t, r, c, cend, buf.data()));
        n += buf.size();
      }
    }
  }
  if (bytes) *bytes = n;
  return OkStatus();
}

StatusOr<LoadedState> LoadCheckpoint(Env* env, const std::string& dir,
                                     const std::vector<RegionRequest>& requests, int threads) {
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader,
                           CheckpointReader::Open(env, dir));
  const Manifest& m = reader->manifest();
  LoadedState out;
  out.dir = dir;
  out.job = m.job;
  out.step = m.step;
  out.generation = m.generation;
  out.layout = m.layout;
  out.scalars = m.scalars;
  // First every request is checked against the manifest (cheap), then the reads run in parallel.
  std::vector<uint64_t> totals;
  for (const RegionRequest& q : requests) {
    const TensorEntry* t = m.FindTensor(q.tensor);
    if (t == nullptr) return CorruptError(dir + ": has no tensor '" + q.tensor + "'");
    if (!q.shape.empty() &&
        (t->shape != q.shape || t->dtype != static_cast<int32_t>(q.dtype))) {
      return InvalidArgumentError(dir + ": tensor '" + q.tensor + "' is " +
                                  ShapeText(t->shape) + " dtype " + std::to_string(t->dtype) +
                                  " in the checkpoint, " + ShapeText(q.shape) + " dtype " +
                                  std::to_string(static_cast<int>(q.dtype)) + " expected");
    }
    const size_t esize = ElementSize(t->dtype);
    uint64_t total = 0;
    for (const Box& b : q.pieces) {
      bool inside = b.begin.size() == t->shape.size() && b.end.size() == t->shape.size();
      for (size_t d = 0; inside && d < t->shape.size(); ++d) {
        inside = b.begin[d] >= 0 && b.begin[d] <= b.end[d] && b.end[d] <= t->shape[d];
      }
      if (!inside) {  // checked before the volume is trusted for an allocation
        return InvalidArgumentError("box " + b.ToString() + " does not fit tensor '" + q.tensor +
                                    "' of shape " + ShapeText(t->shape));
      }
      total += b.volume() * esize;
    }
    totals.push_back(total);
  }
  out.regions.resize(requests.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (size_t i = next++; i < requests.size(); i = next++) {
      {
        std::lock_guard<std::mutex> l(mu);
        if (!first_error.ok()) return;
      }
      const RegionRequest& q = requests[i];
      const size_t esize = ElementSize(reader->manifest().FindTensor(q.tensor)->dtype);
      std::vector<uint8_t>& bytes = out.regions[i];
      bytes.resize(totals[i]);
      uint64_t at = 0;
      for (const Box& b : q.pieces) {
        const uint64_t n = b.volume() * esize;
        Status s =
            reader->ReadRegion(q.tensor, b, {reinterpret_cast<std::byte*>(bytes.data()) + at, n});
        if (!s.ok()) {
          std::lock_guard<std::mutex> l(mu);
          if (first_error.ok()) first_error = s;
          return;
        }
        at += n;
      }
    }
  };
  const size_t n_threads =
      std::min<size_t>(std::max(threads, 1), std::max<size_t>(requests.size(), 1));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n_threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (!first_error.ok()) return first_error;
  return out;
}

StatusOr<LoadedState> LoadLatest(Env* env, const std::string& root,
                                 const std::vector<RegionRequest>& requests, int threads) {
  std::vector<std::string> faults;
  ELASTRA_ASSIGN_OR_RETURN(std::vector<CheckpointInfo> list, ListCheckpoints(env, root, &faults));
  for (const std::string& f : faults) LOG(WARNING) << "refusing checkpoint: " << f;
  for (const CheckpointInfo& info : list) {
    auto loaded = LoadCheckpoint(env, info.dir, requests, threads);
    if (loaded.ok()) {
      if (!faults.empty()) {
        LOG(WARNING) << "loaded the older checkpoint " << info.dir << " (step " << info.step
                     << ") after " << faults.size() << " refused";
      }
      loaded->skipped = faults;
      return loaded;
    }
    LOG(WARNING) << "refusing checkpoint " << info.dir << ": " << loaded.status();
    faults.push_back(info.dir + ": " + loaded.status().ToString());
  }
  if (faults.empty()) return NotFoundError("no committed checkpoint under " + root);
  std::string all;
  for (const std::string& f : faults) all += "\n  " + f;
  return CorruptError("no committed checkpoint under " + root + " loads:" + all);
}


}  // namespace elastra::checkpoint
