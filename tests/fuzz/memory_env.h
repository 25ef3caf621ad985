// MemoryEnv: a Env that keeps every file and directory in memory, so a fuzz target can
// hand the journal, the checkpoint reader or the coordinator a filesystem built from its input
// without touching the disk. Paths are plain strings (no normalisation beyond JoinPath's). Writes
// are visible at once; Sync and SyncDir do nothing. Thread-safe (one lock), as every Env.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/env.h"

namespace elastra::fuzz {

class MemoryEnv : public Env {
 public:
  // Puts `contents` at `path`, creating the directories above it.
  void SetFile(const std::string& path, std::string contents);
  // The content of `path`, or nullptr when absent. Valid until the next call.
  const std::string* GetFile(const std::string& path) const;

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override;
  Status TruncateFile(const std::string& path, uint64_t size) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  Status CreateDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override;
  StatusOr<uint64_t> GetFileSize(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  bool IsDirectory(const std::string& path) override;

 private:
  friend class MemoryWritableFile;
  friend class MemoryRandomAccessFile;
  void AddParents(const std::string& path);  // mu_ held

  mutable std::mutex mu_;
  // Shared so that an open file keeps its bytes after a rename or removal, as on POSIX.
  std::map<std::string, std::shared_ptr<std::string>> files_;
  std::set<std::string> dirs_;
};

}  // namespace elastra::fuzz
