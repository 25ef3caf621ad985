#include "checkpoint/format.h"

#include <xxhash.h>

#include <algorithm>
#include <cereal/archives/binary.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/vector.hpp>
#include <cstdio>
#include <cstring>
#include <set>
#include <sstream>

#include "common/bounded_archive.h"

namespace elastra::checkpoint {
namespace {

constexpr char kManifestMagic[8] = {'E', 'L', 'C', 'K', 'M', 'A', 'N', '1'};
constexpr char kDescriptorMagic[8] = {'E', 'L', 'C', 'K', 'S', 'H', 'D', '1'};
constexpr char kShardMagic[8] = {'E', 'L', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr size_t kFrameHeaderBytes = 32;  // magic, version, reserved, payload size, checksum

template <class T>
void Put(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}
template <class T>
T Get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

template <class T>
std::string EncodeFrame(const char (&magic)[8], const T& value, uint32_t version) {
  std::ostringstream payload_stream;
  {
    cereal::BinaryOutputArchive ar(payload_stream);
    ar(value);
  }
  const std::string payload = payload_stream.str();
  std::string out(magic, 8);
  Put<uint32_t>(&out, version);
  Put<uint32_t>(&out, 0);
  Put<uint64_t>(&out, payload.size());
  Put<uint64_t>(&out, Checksum(payload.data(), payload.size()));
  out += payload;
  return out;
}

template <class T>
StatusOr<T> DecodeFrame(const char (&magic)[8], std::span<const std::byte> in,
                        const std::string& what) {
  if (in.size() < kFrameHeaderBytes) {
    return CorruptError(what + ": truncated: " + std::to_string(in.size()) +
                        " bytes, shorter than the " + std::to_string(kFrameHeaderBytes) +
                        "-byte header");
  }
  if (std::memcmp(in.data(), magic, 8) != 0) {
    return CorruptError(what + ": bytes 0..8: bad magic (not an Elastra checkpoint file)");
  }
  const uint32_t version = Get<uint32_t>(in.data() + 8);
  if (version < kOldestReadableVersion || version > kFormatVersion) {
    return ProtocolMismatchError(what + ": bytes 8..12: unknown format version " +
                                 std::to_string(version) + " (this build reads versions " +
                                 std::to_string(kOldestReadableVersion) + " to " +
                                 std::to_string(kFormatVersion) + ")");
  }
  if (Get<uint32_t>(in.data() + 12) != 0) {
    return CorruptError(what + ": bytes 12..16: the reserved field is not zero");
  }
  const uint64_t size = Get<uint64_t>(in.data() + 16);
  const uint64_t sum = Get<uint64_t>(in.data() + 24);
  if (size > kMaxManifestBytes) {
    return CorruptError(what + ": bytes 16..24: payload size " + std::to_string(size) +
                        " exceeds the limit " + std::to_string(kMaxManifestBytes));
  }
  if (size != in.size() - kFrameHeaderBytes) {
    return CorruptError(what + ": bytes 16..24: sizes do not add up: the header says " +
                        std::to_string(size) + " payload bytes, the file has " +
                        std::to_string(in.size() - kFrameHeaderBytes));
  }
  const std::byte* payload = in.data() + kFrameHeaderBytes;
  if (Checksum(payload, size) != sum) {
    // Either the checksum (bytes 24..32) or the payload changed: both are named.
    return CorruptError(what + ": bytes 24.." + std::to_string(in.size()) +
                        ": checksum mismatch (the payload, bytes 32.." + std::to_string(in.size()) +
                        ", does not match its checksum, bytes 24..32)");
  }
  T value;
  try {
    proto::BoundedInputArchive ar(reinterpret_cast<const char*>(payload), size);
    ar(value);
    if (ar.remaining() != 0) {
      return CorruptError(what + ": " + std::to_string(ar.remaining()) +
                          " trailing bytes after the payload");
    }
  } catch (const std::exception& e) {
    return CorruptError(what + ": malformed payload: " + e.what());
  }
  return value;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

Box Box::Whole(const std::vector<int64_t>& shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), shape};
}

uint64_t Box::volume() const {
  uint64_t v = 1;
  for (size_t d = 0; d < begin.size() && d < end.size(); ++d) {
    if (end[d] <= begin[d]) return 0;
    v *= static_cast<uint64_t>(end[d] - begin[d]);
  }
  return v;
}

std::string Box::ToString() const {
  std::string s = "[";
  for (size_t d = 0; d < begin.size() && d < end.size(); ++d) {
    s += (d ? "," : "") + std::to_string(begin[d]) + ":" + std::to_string(end[d]);
  }
  return s + "]";
}

Box Intersect(const Box& a, const Box& b) {
  Box r;
  const size_t n = std::min(a.begin.size(), b.begin.size());
  for (size_t d = 0; d < n; ++d) {
    r.begin.push_back(std::max(a.begin[d], b.begin[d]));
    r.end.push_back(std::max(r.begin.back(), std::min(a.end[d], b.end[d])));
  }
  return r;
}

std::string RuleEntry::ToString() const {
  std::string s;
  if (tp_split_dim >= 0) s += "tp_split_dim=" + std::to_string(tp_split_dim);
  if (layer >= 0) s += std::string(s.empty() ? "" : ",") + "layer=" + std::to_string(layer);
  if (zero) s += std::string(s.empty() ? "" : ",") + "zero";
  return s.empty() ? "replicated" : s;
}

std::vector<Box> FlatRangePieces(const Box& box, int64_t flat_begin, int64_t flat_end) {
  std::vector<Box> out;
  if (box.begin.size() != 2 || box.end.size() != 2 || flat_end <= flat_begin) return out;
  const int64_t rb = box.begin[0], cb = box.begin[1];
  const int64_t cols = box.end[1] - cb;
  if (cols <= 0) return out;
  int64_t r0 = flat_begin / cols, c0 = flat_begin % cols;
  const int64_t r1 = (flat_end - 1) / cols, c1 = (flat_end - 1) % cols;  // last element
  if (r0 == r1) {
    out.push_back({{rb + r0, cb + c0}, {rb + r0 + 1, cb + c1 + 1}});
    return out;
  }
  if (c0 > 0) {  // partial first row
    out.push_back({{rb + r0, cb + c0}, {rb + r0 + 1, cb + cols}});
    ++r0;
  }
  const int64_t full_end = c1 == cols - 1 ? r1 + 1 : r1;  // rows [r0, full_end) are whole
  if (full_end > r0) out.push_back({{rb + r0, cb}, {rb + full_end, cb + cols}});
  if (c1 != cols - 1) out.push_back({{rb + r1, cb}, {rb + r1 + 1, cb + c1 + 1}});
  return out;
}

const TensorEntry* Manifest::FindTensor(const std::string& name) const {
  for (const TensorEntry& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t Manifest::total_file_bytes() const {
  uint64_t n = 0;
  for (const FileEntry& f : files) n += f.size;
  return n;
}

size_t ElementSize(int32_t dtype) {
  return IsKnownDataType(dtype) ? DataTypeSize(static_cast<DataType>(dtype)) : 0;
}

std::string CheckpointDirName(int64_t step, uint64_t generation) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "ckpt-%012lld-g%06llu", static_cast<long long>(step),
                static_cast<unsigned long long>(generation));
  return buf;
}

bool ParseCheckpointDirName(const std::string& name, int64_t* step, uint64_t* generation) {
  long long s = 0;
  unsigned long long g = 0;
  int consumed = 0;
  if (std::sscanf(name.c_str(), "ckpt-%12lld-g%6llu%n", &s, &g, &consumed) != 2) return false;
  if (static_cast<size_t>(consumed) != name.size() || s < 0) return false;
  if (name != CheckpointDirName(s, g)) return false;
  *step = s;
  *generation = g;
  return true;
}

std::string ShardFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "shard-%05d.bin", rank);
  return buf;
}

