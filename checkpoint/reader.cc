#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>
#include <mutex>

#include "checkpoint/reader_internal.h"
#include "common/host_memory.h"
#include "common/logging.h"

namespace elastra::checkpoint {

std::string internal::ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

using internal::kLoadBlockBytes;
using internal::ShapeText;

// Region bytes a load reads ahead of its reads (Prefetch).
constexpr uint64_t kPrefetchBytes = 16ull << 20;
// Bytes of zeros checked per read.
constexpr uint64_t kZeroCheckBytes = 4ull << 20;

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

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
    std::vector<std::byte> header(std::min<uint64_t>(kShardHeaderBytes, size));
    ELASTRA_RETURN_IF_ERROR((*file)->Read(0, header.size(), header.data()));
    ELASTRA_ASSIGN_OR_RETURN(ShardHeader h, DecodeShardHeader(header, path));
    if (h.rank != f.rank || h.step != r->manifest_.step ||
        h.generation != r->manifest_.generation) {
      return CorruptError(path + ": bytes 12..32: the header is for rank " +
                          std::to_string(h.rank) + " step " + std::to_string(h.step) +
                          " generation " + std::to_string(h.generation) +
                          ", not what the manifest says");
    }
    if (h.version != r->manifest_.version) {
      return CorruptError(path + ": bytes 8..12: format version " + std::to_string(h.version) +
                          ", the manifest's is " + std::to_string(r->manifest_.version));
    }
    if (r->padding_checked() && header.size() > kShardHeaderFieldBytes) {
      const auto [a, b] =
          NonZeroSpan(std::span<const std::byte>(header).subspan(kShardHeaderFieldBytes));
      if (a != b) {
        r->AddOutsideFault({path, kShardHeaderFieldBytes + a, kShardHeaderFieldBytes + b,
                            "not zero (the shard header block after its fields)"});
      }
    }
    r->files_.push_back(std::move(file).value());
  }
  return r;
}

std::string Fault::ToString() const {
  return file + ": bytes " + std::to_string(begin) + ".." + std::to_string(end) + ": " + what;
}

std::string CheckpointReader::PathOf(uint32_t f) const {
  return JoinPath(dir_, manifest_.files[f].name);
}

void CheckpointReader::AddOutsideFault(Fault f) {
  LOG(WARNING) << "damage outside the regions of " << dir_
               << " (the regions verify): " << f.ToString();
  std::lock_guard<std::mutex> l(mu_);
  outside_faults_.push_back(std::move(f));
}

std::vector<Fault> CheckpointReader::outside_faults() const {
  std::lock_guard<std::mutex> l(mu_);
  return outside_faults_;
}

Status CheckpointReader::ReadChunks(const TensorEntry& t, const RegionEntry& r, uint64_t c0,
                                    uint64_t c1, std::byte* dst, std::vector<Fault>* faults) {
  const RandomAccessFile& file = *files_[r.file];
  const uint64_t start = c0 * r.chunk_bytes;
  const uint64_t end = std::min(c1 * r.chunk_bytes, r.bytes);
  Status first;
  // Chunk by chunk, each verified while it is still in the cache; the device reads ahead.
  uint64_t asked = start;
  for (uint64_t k = c0; k < c1; ++k) {
    const uint64_t a = k * r.chunk_bytes;
    const uint64_t b = std::min(a + r.chunk_bytes, r.bytes);
    if (asked < std::min(end, b + kPrefetchBytes)) {
      const uint64_t to = std::min(end, b + kPrefetchBytes);
      file.Prefetch(r.offset + asked, to - asked);
      asked = to;
    }
    std::byte* p = dst + (a - start);
    Status s = file.Read(r.offset + a, b - a, p);
    if (!s.ok()) return s.WithContext("tensor '" + t.name + "'");
    bytes_read_ += b - a;
    if (Checksum(p, b - a) != r.chunk_checksums[k]) {
      Fault f{PathOf(r.file), r.offset + a, r.offset + b,
              "checksum mismatch in tensor '" + t.name + "' region " + r.box.ToString() +
                  " chunk " + std::to_string(k)};
      Status bad =
          CorruptError(PathOf(r.file) + ": checksum mismatch in tensor '" + t.name + "' region " +
                       r.box.ToString() + " chunk " + std::to_string(k) + " (file bytes " +
                       std::to_string(f.begin) + ".." + std::to_string(f.end) + ")");
      if (faults == nullptr) return bad;
      faults->push_back(std::move(f));
      if (first.ok()) first = bad;
    }
  }
  return first;
}

