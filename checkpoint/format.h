// The on-disk format of a checkpoint: one shard file per rank and one manifest, in a directory
// named after the step and generation. The manifest (cereal binary inside a versioned, checksummed
// frame) is the commit record: a directory without one does not exist for loading. See
// docs/checkpoints.md. Plain value types and pure functions; thread-compatible.
//
//   ROOT/ckpt-000000001200-g000007/
//     shard-00000.bin   4 KiB header, then each region's bytes (row-major), 4 KiB aligned
//     shard-00001.bin
//     MANIFEST          magic, version, payload size, XXH3-64 of payload, cereal payload
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "elastra/data_type.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra::checkpoint {

// The version this build writes, and the oldest it reads. Version 2 promises that every byte of a
// shard file outside its regions (the rest of the header block, the padding between regions and
// after the last) is zero, so that a check can cover every byte of a checkpoint; version 1 files
// load as before, their padding unchecked (docs/checkpoints.md, "Every byte is checked").
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr uint32_t kOldestReadableVersion = 1;
inline constexpr char kManifestName[] = "MANIFEST";
inline constexpr uint64_t kShardHeaderBytes = 4096;
inline constexpr uint64_t kRegionAlignment = 4096;
// Bounds applied to everything read from a file before anything is allocated.
inline constexpr int kMaxDims = 8;
inline constexpr uint64_t kMaxManifestBytes = 64ull << 20;
inline constexpr uint64_t kMaxTensorBytes = 1ull << 40;
inline constexpr uint64_t kMinChunkBytes = 4096;
inline constexpr uint64_t kDefaultChunkBytes = 4ull << 20;

// A box of a tensor: [begin[d], end[d]) in every dimension d of the global shape.
struct Box {
  std::vector<int64_t> begin;
  std::vector<int64_t> end;

  // The whole of a tensor of `shape`.
  static Box Whole(const std::vector<int64_t>& shape);
  uint64_t volume() const;  // elements; 0 for an empty box
  bool empty() const { return volume() == 0; }
  bool operator==(const Box&) const = default;
  std::string ToString() const;  // "[0:4,2:8]"

  template <class Archive>
  void serialize(Archive& ar) {
    ar(begin, end);
  }
};

// The intersection of two boxes of the same rank (may be empty).
Box Intersect(const Box& a, const Box& b);

// The elements of 2-D box `box` whose row-major flat index inside the box lies in
// [flat_begin, flat_end) (a ZeRO shard), as at most 3 boxes in flat order: a partial first row,
// full middle rows, a partial last row. Concatenated row-major they are the flat range.
std::vector<Box> FlatRangePieces(const Box& box, int64_t flat_begin, int64_t flat_end);

// The sharding rule a tensor was saved under (elastra::ShardingRule's fields, see
// <elastra/sharding.h>). Recorded for tools and for loaders that want to re-derive regions; the
// engine itself never interprets it: the regions in the manifest are explicit boxes.
struct RuleEntry {
  int32_t tp_split_dim = -1;  // -1: replicated over TP
  int32_t layer = -1;         // -1: held by every pipeline stage
  bool zero = false;          // ZeRO-1 flat split over DP

  std::string ToString() const;  // "replicated", "tp_split_dim=1,layer=3,zero"
  bool operator==(const RuleEntry&) const = default;
  template <class Archive>
  void serialize(Archive& ar) {
    ar(tp_split_dim, layer, zero);
  }
};

// Where the bytes of one box of a tensor are: file `file` (an index into Manifest::files), `bytes`
// bytes at `offset`, row-major inside the box, with an XXH3-64 checksum per `chunk_bytes` chunk
// (the last chunk may be shorter), so a partial read verifies only the chunks it touches.
struct RegionEntry {
  Box box;
  uint32_t file = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  std::vector<uint64_t> chunk_checksums;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(box, file, offset, bytes, chunk_bytes, chunk_checksums);
  }
};

struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;  // global
  int32_t dtype = 0;           // elastra::DataType
  RuleEntry rule;
  std::vector<RegionEntry> regions;  // replicas of the same box may appear more than once

  template <class Archive>
  void serialize(Archive& ar) {
    ar(name, shape, dtype, rule, regions);
  }
};

