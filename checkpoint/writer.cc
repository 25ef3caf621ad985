#include "checkpoint/writer.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "common/host_memory.h"
#include "common/logging.h"

namespace elastra::checkpoint {
namespace {

uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

Status ValidateView(const StateView& state, bool can_copy_from_device) {
  std::set<std::pair<std::string, std::vector<int64_t>>> seen;
  for (const TensorShard& t : state.tensors) {
    const std::string where = "tensor '" + t.name + "'";
    if (t.name.empty()) return InvalidArgumentError("empty tensor name");
    std::vector<int64_t> key = t.region.begin;
    key.insert(key.end(), t.region.end.begin(), t.region.end.end());
    if (!seen.insert({t.name, key}).second) {
      return InvalidArgumentError(where + ": region " + t.region.ToString() + " given twice");
    }
    const size_t esize = ElementSize(static_cast<int32_t>(t.dtype));
    if (esize == 0) return InvalidArgumentError(where + ": unknown dtype");
    if (t.shape.size() > static_cast<size_t>(kMaxDims)) {
      return InvalidArgumentError(where + ": more than " + std::to_string(kMaxDims) +
                                  " dimensions");
    }
    if (t.region.begin.size() != t.shape.size() || t.region.end.size() != t.shape.size()) {
      return InvalidArgumentError(where + ": region " + t.region.ToString() +
                                  " does not match the shape's rank");
    }
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (t.region.begin[d] < 0 || t.region.begin[d] > t.region.end[d] ||
          t.region.end[d] > t.shape[d]) {
        return InvalidArgumentError(where + ": region " + t.region.ToString() +
                                    " lies outside the shape");
      }
    }
    if (t.on_device && !can_copy_from_device) {
      return InvalidArgumentError(where + ": the shard is in device memory and the writer has no "
                                  "copy_from_device");
    }
    if (t.data.size() != t.region.volume() * esize) {
      return InvalidArgumentError(where + ": " + std::to_string(t.data.size()) +
                                  " bytes for region " + t.region.ToString() + " (" +
                                  std::to_string(t.region.volume() * esize) + " expected)");
    }
  }
  return OkStatus();
}

}  // namespace

std::string CheckpointDir(const std::string& root, const CheckpointId& id) {
  return JoinPath(root, CheckpointDirName(id.step, id.generation));
}

void CheckpointWriter::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

CheckpointWriter::CheckpointWriter(WriterOptions options)
    : options_(std::move(options)), env_(options_.env ? options_.env : Env::Default()) {}

StatusOr<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Create(WriterOptions options) {
  if (options.root.empty()) return InvalidArgumentError("checkpoint root is empty");
  if (options.chunk_bytes < kMinChunkBytes) {
    return InvalidArgumentError("chunk_bytes below " + std::to_string(kMinChunkBytes));
  }
  if (options.write_block_bytes == 0) return InvalidArgumentError("write_block_bytes is 0");
  if (options.rank < 0) return InvalidArgumentError("negative rank");
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(std::move(options)));
  ELASTRA_RETURN_IF_ERROR(w->env_->CreateDir(w->options_.root));
  if (w->options_.reserve_bytes > 0) {
    ELASTRA_RETURN_IF_ERROR(w->EnsureCapacity(w->options_.reserve_bytes));
    std::memset(w->image_.get(), 0, w->capacity_);  // touch every page now, not in a step
  }
  w->thread_ = std::thread([p = w.get()] { p->Loop(); });
  return w;
}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return !in_flight_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  ReleaseImage();
}

void CheckpointWriter::ReleaseImage() {
  if (image_pinned_ && options_.unpin_staging) options_.unpin_staging(image_.get());
  image_pinned_ = false;
  image_.reset();
  capacity_ = 0;
}