void EncodeShardHeader(const ShardHeader& h, std::byte* out) {
  std::memset(out, 0, kShardHeaderBytes);
  std::string s(kShardMagic, 8);
  Put<uint32_t>(&s, h.version);
  Put<int32_t>(&s, h.rank);
  Put<int64_t>(&s, h.step);
  Put<uint64_t>(&s, h.generation);
  Put<uint64_t>(&s, Checksum(s.data(), s.size()));
  std::memcpy(out, s.data(), s.size());
}

StatusOr<ShardHeader> DecodeShardHeader(std::span<const std::byte> in, const std::string& path) {
  if (in.size() < 40) return CorruptError(path + ": truncated shard header");
  if (std::memcmp(in.data(), kShardMagic, 8) != 0) {
    return CorruptError(path + ": bytes 0..8: bad magic (not an Elastra shard file)");
  }
  ShardHeader h;
  h.version = Get<uint32_t>(in.data() + 8);
  if (h.version < kOldestReadableVersion || h.version > kFormatVersion) {
    return ProtocolMismatchError(path + ": bytes 8..12: unknown format version " +
                                 std::to_string(h.version) + " (this build reads versions " +
                                 std::to_string(kOldestReadableVersion) + " to " +
                                 std::to_string(kFormatVersion) + ")");
  }
  if (Checksum(in.data(), 32) != Get<uint64_t>(in.data() + 32)) {
    return CorruptError(path + ": bytes 0..40: shard header checksum mismatch");
  }
  h.rank = Get<int32_t>(in.data() + 12);
  h.step = Get<int64_t>(in.data() + 16);
  h.generation = Get<uint64_t>(in.data() + 24);
  return h;
}

