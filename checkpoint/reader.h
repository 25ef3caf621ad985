// Reading checkpoints: list the committed ones, verify them, and load the regions a rank needs
// with seek-and-read (no whole-file load), every byte checked against its checksum before it is
// handed over, falling back to the previous committed checkpoint on any fault. Verification
// covers every byte of every file: the regions by their checksums, the shard headers by theirs,
// the zeros around the regions (format 2) by being zero, the manifest by its frame.
// CheckpointReader: ReadRegion() may be called from several threads at once (reads are pread);
// the free functions are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "elastra/host_bytes.h"
#include "elastra/status.h"
#include "common/env.h"
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

// A part of a checkpoint file that does not verify: file bytes [begin, end) and why.
struct Fault {
  std::string file;  // path
  uint64_t begin = 0;
  uint64_t end = 0;
  std::string what;
  // "PATH: bytes BEGIN..END: WHAT"
  std::string ToString() const;
};

class CheckpointReader {
 public:
  // Reads and validates DIR/MANIFEST, then checks that every shard file it names exists with the
  // recorded size and a valid header for this checkpoint. kNotFound (no manifest: not committed),
  // kProtocolMismatch (unknown version) or kCorrupt, each naming the file and the reason. Bytes
  // of a header block that should be zero and are not are no reason to refuse the checkpoint
  // (the header's fields verified): they are kept in outside_faults().
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

  // Reads every byte of every shard file: checks every checksum and, from format 2 on, that every
  // byte outside the regions is zero. Returns the first fault (kCorrupt naming the file and the
  // bytes) or OK; `*faults` (when given) receives every fault found, in file order, the header
  // faults of Open() included. `*bytes` (when given) counts the bytes checked.
  Status VerifyAll(uint64_t* bytes = nullptr, std::vector<Fault>* faults = nullptr);

  // Damage found outside the regions so far (a header block's zeros; when a load read a
  // region's last chunk, the padding after it): the regions verified regardless, so loads go on
  // and report these as warnings. Thread-safe.
  std::vector<Fault> outside_faults() const;

  // Whether the files promise zeros outside their regions (format 2 and later).
  bool padding_checked() const { return manifest_.version >= 2; }

  // Bytes read from shard files so far.
  uint64_t bytes_read() const { return bytes_read_.load(); }

 private:
  CheckpointReader(Env* env, std::string dir, Manifest m);
  friend class RegionLoader;  // a load's threads read chunks directly (reader.cc)
  // Reads chunks [c0, c1) of region `r` into `dst` and verifies each right after reading it.
  // With `faults`, every chunk is read and each mismatch recorded (the first returned); without,
  // the first mismatch ends the read.
  Status ReadChunks(const TensorEntry& t, const RegionEntry& r, uint64_t c0, uint64_t c1,
                    std::byte* dst, std::vector<Fault>* faults = nullptr);
  // Fills the part of `out` (box `want`) that stored box `r.box` covers.
  Status CopyIntersection(const TensorEntry& t, const RegionEntry& r, const Box& want,
                          std::span<std::byte> out);
  // Checks that file bytes [begin, end) of file `f` are zero; a fault when not.
  Status CheckZeros(uint32_t f, uint64_t begin, uint64_t end, const std::string& what,
                    std::vector<Fault>* faults, uint64_t* checked);
  // The padding after region `r` up to the next 4 KiB boundary (format 2): one small read of a
  // page just read; a fault goes to outside_faults() and the log, never to the caller.
  void CheckPaddingAfter(const TensorEntry& t, const RegionEntry& r);
  void AddOutsideFault(Fault f);
  std::string PathOf(uint32_t f) const;

  Env* env_;
  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<RandomAccessFile>> files_;
  std::atomic<uint64_t> bytes_read_{0};
  mutable std::mutex mu_;
  std::vector<Fault> outside_faults_;  // guarded by mu_
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
  std::vector<HostBytes> regions;
  // Newer committed checkpoints that were tried and refused, each "DIR: reason".
  std::vector<std::string> skipped;
  // Damage outside the regions of the loaded checkpoint that the load came across (each logged
  // as a warning naming the file): the regions verified, so the load stands.
  std::vector<Fault> warnings;
};

// Loads the requested regions of the checkpoint in `dir` on `threads` threads: a piece that is a
// stored region is read straight into its buffer in blocks of a few checksum chunks, each chunk
// verified as soon as it is read, the next blocks asked ahead of the reads (Prefetch), and the
// blocks of all pieces shared among the threads in file order; other pieces are assembled from
// the stored boxes that intersect them. Buffers of 4 MiB and more ask for huge pages. All reads
// and checks happen before anything is returned. Errors as CheckpointReader::Open and
// ReadRegion.
StatusOr<LoadedState> LoadCheckpoint(Env* env, const std::string& dir,
                                     const std::vector<RegionRequest>& requests, int threads = 4);

// The same straight into `into`, one buffer per request of exactly the request's bytes (the
// shards of the collection being restored, say): nothing is allocated and nothing copied, and
// LoadedState::regions stays empty. On an error the buffers' content is unspecified (partly
// overwritten, perhaps with bytes that did not verify): load into memory whose content is to be
// replaced anyway. Errors as LoadCheckpoint, and kInvalidArgument for a buffer of the wrong size.
StatusOr<LoadedState> LoadCheckpointInto(Env* env, const std::string& dir,
                                         const std::vector<RegionRequest>& requests,
                                         const std::vector<std::span<std::byte>>& into,
                                         int threads = 4);

// Tries the committed checkpoints under `root`, newest first, and returns the first that loads
// cleanly; every refused one is logged and listed in LoadedState::skipped. kNotFound when no
// committed checkpoint exists; kCorrupt listing every fault when none loads.
StatusOr<LoadedState> LoadLatest(Env* env, const std::string& root,
                                 const std::vector<RegionRequest>& requests, int threads = 4);
// The same with LoadCheckpointInto.
StatusOr<LoadedState> LoadLatestInto(Env* env, const std::string& root,
                                     const std::vector<RegionRequest>& requests,
                                     const std::vector<std::span<std::byte>>& into,
                                     int threads = 4);

}  // namespace elastra::checkpoint
