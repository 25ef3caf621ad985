// Env: the filesystem seam (as leveldb's Env) of the checkpoint engine and the journal. Everything
// they do to files goes through it, so tests can swap in FaultInjectionEnv to fail a write, fill the
// disk or cut power between a write and a rename. PosixEnv is the real one. Env implementations
// are thread-safe; a WritableFile or RandomAccessFile is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "elastra/status.h"

namespace elastra {

// A file opened for writing from its start (NewWritableFile) or after its end (NewAppendableFile).
// Bytes are durable only after Sync().
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends all of `data`. kResourceExhausted when the disk is full, kInternal on other errors.
  virtual Status Append(std::span<const std::byte> data) = 0;
  // fsync: the data appended so far survives a power cut. kInternal on failure.
  virtual Status Sync() = 0;
  // Closes the file; later calls fail. kInternal on failure.
  virtual Status Close() = 0;
};

// A file read at explicit offsets (pread); nothing else is loaded.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads exactly `n` bytes at `offset` into `out`. kCorrupt ("truncated") when the file ends
  // first, kInternal on an I/O error.
  virtual Status Read(uint64_t offset, size_t n, std::byte* out) const = 0;
  // The file's size in bytes.
  virtual StatusOr<uint64_t> Size() const = 0;
  // A hint that [offset, offset + n) will be read soon: the kernel may start reading it ahead
  // (posix_fadvise WILLNEED), so the device works while the caller checks what it read before.
  // Never fails; the default does nothing.
  virtual void Prefetch(uint64_t offset, uint64_t n) const {
    (void)offset;
    (void)n;
  }
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide PosixEnv. Never null, never deleted.
  static Env* Default();

  // Creates or truncates `path`. kInternal (with the path and errno text) on failure.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  // The same, bypassing the page cache (O_DIRECT) where the filesystem allows it: appends whose
  // address and size are multiples of 4 KiB go straight to the device; any other append, or a
  // filesystem without O_DIRECT, silently uses the page cache. Large checkpoints neither evict
  // the training job's page cache nor wait behind dirty-page throttling. Defaults to
  // NewWritableFile().
  virtual StatusOr<std::unique_ptr<WritableFile>> NewDirectWritableFile(const std::string& path) {
    return NewWritableFile(path);
  }
  // Opens `path` for appending after its end, creating it when missing, readable and writable by
  // its owner only (0600): an appended file is a log of private state (the coordinator's
  // journal). kInternal (with the path and errno text) on failure.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) = 0;
  // Cuts `path` to its first `size` bytes and makes that durable (ftruncate, fsync). Appends
  // through a file from NewAppendableFile go on at the new end. kNotFound when absent, kInternal
  // on other errors.
  virtual Status TruncateFile(const std::string& path, uint64_t size) = 0;
  // kNotFound when `path` does not exist, kInternal on other errors.
  virtual StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // Creates one directory; OK when it already exists. kInternal on failure.
  virtual Status CreateDir(const std::string& path) = 0;
  // fsyncs a directory, making the creations, renames and removals inside it durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // rename(2): atomic replacement of `to`. kInternal on failure.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // kNotFound when absent.
  virtual Status RemoveFile(const std::string& path) = 0;
  // Removes an empty directory. kNotFound when absent.
  virtual Status RemoveDir(const std::string& path) = 0;
  // The names in `dir` (no "." or ".."), sorted. kNotFound when `dir` does not exist.
  virtual StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) = 0;
  // kNotFound when absent.
  virtual StatusOr<uint64_t> GetFileSize(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;

  // Writes `data` to `path` atomically: a temporary name, fsync, rename, fsync of the directory.
  // Either the old content (or no file) or all of `data` is visible afterwards, even after a
  // power cut. The temporary file is removed on failure.
  Status WriteFileAtomically(const std::string& path, std::span<const std::byte> data);
  // Removes the files in `dir` and then `dir` (one level; checkpoint directories are flat).
  Status RemoveDirRecursively(const std::string& dir);
};

// Joins a directory and a name with one '/'.
std::string JoinPath(const std::string& dir, const std::string& name);
// The directory part of `path` ("." when there is none).
std::string DirName(const std::string& path);

// Wraps another Env and injects faults. Tracks what was synced so SimulatePowerLoss() can drop
// what a real power cut would lose: unsynced file data, files and renames whose directory was not
// synced. Thread-safe.
class FaultInjectionEnv : public Env {
 public:
  explicit FaultInjectionEnv(Env* base) : base_(base) {}

  // The `n`-th Append from now (1 = the next one) fails with kInternal and writes nothing.
  void FailNthWrite(int n);
  // After `bytes` more appended bytes (over all files) the disk is full: the Append that crosses
  // the limit writes what fits and returns kResourceExhausted, as write(2) with ENOSPC.
  void SetDiskSpace(uint64_t bytes);
  // The `n`-th RenameFile from now does not happen: the power is cut just before it. That call and
  // every later mutating call fail with kAborted until Reset(). Call SimulatePowerLoss() to see
  // what the disk holds after the cut.
  void CutPowerBeforeNthRename(int n);
  // Drops what a power cut loses: truncates each file written through this Env to its last synced
  // size, removes files created since the last SyncDir of their directory, and undoes renames
  // whose directory was not synced since.
  Status SimulatePowerLoss();
  // Clears every armed fault and the "power cut" state.
  void Reset();

  bool power_cut() const;
  int writes() const;   // Appends seen
  int renames() const;  // RenameFile calls seen

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewDirectWritableFile(const std::string& path) override;
  // Appends count as writes (FailNthWrite, SetDiskSpace); what the file held before is synced.
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override;
  Status TruncateFile(const std::string& path, uint64_t size) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_->NewRandomAccessFile(path);
  }
  Status CreateDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    return base_->GetChildren(dir);
  }
  StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    return base_->GetFileSize(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return base_->IsDirectory(path); }

 private:
  friend class FaultWritableFile;
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
    bool created_unsynced_dir = true;  // created since its directory was last synced
  };
  // Called by files; return the fault to report (OK to proceed). `*allowed` is how many bytes of
  // the append may be written.
  Status BeforeAppend(const std::string& path, size_t n, size_t* allowed);
  void AfterAppend(const std::string& path, size_t n);
  void AfterSync(const std::string& path);
  Status CheckPower() const;
  // Tracks `path` as a file of `size` bytes, all synced, and wraps it.
  StatusOr<std::unique_ptr<WritableFile>> Wrap(const std::string& path,
                                               StatusOr<std::unique_ptr<WritableFile>> base,
                                               uint64_t size = 0, bool existed = false);

  Env* base_;
  mutable std::mutex mu_;
  std::map<std::string, FileState> files_;
  struct PendingRename {
    std::string from, to;
  };
  std::vector<PendingRename> pending_renames_;
  std::vector<std::string> unsynced_dirs_;  // directories created since their parent was synced
  int writes_ = 0;
  int renames_ = 0;
  int fail_write_at_ = 0;    // absolute write number to fail, 0 = none
  int cut_at_rename_ = 0;    // absolute rename number to cut at, 0 = none
  bool disk_limited_ = false;
  uint64_t disk_left_ = 0;
  bool power_cut_ = false;
};

}  // namespace elastra
