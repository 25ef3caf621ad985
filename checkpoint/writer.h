// CheckpointWriter: a rank's asynchronous, atomic checkpoint of its shards; CommitCheckpoint: the
// one manifest that makes a checkpoint exist, written after every rank reported success.
//
//   step loop:   writer->Snapshot(id, ViewOf(state))   // waits only for the copy to host memory
//   background:  shard file -> tmp name, fsync, rename, fsync dir -> on_written(descriptor)
//   committer:   CommitCheckpoint(options, id, layout, descriptors of all ranks)
//
// CheckpointWriter is thread-safe; one background thread per writer, at most one write in flight.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "elastra/layout.h"
#include "elastra/status.h"
#include "common/env.h"
#include "checkpoint/format.h"

namespace elastra::checkpoint {

// Bytes of one box of a tensor as a rank saves them: the box `region` of the global tensor,
// row-major. A rank may save several boxes of the same tensor (a ZeRO shard is up to 3 boxes, see
// FlatRangePieces); boxes of one tensor must be distinct.
struct TensorShard {
  std::string name;
  std::vector<int64_t> shape;  // global shape
  DataType dtype = DataType::kFloat32;
  RuleEntry rule;
  Box region;
  std::span<const std::byte> data;  // region.volume() x element size bytes
  // The bytes are in device memory: Snapshot() copies them with WriterOptions::copy_from_device.
  bool on_device = false;
};

// What a rank saves: its shards and the scalars (step, data cursor, seeds, ...). The spans must
// stay valid and unchanged until Snapshot() returns. See collection_adapter.h for the view of a
// TensorCollection.
struct StateView {
  std::vector<TensorShard> tensors;
  std::vector<std::pair<std::string, int64_t>> scalars;
};

struct CheckpointId {
  std::string job;
  int64_t step = 0;
  uint64_t generation = 0;
};

// The checkpoint directory of `id` under `root`.
std::string CheckpointDir(const std::string& root, const CheckpointId& id);

struct WriterOptions {
  // The filesystem. nullptr = Env::Default().
  Env* env = nullptr;
  // The checkpoint root; created if missing.
  std::string root;
  // This rank's number; names its shard file.
  int rank = 0;
  // What Snapshot() does while the previous write is still in flight.
  enum class WhenBusy { kWait, kSkip };
  WhenBusy when_busy = WhenBusy::kWait;
  // Checksum granularity: a partial read verifies only the chunks it touches.
  uint64_t chunk_bytes = kDefaultChunkBytes;
  // Bytes per write(2) call (a multiple of 4 KiB keeps direct I/O on).
  size_t write_block_bytes = 64u << 20;
  // The background write thread's nice value relative to the process (Linux keeps one per
  // thread). 0: the training thread's. A positive value lets the Snapshot() copy, which the step
  // waits for, take the CPU first on a loaded machine; on an idle one it made the stall longer
  // here (the copy then waited on the writer's turns), hence off by default.
  int write_thread_nice = 0;
  // Whether the background write starts while Snapshot() is still copying (block by block behind
  // the copy) or only once the copy is done. Overlapping can shorten the save, but the write's
  // DMA and syscalls slow the copy the step waits for: on the 2-core test VM the stall was
  // 1.8-3.3x a memcpy with it and 1.2-1.4x without, the save as fast either way
  // (docs/checkpoints.md), hence off by default.
  bool write_while_copying = false;
  // Write shard files with O_DIRECT (Env::NewDirectWritableFile): the file image is 4 KiB
  // aligned and padded, so the bytes go straight to the device without filling the page cache.
  bool direct_io = true;
  // Host staging memory allocated and touched up front, so the first Snapshot() does not pay
  // page faults. 0 = allocate on the first Snapshot(). The buffer is reused by later snapshots.
  size_t reserve_bytes = 0;
  // For shards in device memory (TensorShard::on_device): copies `n` bytes from the device into
  // the staging image. A view with device shards and no copy function is kInvalidArgument.
  std::function<Status(std::byte* dst, const std::byte* device_src, size_t n)> copy_from_device;
  // Page-lock the staging image when it is allocated, and undo it before it is freed, so that
  // device copies into it run at full speed. Both or neither. A pin that fails is logged and the
  // image stays pageable: slower copies, same bytes.
  std::function<Status(void* p, size_t n)> pin_staging;
  std::function<void(void* p)> unpin_staging;
  // Called on the background thread when a write finished (the descriptor, or why it failed),
  // with the seconds from Snapshot()'s start to the end of the write (the shard durable under its
  // name). Report the descriptor to the committer from here. May be empty.
  std::function<void(const CheckpointId&, const StatusOr<ShardDescriptor>&, double seconds)>
      on_written;
  // Asked on the background thread once the shard file is written and synced, just before it
  // takes its final name: an error stops there (the temporary file is removed, nothing of the
  // write is visible, the write fails with that error). A fenced worker says no, so that a write
  // it started before it was stopped and evicted never appears under its generation's name. May
  // be empty (always yes).
  std::function<Status()> may_publish;
};

class CheckpointWriter {
 public:
  enum class SnapshotResult { kStarted, kSkipped };