std::string EncodeManifest(const Manifest& m) { return EncodeFrame(kManifestMagic, m, m.version); }

StatusOr<Manifest> DecodeManifest(std::span<const std::byte> in, const std::string& path) {
  ELASTRA_ASSIGN_OR_RETURN(Manifest m, DecodeFrame<Manifest>(kManifestMagic, in, path));
  if (m.version != Get<uint32_t>(in.data() + 8)) {
    return CorruptError(path + ": the payload says format version " + std::to_string(m.version) +
                        ", the frame (bytes 8..12) " +
                        std::to_string(Get<uint32_t>(in.data() + 8)));
  }
  Status s = ValidateManifest(m);
  if (!s.ok()) return Status(s.code(), path + ": " + s.message());
  return m;
}

std::string EncodeShardDescriptor(const ShardDescriptor& d) {
  return EncodeFrame(kDescriptorMagic, d, kFormatVersion);
}

StatusOr<ShardDescriptor> DecodeShardDescriptor(std::span<const std::byte> in) {
  return DecodeFrame<ShardDescriptor>(kDescriptorMagic, in, "shard descriptor");
}

Status ValidateManifest(const Manifest& m) {
  std::set<std::string> file_names;
  for (const FileEntry& f : m.files) {
    if (f.name.empty() || f.name.find('/') != std::string::npos || f.name == "." ||
        f.name == ".." || !file_names.insert(f.name).second) {
      return CorruptError("bad or duplicate file name '" + f.name + "'");
    }
  }
  // Per file: the byte ranges used, to find overlaps.
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> used(m.files.size());
  std::set<std::string> names;
  for (const TensorEntry& t : m.tensors) {
    const std::string where = "tensor '" + t.name + "'";
    if (t.name.empty() || !names.insert(t.name).second) {
      return CorruptError("empty or duplicate tensor name '" + t.name + "'");
    }
    const size_t esize = ElementSize(t.dtype);
    if (esize == 0) return CorruptError(where + ": unknown dtype " + std::to_string(t.dtype));
    if (t.shape.size() > static_cast<size_t>(kMaxDims)) {
      return CorruptError(where + ": " + std::to_string(t.shape.size()) + " dimensions (max " +
                          std::to_string(kMaxDims) + ")");
    }
    uint64_t total = esize;
    for (int64_t d : t.shape) {
      if (d < 0 || (d > 0 && __builtin_mul_overflow(total, static_cast<uint64_t>(d), &total)) ||
          total > kMaxTensorBytes) {
        return CorruptError(where + ": bad shape " + ShapeText(t.shape));
      }
    }
    std::vector<Box> distinct;
    for (const RegionEntry& r : t.regions) {
      const std::string rw = where + " region " + r.box.ToString();
      if (r.box.begin.size() != t.shape.size() || r.box.end.size() != t.shape.size()) {
        return CorruptError(rw + ": rank does not match the shape " + ShapeText(t.shape));
      }
      for (size_t d = 0; d < t.shape.size(); ++d) {
        if (r.box.begin[d] < 0 || r.box.begin[d] > r.box.end[d] || r.box.end[d] > t.shape[d]) {
          return CorruptError(rw + ": outside the shape " + ShapeText(t.shape));
        }
      }
      if (r.file >= m.files.size()) {
        return CorruptError(rw + ": names file #" + std::to_string(r.file) + " of " +
                            std::to_string(m.files.size()));
      }
      const FileEntry& f = m.files[r.file];
      if (r.bytes != r.box.volume() * esize) {
        return CorruptError(rw + " in " + f.name + ": sizes do not add up: " +
                            std::to_string(r.bytes) + " bytes for " +
                            std::to_string(r.box.volume()) + " elements of " +
                            std::to_string(esize) + " bytes");
      }
      if (r.chunk_bytes < kMinChunkBytes || r.chunk_bytes > kMaxTensorBytes) {
        return CorruptError(rw + ": bad chunk size " + std::to_string(r.chunk_bytes));
      }
      const uint64_t chunks = (r.bytes + r.chunk_bytes - 1) / r.chunk_bytes;
      if (r.chunk_checksums.size() != chunks) {
        return CorruptError(rw + " in " + f.name + ": " +
                            std::to_string(r.chunk_checksums.size()) + " checksums for " +
                            std::to_string(chunks) + " chunks");
      }
      if (r.offset < kShardHeaderBytes || r.offset > f.size || r.bytes > f.size - r.offset) {
        return CorruptError(rw + ": bytes [" + std::to_string(r.offset) + ", +" +
                            std::to_string(r.bytes) + ") lie outside " + f.name + " (" +
                            std::to_string(f.size) + " bytes)");
      }
      if (r.bytes > 0) used[r.file].emplace_back(r.offset, r.offset + r.bytes);
      if (std::find(distinct.begin(), distinct.end(), r.box) == distinct.end()) {
        distinct.push_back(r.box);
      }
    }
    // The distinct boxes must tile the tensor: pairwise disjoint, volumes summing to the whole.
    uint64_t covered = 0;
    for (size_t i = 0; i < distinct.size(); ++i) {
      covered += distinct[i].volume();
      for (size_t j = i + 1; j < distinct.size(); ++j) {
        if (!Intersect(distinct[i], distinct[j]).empty()) {
          return CorruptError(where + ": regions " + distinct[i].ToString() + " and " +
                              distinct[j].ToString() + " overlap");
        }
      }
    }
    if (covered != total / esize) {
      return CorruptError(where + ": sizes do not add up: the regions cover " +
                          std::to_string(covered) + " of " + std::to_string(total / esize) +
                          " elements");
    }
  }
  for (size_t f = 0; f < used.size(); ++f) {
    auto& u = used[f];
    std::sort(u.begin(), u.end());
    for (size_t i = 1; i < u.size(); ++i) {
      if (u[i].first < u[i - 1].second) {
        return CorruptError(m.files[f].name + ": two regions overlap at byte " +
                            std::to_string(u[i].first));
      }
    }
  }
  return OkStatus();
}