Status CheckpointWriter::EnsureCapacity(size_t bytes) {
  if (bytes <= capacity_) return OkStatus();
  // Large images on transparent huge pages (common/host_memory.h): the image is allocated and
  // touched once (reserve_bytes) and rewritten by every Snapshot(), whose copy then walks 512
  // times fewer pages.
  const bool huge = bytes >= kHugePageMinBytes;
  const size_t align = huge ? kHugePageBytes : kRegionAlignment;
  const size_t want = AlignUp(bytes, align);
  ReleaseImage();
  void* p = std::aligned_alloc(align, want);
  if (p == nullptr) {
    return ResourceExhaustedError("cannot allocate " + std::to_string(want) +
                                  " bytes of checkpoint staging memory");
  }
  if (huge) AdviseHugePages(p, want);
  image_.reset(static_cast<std::byte*>(p));
  capacity_ = want;
  if (options_.pin_staging) {
    Status pinned = options_.pin_staging(p, want);
    image_pinned_ = pinned.ok();
    if (!pinned.ok()) LOG(WARNING) << "checkpoint staging memory stays pageable: " << pinned;
  }
  return OkStatus();
}

StatusOr<CheckpointWriter::SnapshotResult> CheckpointWriter::Snapshot(const CheckpointId& id,
                                                                      const StateView& state) {
  ELASTRA_RETURN_IF_ERROR(ValidateView(state, static_cast<bool>(options_.copy_from_device)));
  std::unique_lock<std::mutex> l(mu_);
  if (in_flight_) {
    if (options_.when_busy == WriterOptions::WhenBusy::kSkip) {
      LOG(WARNING) << "checkpoint of step " << id.step << " skipped on rank " << options_.rank
                   << ": the previous checkpoint is still being written (when_busy=skip)";
      return SnapshotResult::kSkipped;
    }
    LOG(INFO) << "checkpoint of step " << id.step << " waits on rank " << options_.rank
              << " for the previous checkpoint's write (when_busy=wait)";
    cv_.wait(l, [&] { return !in_flight_; });
  }
  // Lay out the file image: the header, then every region at a 4 KiB-aligned offset.
  ShardDescriptor d;
  d.rank = options_.rank;
  d.file = ShardFileName(options_.rank);
  d.scalars = state.scalars;
  uint64_t offset = kShardHeaderBytes;
  for (const TensorShard& t : state.tensors) {
    // One descriptor entry per shard (CommitCheckpoint merges entries of the same tensor).
    TensorEntry e;
    e.name = t.name;
    e.shape = t.shape;
    e.dtype = static_cast<int32_t>(t.dtype);
    e.rule = t.rule;
    RegionEntry r;
    r.box = t.region;
    r.file = 0;
    r.offset = offset;
    r.bytes = t.data.size();
    r.chunk_bytes = options_.chunk_bytes;
    offset = AlignUp(offset + r.bytes, kRegionAlignment);
    e.regions.push_back(std::move(r));
    d.tensors.push_back(std::move(e));
  }
  // The file ends on a 4 KiB boundary, so every write can bypass the page cache.
  const size_t total = AlignUp(d.tensors.empty() ? kShardHeaderBytes
                                                 : d.tensors.back().regions[0].offset +
                                                       d.tensors.back().regions[0].bytes,
                               kRegionAlignment);
  ELASTRA_RETURN_IF_ERROR(EnsureCapacity(total));
  const auto start = std::chrono::steady_clock::now();
  snapshot_start_ = start;
  std::byte* image = image_.get();
  EncodeShardHeader({kFormatVersion, options_.rank, id.step, id.generation}, image);
  d.file_size = total;
  std::vector<RegionEntry> regions;
  for (const TensorEntry& e : d.tensors) regions.push_back(e.regions[0]);
  // The write starts now and follows the copy: the background thread appends each block once the
  // copy has passed it (copied_), so copying and writing overlap. This thread owns the image above
  // copied_ until the copy is done.
  image_bytes_ = total;
  staged_ = std::move(d);
  pending_ = id;
  in_flight_ = true;
  copied_ = kShardHeaderBytes;
  copy_failed_ = false;
  l.unlock();
  cv_.notify_all();
  auto advance = [&](uint64_t to) {
    {
      std::lock_guard<std::mutex> g(mu_);
      copied_ = to;
    }
    cv_.notify_all();
  };
  Status copy;
  uint64_t pos = kShardHeaderBytes;
  for (size_t i = 0; i < state.tensors.size() && copy.ok(); ++i) {
    const RegionEntry& r = regions[i];
    if (r.offset > pos) std::memset(image + pos, 0, r.offset - pos);  // padding
    const TensorShard& t = state.tensors[i];
    // In pieces of one write block, so the writer can follow closely.
    for (uint64_t done = 0; done < r.bytes && copy.ok();) {
      const uint64_t n = std::min<uint64_t>(options_.write_block_bytes, r.bytes - done);
      if (t.on_device) {
        copy = options_.copy_from_device(image + r.offset + done, t.data.data() + done, n);
        if (!copy.ok()) copy = copy.WithContext("copying tensor '" + t.name + "' from the device");
      } else {
        std::memcpy(image + r.offset + done, t.data.data() + done, n);
      }
      done += n;
      if (copy.ok()) advance(r.offset + done);
    }
    pos = r.offset + r.bytes;
  }
  if (copy.ok() && total > pos) std::memset(image + pos, 0, total - pos);
  {
    std::lock_guard<std::mutex> g(mu_);
    if (copy.ok()) {
      copied_ = total;
    } else {
      copy_failed_ = true;  // the background thread drops the write and reports the failure
    }
    last_copy_seconds_ = SecondsSince(start);
  }
  cv_.notify_all();
  if (!copy.ok()) return copy;
  return SnapshotResult::kStarted;
}

