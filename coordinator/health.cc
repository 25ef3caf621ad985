#include "coordinator/health.h"

#include <algorithm>

namespace elastra::coordinator {

void HealthMonitor::Beat(uint32_t slot) {
  const TimePoint now = clock_->Now();
  if (slot >= last_.size()) last_.resize(static_cast<size_t>(slot) + 1, kNotWatched);
  if (last_[slot] == now) return;  // the queued beat of this instant stands for this one
  last_[slot] = now;
  beats_.emplace_back(now, slot);
}

void HealthMonitor::Forget(uint32_t slot) {
  if (slot < last_.size()) last_[slot] = kNotWatched;
}

std::vector<uint32_t> HealthMonitor::TakeExpired() {
  std::vector<uint32_t> expired;
  const TimePoint now = clock_->Now();
  while (!beats_.empty() && now - beats_.front().first > timeout_) {
    const auto [at, slot] = beats_.front();
    // Its last beat, not superseded and not forgotten. A slot that changed hands meanwhile is
    // judged by its new worker's last beat, which is what `last_` holds then.
    if (last_[slot] == at) {
      expired.push_back(slot);
      last_[slot] = kNotWatched;
    }
    beats_.pop_front();
  }
  std::sort(expired.begin(), expired.end());
  return expired;
}

int64_t HealthMonitor::MillisSinceLast(uint32_t slot) const {
  if (!Watching(slot)) return -1;
  return std::chrono::duration_cast<Duration>(clock_->Now() - last_[slot]).count();
}

}  // namespace elastra::coordinator
