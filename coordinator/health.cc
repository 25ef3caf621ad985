#include "coordinator/health.h"

#include <algorithm>

namespace elastra::coordinator {

void HealthMonitor::Beat(const std::string& id) {
  const TimePoint now = clock_->Now();
  auto [it, added] = last_.try_emplace(id, now);
  if (!added) {
    if (it->second == now) return;  // the queued beat of this instant stands for this one
    it->second = now;
  }
  beats_.emplace_back(now, id);
}

void HealthMonitor::Forget(const std::string& id) { last_.erase(id); }

std::vector<std::string> HealthMonitor::TakeExpired() {
  std::vector<std::string> expired;
  const TimePoint now = clock_->Now();
  while (!beats_.empty() && now - beats_.front().first > timeout_) {
    const auto& [at, id] = beats_.front();
    auto it = last_.find(id);
    if (it != last_.end() && it->second == at) {  // its last beat: not superseded, not forgotten
      expired.push_back(id);
      last_.erase(it);
    }
    beats_.pop_front();
  }
  std::sort(expired.begin(), expired.end());
  return expired;
}

int64_t HealthMonitor::MillisSinceLast(const std::string& id) const {
  auto it = last_.find(id);
  if (it == last_.end()) return -1;
  return std::chrono::duration_cast<Duration>(clock_->Now() - it->second).count();
}

}  // namespace elastra::coordinator
