#include "coordinator/checkpoint_manager.h"

#include <chrono>
#include <span>

#include "checkpoint/format.h"
#include "checkpoint/writer.h"
#include "common/logging.h"

namespace elastra::coordinator {

Status CheckpointManager::OnWritten(const proto::CheckpointWritten& r, bool defer) {
  if (r.ranks < 1 || r.rank < 0 || r.rank >= r.ranks || r.ranks > 1 << 20) {
    return InvalidArgumentError("rank " + std::to_string(r.rank) + " of " +
                                std::to_string(r.ranks));
  }
  if (!r.root.empty()) roots_.insert(r.root);
  if (r.step <= latest_step_) return OkStatus();  // older than what is committed
  Pending& p = pending_[{r.generation, r.step}];
  p.ranks = r.ranks;
  p.layout = r.layout;
  p.root = r.root;
  if (!r.ok) {
    LOG(WARNING) << "checkpoint of step " << r.step << " failed on rank " << r.rank << ": "
                 << r.error << "; it will not be committed";
    if (!p.failed) Failed(r.step, "rank " + std::to_string(r.rank) + ": " + r.error);
    p.failed = true;
    p.descriptors.erase(r.rank);
    p.failed_ranks.insert(r.rank);
  } else if (!p.failed_ranks.contains(r.rank)) {
    p.descriptors[r.rank] = r.descriptor;
    if (r.write_seconds > p.write_seconds) p.write_seconds = r.write_seconds;
  }
  const auto reported = static_cast<int32_t>(p.descriptors.size() + p.failed_ranks.size());
  if (reported < p.ranks) return OkStatus();
  // Every rank reported: the checkpoint is committed, or it never will be and its files go (the
  // other ranks' shards would otherwise stay until the job's end).
  const std::pair<uint64_t, int64_t> key{r.generation, r.step};
  if (!p.failed && defer) {
    if (ready_ && *ready_ != key) {
      // Of two ready checkpoints only the newer is committed; the other's files go.
      const std::pair<uint64_t, int64_t> moot = ready_->second < r.step ? *ready_ : key;
      auto it = pending_.find(moot);
      if (it != pending_.end()) {
        Discard(it->second.root, moot.first, moot.second);
        pending_.erase(it);
      }
      if (moot == key) return OkStatus();
    }
    ready_ = key;
    return OkStatus();
  }
  if (!p.failed && ready_ && ready_->second < r.step) {
    // A ready one older than this: this one is committed instead.
    auto it = pending_.find(*ready_);
    if (it != pending_.end()) {
      Discard(it->second.root, ready_->first, ready_->second);
      pending_.erase(it);
    }
    ready_.reset();
  }
  if (p.failed || !Commit(r.generation, r.step, p)) {
    Discard(p.root, r.generation, r.step);
    pending_.erase(key);
  }
  return OkStatus();
}

void CheckpointManager::CommitReady() {
  if (!ready_) return;
  const std::pair<uint64_t, int64_t> key = *ready_;
  ready_.reset();
  auto it = pending_.find(key);
  if (it == pending_.end()) return;
  if (key.second <= latest_step_ || !Commit(key.first, key.second, it->second)) {
    Discard(it->second.root, key.first, key.second);
    pending_.erase(key);
  }
}

bool CheckpointManager::Commit(uint64_t generation, int64_t step, Pending& p) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<checkpoint::ShardDescriptor> shards;
  for (const auto& [rank, bytes] : p.descriptors) {
    auto d = checkpoint::DecodeShardDescriptor(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
    if (!d.ok()) {
      LOG(WARNING) << "checkpoint of step " << step << ": rank " << rank
                   << " sent an unreadable descriptor: " << d.status();
      Failed(step, "rank " + std::to_string(rank) + " sent an unreadable descriptor: " +
                         d.status().ToString());
      p.failed = true;
      return false;
    }
    shards.push_back(std::move(d).value());
  }
  int64_t bytes = 0;  // what the ranks wrote, as their descriptors say
  for (const auto& shard : shards) bytes += static_cast<int64_t>(shard.file_size);
  checkpoint::CommitOptions options;
  options.env = env_;
  options.root = p.root;
  options.keep_last = keep_;
  checkpoint::CheckpointId id{job_, step, generation};
  auto dir = checkpoint::CommitCheckpoint(options, id, p.layout, std::move(shards));
  if (!dir.ok()) {
    LOG(WARNING) << "checkpoint of step " << step << " not committed: " << dir.status();
    Failed(step, "commit: " + dir.status().ToString());
    return false;
  }
  latest_dir_ = *dir;
  latest_step_ = step;
  const double commit_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // A restart still knows it.
  journal_->LogFailure(
      Record(step, generation, *dir, bytes, p.write_seconds + commit_seconds));
  LOG(INFO) << "checkpoint of step " << step << " committed: " << *dir;
  // Older pending ones can never complete now.
  for (auto it = pending_.begin(); it != pending_.end();) {
    it = it->first.second <= step ? pending_.erase(it) : std::next(it);
  }
  return true;
}

void CheckpointManager::Discard(const std::string& root, uint64_t generation, int64_t step) {
  const std::string dir = checkpoint::CheckpointDir(root, {job_, step, generation});
  if (env_->FileExists(JoinPath(dir, checkpoint::kManifestName))) return;
  Status s = env_->RemoveDirRecursively(dir);
  if (s.ok()) {
    LOG(INFO) << "removed uncommitted checkpoint " << dir;
  } else if (env_->IsDirectory(dir)) {
    LOG(WARNING) << "cannot remove uncommitted checkpoint " << dir << ": " << s;
  }
}

void CheckpointManager::EndJob() {
  CommitReady();  // every rank wrote it: the job's last checkpoint may be this one
  pending_.clear();
  for (const std::string& root : roots_) {
    auto removed = checkpoint::RemoveUncommittedCheckpoints(env_, root);
    if (!removed.ok()) {
      LOG(WARNING) << "the job ended; uncommitted checkpoints under " << root
                   << " not all removed: " << removed.status();
    } else if (*removed > 0) {
      LOG(INFO) << "the job ended; removed " << *removed << " uncommitted checkpoint(s) under "
                << root;
    }
  }
}

void CheckpointManager::Failed(int64_t step, std::string why) {
  if (step < last_error_step_) return;
  last_error_step_ = step;
  last_error_ = std::move(why);
}

Status CheckpointManager::Record(int64_t step, uint64_t generation, const std::string& dir,
                                 int64_t bytes, double seconds) {
  ELASTRA_RETURN_IF_ERROR(journal_->Checkpoint(step, generation, dir, bytes, seconds));
  committed_.push_back(JournalCheckpoint{step, generation, dir});
  return OkStatus();
}

StatusOr<checkpoint::CheckpointInfo> CheckpointManager::ResumeFrom(const std::string& root) {
  auto list = checkpoint::ListCheckpoints(env_, root);
  if (!list.ok() || list->empty()) {
    return NotFoundError("no committed checkpoint under " + root +
                         (list.ok() ? std::string() : ": " + list.status().message()));
  }
  roots_.insert(root);
  const checkpoint::CheckpointInfo& newest = list->front();
  latest_dir_ = newest.dir;
  latest_step_ = newest.step;
  return newest;
}

void CheckpointManager::Restore(const std::vector<JournalCheckpoint>& committed) {
  committed_ = committed;
  for (const JournalCheckpoint& c : committed_) {
    const size_t slash = c.dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) roots_.insert(c.dir.substr(0, slash));
  }
  if (!committed_.empty()) {
    // The newest committed checkpoint: what a failure with no live holder reloads.
    latest_dir_ = committed_.back().dir;
    latest_step_ = committed_.back().step;
  }
}

}  // namespace elastra::coordinator