StatusOr<ShardDescriptor> CheckpointWriter::WaitForWrite() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return !in_flight_; });
  if (!last_result_) return FailedPreconditionError("no checkpoint write was started");
  return *last_result_;
}

StatusOr<ShardDescriptor> CheckpointWriter::Write(const CheckpointId& id,
                                                  const StateView& state) {
  ELASTRA_ASSIGN_OR_RETURN(SnapshotResult r, Snapshot(id, state));
  (void)r;  // with kSkip and a write in flight WaitForWrite() reports the earlier one
  return WaitForWrite();
}

bool CheckpointWriter::in_flight() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_flight_;
}

double CheckpointWriter::last_copy_seconds() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_copy_seconds_;
}

void CheckpointWriter::Loop() {
  if (options_.write_thread_nice != 0) {
    // On Linux the nice value is a thread's own (setpriority(2)); advice, so a refusal is logged.
    errno = 0;
    const int base = ::getpriority(PRIO_PROCESS, 0);
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()),
                      base + options_.write_thread_nice) != 0) {
      LOG(WARNING) << "checkpoint writer thread keeps its priority: " << std::strerror(errno);
    }
  }
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    cv_.wait(l, [&] { return stop_ || pending_.has_value(); });
    if (!pending_) return;
    CheckpointId id = *pending_;
    pending_.reset();
    l.unlock();
    StatusOr<ShardDescriptor> result = WriteShard(id);
    WaitForCopy();  // the image is Snapshot()'s until its copy ends, even after a failed write
    if (!result.ok()) {
      LOG(ERROR) << "checkpoint of step " << id.step << " failed on rank " << options_.rank
                 << ": " << result.status();
    }
    // Report before the write counts as finished, so whoever waits for it (WaitForWrite, the
    // next Snapshot, the destructor) also knows the report went out.
    l.lock();
    const double seconds = SecondsSince(snapshot_start_);
    l.unlock();
    if (options_.on_written) options_.on_written(id, result, seconds);
    l.lock();
    last_result_ = result;
    in_flight_ = false;
    l.unlock();
    cv_.notify_all();
    l.lock();
  }
}

void CheckpointWriter::WaitForCopy() {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return copy_failed_ || copied_ >= image_bytes_; });
}