Status CheckpointReader::CheckZeros(uint32_t f, uint64_t begin, uint64_t end,
                                    const std::string& what, std::vector<Fault>* faults,
                                    uint64_t* checked) {
  std::vector<std::byte> buf(std::min(end - begin, kZeroCheckBytes));
  Status first;
  for (uint64_t at = begin; at < end;) {
    const uint64_t n = std::min<uint64_t>(end - at, buf.size());
    ELASTRA_RETURN_IF_ERROR(files_[f]->Read(at, n, buf.data()));
    *checked += n;
    const auto [a, b] = NonZeroSpan(std::span<const std::byte>(buf.data(), n));
    if (a != b) {
      Fault fault{PathOf(f), at + a, at + b, "not zero (" + what + ")"};
      if (first.ok()) first = CorruptError(fault.ToString());
      if (faults) faults->push_back(std::move(fault));
    }
    at += n;
  }
  return first;
}

void CheckpointReader::CheckPaddingAfter(const TensorEntry& t, const RegionEntry& r) {
  if (!padding_checked()) return;
  const uint64_t end = r.offset + r.bytes;
  const uint64_t to = std::min(AlignUp(end, kRegionAlignment), manifest_.files[r.file].size);
  if (to <= end) return;
  std::byte page[kRegionAlignment];
  if (!files_[r.file]->Read(end, to - end, page).ok()) return;  // the load does not need it
  const auto [a, b] = NonZeroSpan(std::span<const std::byte>(page, to - end));
  if (a != b) {
    AddOutsideFault(
        {PathOf(r.file), end + a, end + b,
         "not zero (the padding after tensor '" + t.name + "' region " + r.box.ToString() + ")"});
  }
}

Status CheckpointReader::CopyIntersection(const TensorEntry& t, const RegionEntry& r,
                                          const Box& want, std::span<std::byte> out) {
  const size_t esize = ElementSize(t.dtype);
  if (r.box == want) {  // the common case: read straight into the destination
    ELASTRA_RETURN_IF_ERROR(ReadChunks(t, r, 0, r.chunk_checksums.size(), out.data()));
    CheckPaddingAfter(t, r);
    return OkStatus();
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

Status CheckpointReader::VerifyAll(uint64_t* bytes, std::vector<Fault>* faults) {
  std::vector<Fault> local;
  std::vector<Fault>& found = faults ? *faults : local;
  found = outside_faults();  // the header blocks' zeros, checked by Open()
  uint64_t checked = 0;
  struct Placed {
    const TensorEntry* t;
    const RegionEntry* r;
  };
  std::vector<std::vector<Placed>> by_file(manifest_.files.size());
  for (const TensorEntry& t : manifest_.tensors) {
    for (const RegionEntry& r : t.regions) by_file[r.file].push_back({&t, &r});
  }
  std::vector<std::byte> buf;
  for (uint32_t f = 0; f < by_file.size(); ++f) {
    auto& placed = by_file[f];
    std::sort(placed.begin(), placed.end(),
              [](const Placed& a, const Placed& b) { return a.r->offset < b.r->offset; });
    checked += std::min<uint64_t>(kShardHeaderBytes, manifest_.files[f].size);
    uint64_t pos = kShardHeaderBytes;
    std::string before = "the padding after the shard header";
    for (const Placed& p : placed) {
      const RegionEntry& r = *p.r;
      if (padding_checked() && r.offset > pos) {
        CheckZeros(f, pos, r.offset, before, &found, &checked).IgnoreError();
      }
      // In blocks of whole chunks; every chunk is read and checked, every mismatch recorded.
      const uint64_t chunks = r.chunk_checksums.size();
      const uint64_t per_block = std::max<uint64_t>(1, kLoadBlockBytes / r.chunk_bytes);
      for (uint64_t c = 0; c < chunks; c += per_block) {
        const uint64_t cend = std::min(chunks, c + per_block);
        buf.resize(std::min(cend * r.chunk_bytes, r.bytes) - c * r.chunk_bytes);
        Status s = ReadChunks(*p.t, r, c, cend, buf.data(), &found);
        if (!s.ok() && s.code() != StatusCode::kCorrupt) return s;  // an I/O error
        checked += buf.size();
      }
      pos = std::max(pos, r.offset + r.bytes);
      before = "the padding after tensor '" + p.t->name + "' region " + r.box.ToString();
    }
    if (padding_checked() && manifest_.files[f].size > pos) {
      CheckZeros(f, pos, manifest_.files[f].size, before, &found, &checked).IgnoreError();
    }
  }
  std::sort(found.begin(), found.end(), [](const Fault& a, const Fault& b) {
    return a.file != b.file ? a.file < b.file : a.begin < b.begin;
  });
  if (bytes) *bytes = checked;
  if (!found.empty()) return CorruptError(found.front().ToString());
  return OkStatus();
}

}  // namespace elastra::checkpoint