  // kInvalidArgument for an empty root or a chunk size below kMinChunkBytes; the Env's error when
  // the root cannot be created.
  static StatusOr<std::unique_ptr<CheckpointWriter>> Create(WriterOptions options);
  // Waits for the write in flight.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Copies `state` into host memory and hands the write to the background thread, which starts
  // appending each block as soon as the copy has passed it; returns as soon as the copy is done
  // (the caller may then change its tensors). A copy that fails (copy_from_device) is returned
  // here and reported as a failed write to on_written. When a write is in flight
  // it first waits (kWait) or returns kSkipped without copying (kSkip); either is logged.
  // kInvalidArgument for a malformed view (a region outside its shape, a size that does not
  // match, the same box of a tensor twice); kResourceExhausted when the staging memory cannot be allocated.
  StatusOr<SnapshotResult> Snapshot(const CheckpointId& id, const StateView& state);

  // Waits for the write in flight and returns its outcome: the descriptor to report, or why it
  // failed (the Env's error; nothing of it is visible under its final name).
  // kFailedPrecondition when no write was ever started.
  StatusOr<ShardDescriptor> WaitForWrite();

  // Snapshot() then WaitForWrite().
  StatusOr<ShardDescriptor> Write(const CheckpointId& id, const StateView& state);

  bool in_flight() const;
  // Seconds the last Snapshot() spent copying.
  double last_copy_seconds() const;

 private:
  explicit CheckpointWriter(WriterOptions options);
  void Loop();
  StatusOr<ShardDescriptor> WriteShard(const CheckpointId& id);
  Status EnsureCapacity(size_t bytes);
  void ReleaseImage();
  // Until Snapshot()'s copy into the image ended (done or failed).
  void WaitForCopy();

  WriterOptions options_;
  Env* env_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool in_flight_ = false;
  bool stop_ = false;
  std::optional<CheckpointId> pending_;
  std::optional<StatusOr<ShardDescriptor>> last_result_;
  double last_copy_seconds_ = 0;
  std::chrono::steady_clock::time_point snapshot_start_;  // of the write in flight

  // The staging image of the shard file (header, then the regions at their offsets), owned by the
  // background thread while a write is in flight.
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> image_;
  size_t capacity_ = 0;
  size_t image_bytes_ = 0;
  bool image_pinned_ = false;
  // While Snapshot() copies (guarded by mu_): the image below copied_ is final, so the background
  // thread may append it; copy_failed_ ends the write.
  uint64_t copied_ = 0;
  bool copy_failed_ = false;
  ShardDescriptor staged_;  // regions with offsets, checksums filled by the background thread

  std::thread thread_;
};

struct CommitOptions {
  // The filesystem. nullptr = Env::Default().
  Env* env = nullptr;
  std::string root;
  // Committed checkpoints kept; older ones are removed after a commit. At least 1.
  int keep_last = 3;
};

// Writes the manifest of checkpoint `id` from the descriptors every rank reported (call it once,
// on the designated rank or the coordinator, after all ranks succeeded). Checks that every shard
// file is present with its reported size, the shapes agree and the regions tile every tensor; then
// writes MANIFEST atomically and prunes to keep_last. Returns the checkpoint directory.
// kInvalidArgument for inconsistent descriptors, kCorrupt/kNotFound for a missing or wrong file,
// the Env's error when writing fails (the checkpoint then does not exist).
StatusOr<std::string> CommitCheckpoint(const CommitOptions& options, const CheckpointId& id,
                                       const Layout& layout,
                                       std::vector<ShardDescriptor> shards);

// Removes committed checkpoints beyond the newest `keep_last`, and uncommitted directories older
// than the newest committed one (leftovers of failed attempts). Newer uncommitted directories are
// left alone: their write may be in flight.
Status PruneCheckpoints(Env* env, const std::string& root, int keep_last);

// Removes every uncommitted checkpoint directory under `root` (no MANIFEST), newer ones included,
// and touches no committed one: for the end of a job, when no write can be in flight any more
// (docs/checkpoints.md, "How a job ends"). The number removed, or the first error (the others
// are still tried).
StatusOr<int> RemoveUncommittedCheckpoints(Env* env, const std::string& root);

}  // namespace elastra::checkpoint