struct FileEntry {
  std::string name;  // relative to the checkpoint directory
  int32_t rank = 0;
  uint64_t size = 0;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(name, rank, size);
  }
};

struct Manifest {
  uint32_t version = kFormatVersion;
  std::string job;
  uint64_t generation = 0;
  int64_t step = 0;
  Layout layout;
  // The small state: step, data cursor, seeds, optimizer scalars (TensorCollection's scalars).
  std::vector<std::pair<std::string, int64_t>> scalars;
  std::vector<FileEntry> files;
  std::vector<TensorEntry> tensors;
  int64_t created_unix_ms = 0;

  const TensorEntry* FindTensor(const std::string& name) const;
  uint64_t total_file_bytes() const;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(version, job, generation, step, layout, scalars, files, tensors, created_unix_ms);
  }
};

// What one rank reports after its shard file is durable: everything the committer needs to write
// the manifest. The regions' `file` fields are 0 (this rank's file). Travels to the committer as
// EncodeShardDescriptor() bytes.
struct ShardDescriptor {
  int32_t rank = 0;
  std::string file;  // name inside the checkpoint directory
  uint64_t file_size = 0;
  std::vector<std::pair<std::string, int64_t>> scalars;  // as snapshotted
  std::vector<TensorEntry> tensors;

  template <class Archive>
  void serialize(Archive& ar) {
    ar(rank, file, file_size, scalars, tensors);
  }
};

// Bytes per element of a dtype; 0 for a value no DataType has (bad input).
size_t ElementSize(int32_t dtype);

// "ckpt-000000001200-g000007" and back (false when `name` is not one).
std::string CheckpointDirName(int64_t step, uint64_t generation);
bool ParseCheckpointDirName(const std::string& name, int64_t* step, uint64_t* generation);
// "shard-00003.bin"
std::string ShardFileName(int rank);

// The fixed 4 KiB header block at the start of every shard file: magic (bytes 0..8), version
// (8..12), rank (12..16), step (16..24), generation (24..32), XXH3-64 of bytes 0..32 (32..40),
// then zeros up to kShardHeaderBytes.
inline constexpr uint64_t kShardHeaderFieldBytes = 40;
struct ShardHeader {
  uint32_t version = kFormatVersion;
  int32_t rank = 0;
  int64_t step = 0;
  uint64_t generation = 0;
};
void EncodeShardHeader(const ShardHeader& h, std::byte* out /* kShardHeaderBytes */);
// kCorrupt (bad magic or checksum) or kProtocolMismatch (unknown version), naming `path` and
// the bytes at fault. Reads the fields only (the zeros after them are the reader's to check).
StatusOr<ShardHeader> DecodeShardHeader(std::span<const std::byte> in, const std::string& path);

std::string EncodeManifest(const Manifest& m);
// Checks the frame (magic, version, reserved zeros, size, checksum), decodes with every size
// bounded, then ValidateManifest(). kProtocolMismatch for an unknown version, kCorrupt otherwise;
// the message names `path`, the bytes at fault where the frame says which, and the reason.
StatusOr<Manifest> DecodeManifest(std::span<const std::byte> in, const std::string& path);
// The consistency rules: known dtypes, at most kMaxDims dimensions, boxes inside their shapes,
// region bytes = volume x element size, one checksum per chunk, regions inside their files and not
// overlapping there, and the distinct boxes of a tensor tiling it exactly (sizes that add up).
Status ValidateManifest(const Manifest& m);

std::string EncodeShardDescriptor(const ShardDescriptor& d);
StatusOr<ShardDescriptor> DecodeShardDescriptor(std::span<const std::byte> in);

// XXH3-64 of a buffer.
uint64_t Checksum(const void* data, size_t n);
// The bytes of `data` from the first that is not zero to the last, [first, last + 1), as offsets
// into `data`; {0, 0} when every byte is zero.
std::pair<uint64_t, uint64_t> NonZeroSpan(std::span<const std::byte> data);
// One XXH3-64 per `chunk_bytes` chunk of `data`.
std::vector<uint64_t> ChunkChecksums(std::span<const std::byte> data, uint64_t chunk_bytes);

inline std::span<const std::byte> AsBytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

}  // namespace elastra::checkpoint
