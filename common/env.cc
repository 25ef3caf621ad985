#include "common/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace elastra {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

Status IoError(const std::string& what, const std::string& path, int err) {
  std::string m = what + " " + path + ": " + ErrnoText(err);
  if (err == ENOSPC || err == EDQUOT) return ResourceExhaustedError(m);
  if (err == ENOENT) return NotFoundError(m);
  return InternalError(m);
}

constexpr uintptr_t kDirectAlignment = 4096;

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool direct)
      : path_(std::move(path)), fd_(fd), direct_(direct) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::span<const std::byte> data) override {
    if (fd_ < 0) return FailedPreconditionError("write to closed file " + path_);
    if (direct_ && ((reinterpret_cast<uintptr_t>(data.data()) | data.size()) &
                    (kDirectAlignment - 1)) != 0) {
      // O_DIRECT needs aligned memory and sizes: this append and later ones use the page cache.
      int flags = ::fcntl(fd_, F_GETFL);
      if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
        return IoError("fcntl", path_, errno);
      }
      direct_ = false;
    }
    const std::byte* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, std::min<size_t>(left, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EINVAL && direct_) {  // the device refuses this alignment after all
          int flags = ::fcntl(fd_, F_GETFL);
          if (flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0) {
            direct_ = false;
            continue;
          }
        }
        return IoError("write", path_, errno);
      }
      if (n == 0) return IoError("write", path_, ENOSPC);
      p += n;
      left -= static_cast<size_t>(n);
      if (direct_ && left > 0 && (static_cast<size_t>(n) & (kDirectAlignment - 1)) != 0) {
        direct_ = false;  // a short odd write leaves the rest unaligned: finish through the cache
        int flags = ::fcntl(fd_, F_GETFL);
        if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
          return IoError("fcntl", path_, errno);
        }
      }
    }
    return OkStatus();
  }

  Status Sync() override {
    if (fd_ < 0) return FailedPreconditionError("sync of closed file " + path_);
    if (::fdatasync(fd_) != 0) return IoError("fsync", path_, errno);
    return OkStatus();
  }

  Status Close() override {
    if (fd_ < 0) return OkStatus();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return IoError("close", path_, errno);
    return OkStatus();
  }

 private:
  std::string path_;
  int fd_;
  bool direct_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Status Read(uint64_t offset, size_t n, std::byte* out) const override {
    size_t done = 0;
    while (done < n) {
      ssize_t r = ::pread(fd_, out + done, std::min<size_t>(n - done, size_t{1} << 30),
                          static_cast<off_t>(offset + done));
      if (r < 0) {
        if (errno == EINTR) continue;
        return IoError("read", path_, errno);
      }
      if (r == 0) {
        return CorruptError(path_ + ": truncated: wanted " + std::to_string(n) + " bytes at " +
                            std::to_string(offset) + ", the file ends after " +
                            std::to_string(offset + done));
      }
      done += static_cast<size_t>(r);
    }
    return OkStatus();
  }

  StatusOr<uint64_t> Size() const override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return IoError("stat", path_, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  void Prefetch(uint64_t offset, uint64_t n) const override {
    ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(n), POSIX_FADV_WILLNEED);
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, false));
  }

  StatusOr<std::unique_ptr<WritableFile>> NewDirectWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) return NewWritableFile(path);  // e.g. tmpfs
    if (fd < 0) return IoError("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, true));
  }

  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0) return IoError("open", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, false));
  }

  Status TruncateFile(const std::string& path, uint64_t size) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return IoError("open", path, errno);
    Status s;
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
      s = IoError("truncate", path, errno);
    } else if (::fsync(fd) != 0) {
      s = IoError("fsync", path, errno);
    }
    ::close(fd);
    return s;
  }

  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IoError("open", path, errno);
    return std::unique_ptr<RandomAccessFile>(new PosixRandomAccessFile(path, fd));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return IoError("mkdir", path, errno);
    return OkStatus();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return IoError("open directory", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    // Some filesystems do not support fsync on directories; nothing more can be done there.
    if (rc != 0 && err != EINVAL) return IoError("fsync directory", path, err);
    return OkStatus();
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return IoError("rename", from + " -> " + to, errno);
    return OkStatus();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return IoError("remove", path, errno);
    return OkStatus();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return IoError("remove directory", path, errno);
    return OkStatus();
  }

  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return IoError("list", dir, errno);
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
      names.emplace_back(e->d_name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return IoError("stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  bool IsDirectory(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
};

}  // namespace

