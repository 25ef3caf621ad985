#include "tests/fuzz/memory_env.h"

#include <algorithm>
#include <cstring>

namespace elastra::fuzz {

class MemoryWritableFile : public WritableFile {
 public:
  MemoryWritableFile(MemoryEnv* env, std::shared_ptr<std::string> data)
      : env_(env), data_(std::move(data)) {}
  Status Append(std::span<const std::byte> data) override {
    if (closed_) return InternalError("append to a closed file");
    std::lock_guard<std::mutex> lock(env_->mu_);
    data_->append(reinterpret_cast<const char*>(data.data()), data.size());
    return OkStatus();
  }
  Status Sync() override { return closed_ ? InternalError("sync of a closed file") : OkStatus(); }
  Status Close() override {
    if (closed_) return InternalError("file closed twice");
    closed_ = true;
    return OkStatus();
  }

 private:
  MemoryEnv* env_;
  std::shared_ptr<std::string> data_;
  bool closed_ = false;
};

class MemoryRandomAccessFile : public RandomAccessFile {
 public:
  MemoryRandomAccessFile(MemoryEnv* env, std::shared_ptr<std::string> data)
      : env_(env), data_(std::move(data)) {}
  Status Read(uint64_t offset, size_t n, std::byte* out) const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    if (offset > data_->size() || n > data_->size() - offset) {
      return CorruptError("truncated: " + std::to_string(n) + " bytes at " +
                          std::to_string(offset) + " of a " + std::to_string(data_->size()) +
                          "-byte file");
    }
    if (n > 0) std::memcpy(out, data_->data() + offset, n);
    return OkStatus();
  }
  StatusOr<uint64_t> Size() const override {
    std::lock_guard<std::mutex> lock(env_->mu_);
    return static_cast<uint64_t>(data_->size());
  }

 private:
  MemoryEnv* env_;
  std::shared_ptr<std::string> data_;
};

void MemoryEnv::AddParents(const std::string& path) {
  for (std::string d = DirName(path); d != "." && d != "/" && !d.empty();
       d = DirName(d)) {
    if (!dirs_.insert(d).second) break;
  }
}

void MemoryEnv::SetFile(const std::string& path, std::string contents) {
  std::lock_guard<std::mutex> lock(mu_);
  AddParents(path);
  files_[path] = std::make_shared<std::string>(std::move(contents));
}

const std::string* MemoryEnv::GetFile(const std::string& path) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  return it == files_.end() ? nullptr : it->second.get();
}

StatusOr<std::unique_ptr<WritableFile>> MemoryEnv::NewWritableFile(
    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dirs_.count(path)) return InternalError(path + " is a directory");
  AddParents(path);
  auto data = std::make_shared<std::string>();
  files_[path] = data;
  return std::unique_ptr<WritableFile>(new MemoryWritableFile(this, data));
}

StatusOr<std::unique_ptr<WritableFile>> MemoryEnv::NewAppendableFile(
    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dirs_.count(path)) return InternalError(path + " is a directory");
  auto& data = files_[path];
  if (!data) {
    AddParents(path);
    data = std::make_shared<std::string>();
  }
  return std::unique_ptr<WritableFile>(new MemoryWritableFile(this, data));
}

Status MemoryEnv::TruncateFile(const std::string& path, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFoundError(path + " does not exist");
  if (size < it->second->size()) it->second->resize(size);
  return OkStatus();
}

StatusOr<std::unique_ptr<RandomAccessFile>> MemoryEnv::NewRandomAccessFile(
    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFoundError(path + " does not exist");
  return std::unique_ptr<RandomAccessFile>(
      new MemoryRandomAccessFile(this, it->second));
}

Status MemoryEnv::CreateDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.count(path)) return InternalError(path + " is a file");
  AddParents(path);
  dirs_.insert(path);
  return OkStatus();
}

Status MemoryEnv::SyncDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return dirs_.count(path) ? OkStatus() : InternalError(path + " is not a directory");
}

Status MemoryEnv::RenameFile(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return InternalError("rename " + from + ": no such file");
  if (dirs_.count(to)) return InternalError("rename to " + to + ": a directory");
  auto data = it->second;
  files_.erase(it);
  AddParents(to);
  files_[to] = std::move(data);
  return OkStatus();
}

Status MemoryEnv::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.erase(path) ? OkStatus() : NotFoundError(path + " does not exist");
}

Status MemoryEnv::RemoveDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(path)) return NotFoundError(path + " does not exist");
  const std::string prefix = path + "/";
  auto has_child = [&](const auto& container) {
    auto it = container.lower_bound(prefix);
    return it != container.end() && it->first.compare(0, prefix.size(), prefix) == 0;
  };
  auto d = dirs_.lower_bound(prefix);
  if (has_child(files_) || (d != dirs_.end() && d->compare(0, prefix.size(), prefix) == 0)) {
    return InternalError("remove " + path + ": not empty");
  }
  dirs_.erase(path);
  return OkStatus();
}

StatusOr<std::vector<std::string>> MemoryEnv::GetChildren(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!dirs_.count(dir)) return NotFoundError(dir + " does not exist");
  std::set<std::string> names;
  for (const auto& [path, data] : files_) {
    if (DirName(path) == dir) names.insert(path.substr(path.find_last_of('/') + 1));
  }
  for (const auto& path : dirs_) {
    if (DirName(path) == dir) names.insert(path.substr(path.find_last_of('/') + 1));
  }
  return std::vector<std::string>(names.begin(), names.end());
}

StatusOr<uint64_t> MemoryEnv::GetFileSize(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return NotFoundError(path + " does not exist");
  return static_cast<uint64_t>(it->second->size());
}

bool MemoryEnv::FileExists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path) > 0 || dirs_.count(path) > 0;
}

bool MemoryEnv::IsDirectory(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return dirs_.count(path) > 0;
}

}  // namespace elastra::fuzz