uint64_t Checksum(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::pair<uint64_t, uint64_t> NonZeroSpan(std::span<const std::byte> data) {
  // Word by word where aligned: padding is checked on every verify, so this runs over every gap.
  const std::byte* p = data.data();
  const size_t n = data.size();
  size_t first = 0;
  while (first < n && (reinterpret_cast<uintptr_t>(p + first) % 8 != 0) &&
         p[first] == std::byte{0}) {
    ++first;
  }
  while (first + 8 <= n && (reinterpret_cast<uintptr_t>(p + first) % 8 == 0)) {
    uint64_t w;
    std::memcpy(&w, p + first, 8);
    if (w != 0) break;
    first += 8;
  }
  while (first < n && p[first] == std::byte{0}) ++first;
  if (first == n) return {0, 0};
  size_t last = n;
  while (last > first && p[last - 1] == std::byte{0}) --last;
  return {first, last};
}

std::vector<uint64_t> ChunkChecksums(std::span<const std::byte> data, uint64_t chunk_bytes) {
  std::vector<uint64_t> sums;
  sums.reserve((data.size() + chunk_bytes - 1) / chunk_bytes);
  for (uint64_t off = 0; off < data.size(); off += chunk_bytes) {
    sums.push_back(Checksum(data.data() + off, std::min<uint64_t>(chunk_bytes, data.size() - off)));
  }
  return sums;
}

}  // namespace elastra::checkpoint