Env* Env::Default() {
  static PosixEnv* env = new PosixEnv;
  return env;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string DirName(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status Env::WriteFileAtomically(const std::string& path, std::span<const std::byte> data) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  auto file = NewWritableFile(tmp);
  if (!file.ok()) return file.status();
  Status s = (*file)->Append(data);
  if (s.ok()) s = (*file)->Sync();
  Status c = (*file)->Close();
  if (s.ok()) s = c;
  if (s.ok()) s = RenameFile(tmp, path);
  if (!s.ok()) {
    RemoveFile(tmp).IgnoreError();
    return s;
  }
  return SyncDir(DirName(path));
}

Status Env::RemoveDirRecursively(const std::string& dir) {
  ELASTRA_ASSIGN_OR_RETURN(std::vector<std::string> names, GetChildren(dir));
  for (const std::string& n : names) ELASTRA_RETURN_IF_ERROR(RemoveFile(JoinPath(dir, n)));
  return RemoveDir(dir);
}

// ---------------------------------------------------------------------------------------------
// FaultInjectionEnv

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::string path, std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  Status Append(std::span<const std::byte> data) override {
    size_t allowed = data.size();
    Status fault = env_->BeforeAppend(path_, data.size(), &allowed);
    if (allowed > 0) {
      Status s = base_->Append(data.first(allowed));
      if (!s.ok()) return s;
      env_->AfterAppend(path_, allowed);
    }
    return fault;
  }

  Status Sync() override {
    ELASTRA_RETURN_IF_ERROR(env_->CheckPower());
    ELASTRA_RETURN_IF_ERROR(base_->Sync());
    env_->AfterSync(path_);
    return OkStatus();
  }

  Status Close() override { return base_->Close(); }

 private:
  FaultInjectionEnv* env_;
  std::string path_;
  std::unique_ptr<WritableFile> base_;
};

void FaultInjectionEnv::FailNthWrite(int n) {
  std::lock_guard<std::mutex> l(mu_);
  fail_write_at_ = writes_ + n;
}

void FaultInjectionEnv::SetDiskSpace(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  disk_limited_ = true;
  disk_left_ = bytes;
}

void FaultInjectionEnv::CutPowerBeforeNthRename(int n) {
  std::lock_guard<std::mutex> l(mu_);
  cut_at_rename_ = renames_ + n;
}

void FaultInjectionEnv::Reset() {
  std::lock_guard<std::mutex> l(mu_);
  fail_write_at_ = 0;
  cut_at_rename_ = 0;
  disk_limited_ = false;
  power_cut_ = false;
}

bool FaultInjectionEnv::power_cut() const {
  std::lock_guard<std::mutex> l(mu_);
  return power_cut_;
}
int FaultInjectionEnv::writes() const {
  std::lock_guard<std::mutex> l(mu_);
  return writes_;
}
int FaultInjectionEnv::renames() const {
  std::lock_guard<std::mutex> l(mu_);
  return renames_;
}

Status FaultInjectionEnv::CheckPower() const {
  std::lock_guard<std::mutex> l(mu_);
  if (power_cut_) return AbortedError("the power is cut (injected)");
  return OkStatus();
}

Status FaultInjectionEnv::BeforeAppend(const std::string& path, size_t n, size_t* allowed) {
  std::lock_guard<std::mutex> l(mu_);
  *allowed = 0;
  if (power_cut_) return AbortedError("the power is cut (injected)");
  ++writes_;
  if (fail_write_at_ != 0 && writes_ == fail_write_at_) {
    return InternalError("write " + path + ": injected failure of write #" +
                         std::to_string(writes_));
  }
  if (disk_limited_ && n > disk_left_) {
    *allowed = static_cast<size_t>(disk_left_);
    disk_left_ = 0;
    return ResourceExhaustedError("write " + path + ": No space left on device (injected)");
  }
  if (disk_limited_) disk_left_ -= n;
  *allowed = n;
  return OkStatus();
}

void FaultInjectionEnv::AfterAppend(const std::string& path, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  files_[path].size += n;
}