StatusOr<ShardDescriptor> CheckpointWriter::WriteShard(const CheckpointId& id) {
  const std::string dir = CheckpointDir(options_.root, id);
  const std::string final_path = JoinPath(dir, staged_.file);
  const std::string tmp_path = final_path + ".tmp";
  const std::string context =
      "checkpoint step " + std::to_string(id.step) + " rank " + std::to_string(options_.rank);
  ELASTRA_RETURN_IF_ERROR(env_->CreateDir(dir).WithContext(context));
  ELASTRA_RETURN_IF_ERROR(env_->SyncDir(options_.root).WithContext(context));

  ShardDescriptor d;
  {
    std::lock_guard<std::mutex> g(mu_);
    d = staged_;
  }
  const std::byte* image = image_.get();
  auto file = options_.direct_io ? env_->NewDirectWritableFile(tmp_path)
                                 : env_->NewWritableFile(tmp_path);
  if (!file.ok()) return file.status().WithContext(context);
  Status s;
  for (size_t off = 0; off < image_bytes_ && s.ok(); off += options_.write_block_bytes) {
    const size_t n = std::min(options_.write_block_bytes, image_bytes_ - off);
    {
      std::unique_lock<std::mutex> l(mu_);
      const uint64_t need = options_.write_while_copying ? off + n : image_bytes_;
      cv_.wait(l, [&] { return copy_failed_ || copied_ >= need; });
      if (copy_failed_) s = AbortedError("the snapshot's copy failed");
    }
    if (s.ok()) s = (*file)->Append({image + off, n});
  }
  if (s.ok()) {
    for (TensorEntry& t : d.tensors) {  // the copy is complete: every block was appended
      RegionEntry& r = t.regions[0];
      r.chunk_checksums = ChunkChecksums({image + r.offset, r.bytes}, r.chunk_bytes);
    }
  }
  if (s.ok()) s = (*file)->Sync();
  Status closed = (*file)->Close();
  if (s.ok()) s = closed;
  if (s.ok() && options_.may_publish) s = options_.may_publish();
  if (s.ok()) s = env_->RenameFile(tmp_path, final_path);
  if (!s.ok()) {
    env_->RemoveFile(tmp_path).IgnoreError();
    return s.WithContext(context);
  }
  ELASTRA_RETURN_IF_ERROR(env_->SyncDir(dir).WithContext(context));
  return d;
}

StatusOr<std::string> CommitCheckpoint(const CommitOptions& options, const CheckpointId& id,
                                       const Layout& layout,
                                       std::vector<ShardDescriptor> shards) {
  Env* env = options.env ? options.env : Env::Default();
  if (options.keep_last < 1) return InvalidArgumentError("keep_last must be at least 1");
  if (shards.empty()) return InvalidArgumentError("no shard descriptors to commit");
  std::sort(shards.begin(), shards.end(),
            [](const ShardDescriptor& a, const ShardDescriptor& b) { return a.rank < b.rank; });
  const std::string dir = CheckpointDir(options.root, id);
  Manifest m;
  m.job = id.job;
  m.generation = id.generation;
  m.step = id.step;
  m.layout = layout;
  m.scalars = shards.front().scalars;
  m.created_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardDescriptor& s = shards[i];
    if (i > 0 && s.rank == shards[i - 1].rank) {
      return InvalidArgumentError("rank " + std::to_string(s.rank) + " reported twice");
    }
    if (s.file.empty() || s.file.find('/') != std::string::npos) {
      return InvalidArgumentError("rank " + std::to_string(s.rank) + " reported a bad file name");
    }
    const std::string path = JoinPath(dir, s.file);
    auto size = env->GetFileSize(path);
    if (!size.ok()) return size.status().WithContext("committing step " + std::to_string(id.step));
    if (*size != s.file_size) {
      return CorruptError(path + ": " + std::to_string(*size) + " bytes on disk, rank " +
                          std::to_string(s.rank) + " reported " + std::to_string(s.file_size));
    }
    m.files.push_back({s.file, s.rank, s.file_size});
    for (const TensorEntry& t : s.tensors) {
      TensorEntry* e = nullptr;
      for (TensorEntry& x : m.tensors) {
        if (x.name == t.name) e = &x;
      }
      if (e == nullptr) {
        m.tensors.push_back(t);
        e = &m.tensors.back();
        e->regions.clear();
      } else if (e->shape != t.shape || e->dtype != t.dtype || !(e->rule == t.rule)) {
        return InvalidArgumentError("tensor '" + t.name + "': rank " + std::to_string(s.rank) +
                                    " disagrees on its shape, dtype or sharding rule");
      }
      for (RegionEntry r : t.regions) {
        r.file = static_cast<uint32_t>(i);
        e->regions.push_back(std::move(r));
      }
    }
  }
  if (Status v = ValidateManifest(m); !v.ok()) {
    return InvalidArgumentError("cannot commit step " + std::to_string(id.step) + ": " +
                                v.message());
  }
  const std::string manifest = EncodeManifest(m);
  ELASTRA_RETURN_IF_ERROR(env->WriteFileAtomically(JoinPath(dir, kManifestName), AsBytes(manifest))
                              .WithContext("committing step " + std::to_string(id.step)));
  LOG(INFO) << "committed checkpoint " << dir << " (step " << id.step << ", generation "
            << id.generation << ", " << shards.size() << " shard files, "
            << m.total_file_bytes() << " bytes)";
  Status pruned = PruneCheckpoints(env, options.root, options.keep_last);
  if (!pruned.ok()) LOG(WARNING) << "pruning old checkpoints: " << pruned;
  return dir;
}

