#include "worker/commit_store.h"
#include "state/tensor_collection_access.h"

#include <chrono>
#include <cstring>
#include <string>
#include <utility>

namespace elastra {

CommitStore::CommitStore(TensorCollection* state, std::function<void()> on_change)
    : state_(state), on_change_(std::move(on_change)) {}

// The futures of std::async wait for the image being faulted in and the copy in flight.
CommitStore::~CommitStore() = default;

std::vector<int64_t> CommitStore::steps() const {
  std::vector<int64_t> out;
  for (const auto& c : commits_) out.push_back(c.step);
  if (pending_.valid()) out.push_back(pending_step_);
  return out;
}

void CommitStore::Settle() {
  if (!pending_.valid()) return;
  const auto t0 = std::chrono::steady_clock::now();
  commits_.push_back(pending_.get());
  last_settle_wait_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<size_t> CommitStore::ShardSizes() const {
  std::vector<size_t> sizes;
  for (const auto& t : state_->tensors()) sizes.push_back(t.bytes());
  return sizes;
}

// Commit images and their memory. Fresh memory is faulted in as it is first written, which
// costs several times the copy into it (about 35 ms against 6 ms for 64 MiB on our test
// machines), and a commit made while a generation is built lands on the downtime. So the
// images are kept and reused (spare_), and a worker that has fewer than kCommitsKept of them
// faults one in on another thread (Prefault) before it needs it: while the groups are
// built and the state moves, or while it trains. The commits, the spare images and the one
// being faulted in are never more than kCommitsKept together.
//
// An image for a commit of shards of `sizes` bytes: the oldest commit when kCommitsKept are
// held; else a spare image that fits; else the one being faulted in; else any spare; else new.
bool CommitStore::FitsSizes(const Image& image, const std::vector<size_t>& sizes) {
  if (image.tensors.size() != sizes.size()) return false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (image.tensors[i].capacity() < sizes[i]) return false;
  }
  return true;
}

CommitStore::Image CommitStore::TakeImage(const std::vector<size_t>& sizes) {
  Image c;
  auto fits = [&](const Image& image) { return FitsSizes(image, sizes); };
  if (commits_.size() >= kCommitsKept) {
    c = std::move(commits_.front());
    commits_.pop_front();
  } else if (!spare_.empty() && (fits(spare_.back()) || !prefault_.valid())) {
    c = std::move(spare_.back());
    spare_.pop_back();
  } else if (prefault_.valid()) {
    c = prefault_.get();
  }
  return c;
}

void CommitStore::Prefault(std::vector<size_t> sizes) {
  const size_t copying = pending_.valid() ? 1 : 0;
  if (prefault_.valid() || commits_.size() + spare_.size() + copying >= kCommitsKept) return;
  prefault_ = std::async(std::launch::async, [sizes = std::move(sizes)] {
    Image c;
    c.tensors.resize(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) c.tensors[i].resize(sizes[i]);  // writes each page
    return c;
  });
}

void CommitStore::Forget() {
  Settle();
  for (auto& c : commits_) spare_.push_back(std::move(c));
  commits_.clear();
  Changed();
}

void CommitStore::KeepNewestOnly() {
  Settle();
  while (commits_.size() > 1) {
    spare_.push_back(std::move(commits_.front()));
    commits_.pop_front();
  }
  Changed();
}

void CommitStore::Release() {
  Settle();
  commits_.clear();
  spare_.clear();
  if (prefault_.valid()) prefault_.get();
  Changed();
}

Status CommitStore::Commit() {
  Settle();
  if (!commits_.empty() && commits_.back().step == step()) return OkStatus();
  Image c = TakeImage(ShardSizes());
  c.step = step();
  const auto& tensors = state_->tensors();
  c.tensors.resize(tensors.size());
  c.regions.resize(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    c.tensors[i].resize(tensors[i].bytes());
    Status copied = state_->CopyToHost(tensors[i], c.tensors[i].data());
    if (!copied.ok()) return copied.WithContext("committing step " + std::to_string(step()));
    c.regions[i] = tensors[i].region;
  }
  c.scalars.clear();
  for (const auto& [name, value] : state_->scalars()) c.scalars.push_back(value);
  commits_.push_back(std::move(c));
  Changed();
  return OkStatus();
}

// The copy of CommitInBackground(), on its own thread: the shards at `sources` into image `c`,
// or into the image `faulting` yields once it is faulted in (then with c's step, regions and
// scalars).
CommitStore::Image CommitStore::CopyShards(Image c,
                                           std::vector<std::pair<const uint8_t*, size_t>> sources,
                                           std::future<Image> faulting) {
  if (faulting.valid()) {
    Image image = faulting.get();
    image.step = c.step;
    image.regions = std::move(c.regions);
    image.scalars = std::move(c.scalars);
    c = std::move(image);
  }
  c.tensors.resize(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    // An image's buffers keep their memory from one commit to the next (TakeImage): no fresh
    // pages here unless the shards grew.
    c.tensors[i].resize(sources[i].second);
    if (sources[i].second > 0) {  // an empty shard's pointer may be null
      std::memcpy(c.tensors[i].data(), sources[i].first, sources[i].second);
    }
  }
  return c;
}

Status CommitStore::CommitInBackground() {
  Settle();
  const auto& tensors = state_->tensors();
  for (const auto& t : tensors) {
    if (t.on_device) return Commit();
  }
  if (!commits_.empty() && commits_.back().step == step()) return OkStatus();
  // The image as Commit() takes it, except that one still being faulted in is waited for on the
  // copy's thread, not here.
  Image c;
  std::future<Image> faulting;
  if (commits_.size() < kCommitsKept && prefault_.valid() &&
      (spare_.empty() || !FitsSizes(spare_.back(), ShardSizes()))) {
    faulting = std::move(prefault_);
  } else {
    c = TakeImage(ShardSizes());
  }
  c.step = step();
  c.regions.resize(tensors.size());
  std::vector<std::pair<const uint8_t*, size_t>> sources;
  for (size_t i = 0; i < tensors.size(); ++i) {
    c.regions[i] = tensors[i].region;
    sources.push_back({tensors[i].data.data(), tensors[i].data.size()});
  }
  c.scalars.clear();
  for (const auto& [name, value] : state_->scalars()) c.scalars.push_back(value);
  pending_step_ = c.step;
  pending_ = std::async(std::launch::async, CopyShards, std::move(c), std::move(sources),
                        std::move(faulting));
  Changed();
  return OkStatus();
}

bool CommitStore::MatchesState() {
  Settle();
  if (commits_.empty() || commits_.back().step != step()) return false;
  const Image& c = commits_.back();
  const auto& tensors = state_->tensors();
  if (c.regions.size() != tensors.size()) return false;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Region& a = c.regions[i];
    const Region& b = tensors[i].region;
    if (!(a.box == b.box) || a.flat_begin != b.flat_begin || a.flat_end != b.flat_end ||
        c.tensors[i].size() != tensors[i].bytes()) {
      return false;
    }
  }
  return true;
}