void FaultInjectionEnv::AfterSync(const std::string& path) {
  std::lock_guard<std::mutex> l(mu_);
  FileState& f = files_[path];
  f.synced = f.size;
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  return Wrap(path, base_->NewWritableFile(path));
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewDirectWritableFile(
    const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  return Wrap(path, base_->NewDirectWritableFile(path));
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewAppendableFile(
    const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  const bool existed = base_->FileExists(path);
  uint64_t size = 0;
  if (existed) {
    ELASTRA_ASSIGN_OR_RETURN(size, base_->GetFileSize(path));
  }
  return Wrap(path, base_->NewAppendableFile(path), size, existed);
}

Status FaultInjectionEnv::TruncateFile(const std::string& path, uint64_t size) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  ELASTRA_RETURN_IF_ERROR(base_->TruncateFile(path, size));
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(path);
  if (it != files_.end()) it->second.size = it->second.synced = size;  // fsync'ed
  return OkStatus();
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::Wrap(
    const std::string& path, StatusOr<std::unique_ptr<WritableFile>> opened, uint64_t size,
    bool existed) {
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> base, std::move(opened));
  {
    std::lock_guard<std::mutex> l(mu_);
    FileState f;
    f.size = f.synced = size;
    f.created_unsynced_dir = !existed;
    files_[path] = f;
  }
  return std::unique_ptr<WritableFile>(new FaultWritableFile(this, path, std::move(base)));
}

Status FaultInjectionEnv::CreateDir(const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  bool existed = base_->IsDirectory(path);
  ELASTRA_RETURN_IF_ERROR(base_->CreateDir(path));
  std::lock_guard<std::mutex> l(mu_);
  if (!existed) unsynced_dirs_.push_back(path);
  return OkStatus();
}

Status FaultInjectionEnv::SyncDir(const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  ELASTRA_RETURN_IF_ERROR(base_->SyncDir(path));
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, f] : files_) {
    if (DirName(name) == path) f.created_unsynced_dir = false;
  }
  std::erase_if(pending_renames_, [&](const PendingRename& r) { return DirName(r.to) == path; });
  std::erase_if(unsynced_dirs_, [&](const std::string& d) { return DirName(d) == path; });
  return OkStatus();
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (power_cut_) return AbortedError("the power is cut (injected)");
    ++renames_;
    if (cut_at_rename_ != 0 && renames_ == cut_at_rename_) {
      power_cut_ = true;
      return AbortedError("the power was cut before rename " + from + " -> " + to +
                          " (injected)");
    }
  }
  ELASTRA_RETURN_IF_ERROR(base_->RenameFile(from, to));
  std::lock_guard<std::mutex> l(mu_);
  auto it = files_.find(from);
  if (it != files_.end()) {
    FileState f = it->second;
    files_.erase(it);
    files_[to] = f;
  }
  pending_renames_.push_back({from, to});
  return OkStatus();
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  ELASTRA_RETURN_IF_ERROR(base_->RemoveFile(path));
  std::lock_guard<std::mutex> l(mu_);
  files_.erase(path);
  return OkStatus();
}

Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  ELASTRA_RETURN_IF_ERROR(CheckPower());
  return base_->RemoveDir(path);
}

Status FaultInjectionEnv::SimulatePowerLoss() {
  std::lock_guard<std::mutex> l(mu_);
  // Renames whose directory was never synced are lost: the file is back under its old name.
  for (auto it = pending_renames_.rbegin(); it != pending_renames_.rend(); ++it) {
    if (!base_->FileExists(it->to)) continue;
    ELASTRA_RETURN_IF_ERROR(base_->RenameFile(it->to, it->from));
    auto f = files_.find(it->to);
    if (f != files_.end()) {
      FileState st = f->second;
      files_.erase(f);
      files_[it->from] = st;
    }
  }
  pending_renames_.clear();
  for (auto it = files_.begin(); it != files_.end();) {
    const std::string& path = it->first;
    const FileState& f = it->second;
    if (!base_->FileExists(path)) {
      it = files_.erase(it);
      continue;
    }
    if (f.created_unsynced_dir) {
      ELASTRA_RETURN_IF_ERROR(base_->RemoveFile(path));
      it = files_.erase(it);
      continue;
    }
    if (f.synced < f.size && ::truncate(path.c_str(), static_cast<off_t>(f.synced)) != 0) {
      return IoError("truncate", path, errno);
    }
    it->second.size = f.synced;
    ++it;
  }
  // Directories created since their parent was synced vanish with what is left in them.
  for (auto it = unsynced_dirs_.rbegin(); it != unsynced_dirs_.rend(); ++it) {
    if (base_->IsDirectory(*it)) ELASTRA_RETURN_IF_ERROR(base_->RemoveDirRecursively(*it));
  }
  unsynced_dirs_.clear();
  return OkStatus();
}

}  // namespace elastra
