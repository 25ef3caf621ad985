// CommitStore: the worker's in-memory commits of its TensorCollection (the local shards, their
// regions and the scalars at one step) and the memory images they live in. A failure rolls the
// survivors back to the newest step every one of them holds; a generation change forgets the
// commits of the old layout and commits the new one (docs/design-notes.md, "Commits and rollback").
//
// No network and no communicators: it reads and writes the collection it was given. Not
// thread-safe: the training thread owns it. The only thing another thread needs of it, the steps
// held (the I/O thread answers a RecoverRequest with them), leaves through `on_change`, which runs
// after every change to the commits held; the worker publishes them under its own mutex there.
// The one thread of its own: the copy of a commit started by CommitInBackground(), which every
// other method waits for (Settle) before it looks at the commits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <utility>
#include <vector>

#include "elastra/sharding.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"

namespace elastra {

class CommitStore {
 public:
  // Commits kept in memory: two, because after a failure the survivors may differ by one commit
  // (an allreduce can complete on one rank and fail on another).
  static constexpr size_t kCommitsKept = 2;

  // A commit, or the image of one waiting to be reused.
  struct Image {
    int64_t step = 0;
    std::vector<std::vector<uint8_t>> tensors;  // local shards
    std::vector<Region> regions;                // and what they are
    std::vector<int64_t> scalars;
  };

  // `state` is committed and restored (not owned; it outlives the store). `on_change` (optional)
  // runs on the caller's thread after every change to the commits held.
  CommitStore(TensorCollection* state, std::function<void()> on_change);
  ~CommitStore();  // waits for an image being faulted in
  CommitStore(const CommitStore&) = delete;
  CommitStore& operator=(const CommitStore&) = delete;

  // Copies the local shards (from device memory where they live there) and the scalars into a
  // commit of the current step; nothing when the newest commit is of this step already. An error
  // of the copy from the device, with the step as context.
  Status Commit();

  // The pause's commit: as Commit(), but the copy runs on another thread and this returns at
  // once, so the copy overlaps the pause's round trip to the coordinator and the rebuild of the
  // groups instead of delaying the PausedReport. The commit counts from now on (steps() lists
  // it); every method below waits for its copy first (Settle), and nothing may write into the
  // state's shards before Settle() returned. Shards in device memory are copied at once (a
  // device copy can fail, and a commit already announced must not).
  Status CommitInBackground();
  // Waits for the copy of CommitInBackground(), if one is running, and keeps its commit.
  void Settle();
  // Milliseconds the last Settle() waited for a copy (0 when the copy had finished).
  double last_settle_wait_ms() const { return last_settle_wait_ms_; }

  // True when the newest commit is of the current step and holds exactly the current regions
  // (valid only when nothing wrote into the shards since it was made).
  bool MatchesState();

  // Whether a worker that held the state before a generation change must roll back to the commit
  // of `restore_step` before the state moves: when its step is another, or when it is that of the
  // newest commit but the shards no longer match it (a generation that failed after its state
  // move started left them in its own layout, partly moved, while the step is still the
  // commit's).
  bool MustRollBack(int64_t restore_step);

  // Restores the commit of `target_step` into the state (in host memory) and forgets newer ones
  // (they belong to an abandoned timeline). kFailedPrecondition when no such commit is held.
  Status Restore(int64_t target_step);

  // Forgets every commit (they belong to another layout or timeline) and keeps their memory.
  void Forget();
  // Keeps only the newest commit (the state is still that commit, in the new layout); the older
  // ones' memory is kept for reuse.
  void KeepNewestOnly();
  // Frees every commit and image: the worker parks or leaves.
  void Release();

  // Starts faulting in an image of shards of `sizes` bytes on another thread when fewer than
  // kCommitsKept images are held or coming, so that a later Commit() does not pay the page faults.
  void Prefault(std::vector<size_t> sizes);
  // The bytes of each tensor's shard in the current regions.
  std::vector<size_t> ShardSizes() const;

  // The steps of the commits held, oldest first (one being copied included).
  std::vector<int64_t> steps() const;
  // Where the commits held are: the layout and this worker's rank in it of the generation whose
  // shards they hold (rank -1 before the first). Set by the generation builder when it commits a
  // new layout, just before the commits change; runs on_change. Until they have changed, the
  // old commits are published with the new place: a coordinator that asks then counts them as
  // holding nothing of the committed layout, which is never wrong, only cautious.
  void set_place(const Layout& layout, int rank) {
    place_layout_ = layout;
    place_rank_ = rank;
    Changed();
  }
  const Layout& place_layout() const { return place_layout_; }
  int place_rank() const { return place_rank_; }
  bool empty() const { return commits_.empty() && !pending_.valid(); }
  // The newest commit, or nullptr.
  const Image* newest() {
    Settle();
    return commits_.empty() ? nullptr : &commits_.back();
  }
  // Images of forgotten commits held for reuse, and whether one is being faulted in.
  size_t spare_images() const { return spare_.size(); }
  bool prefaulting() const { return prefault_.valid(); }

 private:
  static bool FitsSizes(const Image& image, const std::vector<size_t>& sizes);
  static Image CopyShards(Image c, std::vector<std::pair<const uint8_t*, size_t>> sources,
                          std::future<Image> faulting);
  Image TakeImage(const std::vector<size_t>& sizes);
  int64_t step() const { return state_->GetScalar(kStepScalarName); }
  void Changed() {
    if (on_change_) on_change_();
  }

  TensorCollection* state_;
  std::function<void()> on_change_;
  std::deque<Image> commits_;
  std::vector<Image> spare_;     // images of forgotten commits, for reuse (see TakeImage)
  std::future<Image> prefault_;  // an image being faulted in on another thread
  std::future<Image> pending_;   // a commit being copied on another thread (CommitInBackground)
  int64_t pending_step_ = 0;
  double last_settle_wait_ms_ = 0;
  Layout place_layout_;
  int place_rank_ = -1;
};

}  // namespace elastra