bool CommitStore::MustRollBack(int64_t restore_step) {
  Settle();
  const bool moved_since_commit =
      !commits_.empty() && commits_.back().step == step() && !MatchesState();
  return step() != restore_step || moved_since_commit;
}

Status CommitStore::Restore(int64_t target_step) {
  Settle();
  while (!commits_.empty() && commits_.back().step > target_step) {
    spare_.push_back(std::move(commits_.back()));
    commits_.pop_back();
  }
  if (commits_.empty() || commits_.back().step != target_step) {
    return FailedPreconditionError("no in-memory commit of step " + std::to_string(target_step) +
                                   " to roll back to");
  }
  const Image& c = commits_.back();
  // The values are overwritten below.
  ELASTRA_RETURN_IF_ERROR(TensorCollectionAccess::MoveToHost(*state_, /*keep_values=*/false));
  auto& tensors = TensorCollectionAccess::Tensors(*state_);
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensors[i].data.assign(c.tensors[i].begin(), c.tensors[i].end());
    tensors[i].region = c.regions[i];
  }
  auto& scalars = TensorCollectionAccess::Scalars(*state_);
  for (size_t i = 0; i < scalars.size(); ++i) scalars[i].second = c.scalars[i];
  Changed();
  return OkStatus();
}

}  // namespace elastra
