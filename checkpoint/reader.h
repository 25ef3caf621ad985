// Reading checkpoints: list the committed ones, verify them, and load the regions a rank needs
// with seek-and-read (no whole-file load), every byte checked against its checksum before it is
// handed over, falling back to the previous committed checkpoint on any fault.
// CheckpointReader: ReadRegion() may be called from several threads at once (reads are pread);
// the free functions are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "elastra/status.h"
#include "checkpoint/env.h"
#include "checkpoint/format.h"

namespace elastra::checkpoint {

struct CheckpointInfo {
  std::string dir;
  std::string job;
  int64_t step = 0;
  uint64_t generation = 0;
  Layout layout;
  uint64_t bytes = 0;  // all shard files
  size_t files = 0;
  size_t tensors = 0;
};

// The committed checkpoints under `root`, newest first (by step, then generation). A directory
// without a MANIFEST is not a checkpoint and is skipped silently; one whose manifest cannot be
// read or decoded is skipped and described in `*faults` (when given). kNotFound when `root` does
// not exist.
StatusOr<std::vector<CheckpointInfo>> ListCheckpoints(Env* env, const std::string& root,
                                                      std::vector<std::string>* faults = nullptr);

class CheckpointReader {
 public:
  // Reads and validates DIR/MANIFEST, then checks that every shard file it names exists with the
  // recorded size and a valid header for this checkpoint. kNotFound (no manifest: not committed),
  // kProtocolMismatch (unknown version) or kCorrupt, each naming the file and the reason.
  static StatusOr<std::unique_ptr<CheckpointReader>> Open(Env* env, const std::string& dir);
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const Manifest& manifest() const { return manifest_; }
  const std::string& dir() const { return dir_; }

  // Fills `out` (row-major, want.volume() x element size bytes) with box `want` of tensor
  // `tensor`. Reads only the checksum chunks of the stored regions that intersect `want` and
  // verifies each before using it. `out` is a staging buffer, not a live tensor: when `want` is
  // exactly a stored region the bytes are read straight into it and verified there, so after a
  // fault its content is unspecified. kInvalidArgument for an unknown tensor or a bad box/size;
  // kCorrupt naming the file and the reason (a replica of the same box is tried first).
  Status ReadRegion(const std::string& tensor, const Box& want, std::span<std::byte> out);

  // Reads every region of every file and checks every checksum. Returns the first fault (kCorrupt
  // naming the file) or OK. `*bytes` (when given) counts the bytes checked.
  Status VerifyAll(uint64_t* bytes = nullptr);

  // Bytes read from shard files so far.
  uint64_t bytes_read() const { return bytes_read_.load(); }

 private:
  CheckpointReader(Env* env, std::string dir, Manifest m);
  // Reads chunks [c0, c1) of region `r` into `dst` and verifies each.
  Status ReadChunks(const TensorEntry& t, const RegionEntry& r, uint64_t c0, uint64_t c1,
                    std::byte* dst);
  // Fills the part of `out` (box `want`) that stored box `r.box` covers.
  Status CopyIntersection(const TensorEntry& t, const RegionEntry& r, const Box& want,
                          std::span<std::byte> out);

  Env* env_;
  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<RandomAccessFile>> files_;
  std::atomic<uint64_t> bytes_read_{0};
};

// What a rank needs of one tensor: the boxes `pieces` (one box for a TP/PP shard, up to three for
// a ZeRO flat range, see FlatRangePieces), loaded one after the other into one buffer. When
// `shape` is not empty the checkpoint's tensor must have this global shape and dtype (else the
// checkpoint is refused).
struct RegionRequest {
  std::string tensor;
  std::vector<Box> pieces;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kFloat32;
};

// A verified load: the scalars and, for every request in order, the bytes of its pieces.
struct LoadedState {
  std::string dir;
  std::string job;
  int64_t step = 0;
  uint64_t generation = 0;
  Layout layout;
  std::vector<std::pair<std::string, int64_t>> scalars;
  std::vector<std::vector<uint8_t>> regions;
  // Newer committed checkpoints that were tried and refused, each "DIR: reason".
  std::vector<std::string> skipped;
};

// Loads the requested regions of the checkpoint in `dir`, `threads` requests at a time (reads of
// different regions overlap on the device); all reads and checks happen before anything is
// returned. Errors as CheckpointReader::Open and ReadRegion.
StatusOr<LoadedState> LoadCheckpoint(Env* env, const std::string& dir,
                                     const std::vector<RegionRequest>& requests, int threads = 4);

// Tries the committed checkpoints under `root`, newest first, and returns the first that loads
// cleanly; every refused one is logged and listed in LoadedState::skipped. kNotFound when no
// committed checkpoint exists; kCorrupt listing every fault when none loads.
StatusOr<LoadedState> LoadLatest(Env* env, const std::string& root,
                                 const std::vector<RegionRequest>& requests, int threads = 4);

}  // namespace elastra::checkpoint