namespace {

struct DirEntry {
  int64_t step;
  uint64_t generation;
  std::string name;
  bool committed;
};

// The checkpoint directories under `root`, newest first.
StatusOr<std::vector<DirEntry>> CheckpointDirs(Env* env, const std::string& root) {
  ELASTRA_ASSIGN_OR_RETURN(std::vector<std::string> names, env->GetChildren(root));
  std::vector<DirEntry> entries;
  for (const std::string& n : names) {
    DirEntry e{0, 0, n, false};
    if (!ParseCheckpointDirName(n, &e.step, &e.generation)) continue;
    e.committed = env->FileExists(JoinPath(JoinPath(root, n), kManifestName));
    entries.push_back(e);
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) {
    return std::tie(a.step, a.generation) > std::tie(b.step, b.generation);
  });
  return entries;
}

// Removes the directory of `e` under `root`. A committed one loses its manifest first, so a crash
// half-way leaves an uncommitted directory, never a committed one with files missing.
Status RemoveCheckpointDir(Env* env, const std::string& root, const DirEntry& e) {
  const std::string dir = JoinPath(root, e.name);
  Status s;
  if (e.committed) {
    s = env->RemoveFile(JoinPath(dir, kManifestName));
    if (s.ok()) s = env->SyncDir(dir);
  }
  if (s.ok()) s = env->RemoveDirRecursively(dir);
  if (s.ok()) {
    LOG(INFO) << "removed " << (e.committed ? "old checkpoint " : "uncommitted checkpoint ")
              << dir;
  }
  return s;
}

}  // namespace

Status PruneCheckpoints(Env* env, const std::string& root, int keep_last) {
  if (keep_last < 1) return InvalidArgumentError("keep_last must be at least 1");
  ELASTRA_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, CheckpointDirs(env, root));
  int kept = 0;
  bool seen_committed = false;
  Status first_error;
  for (const DirEntry& e : entries) {
    bool remove = false;
    if (e.committed) {
      seen_committed = true;
      remove = ++kept > keep_last;
    } else {
      remove = seen_committed;  // older than a committed one: a failed attempt
    }
    if (!remove) continue;
    Status s = RemoveCheckpointDir(env, root, e);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  if (first_error.ok()) first_error = env->SyncDir(root);
  return first_error;
}

StatusOr<int> RemoveUncommittedCheckpoints(Env* env, const std::string& root) {
  ELASTRA_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, CheckpointDirs(env, root));
  int removed = 0;
  Status first_error;
  for (const DirEntry& e : entries) {
    if (e.committed) continue;
    Status s = RemoveCheckpointDir(env, root, e);
    if (s.ok()) {
      ++removed;
    } else if (first_error.ok()) {
      first_error = s;
    }
  }
  if (removed > 0 && first_error.ok()) first_error = env->SyncDir(root);
  if (!first_error.ok()) return first_error;
  return removed;
}

}  // namespace elastra::checkpoint
