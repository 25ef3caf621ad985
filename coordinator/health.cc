#include "coordinator/health.h"

#include <algorithm>

namespace elastra::coordinator {

void HealthMonitor::Beat(const std::string& id) {
  const TimePoint now = clock_->Now();
  if (Last* last = last_.Find(id)) {
    if (last->at == now) return;  // the queued beat of this instant stands for this one
    last->at = now;
  } else {
    last_.Emplace(Last{id, now});
  }
  beats_.emplace_back(now, id);
}

void HealthMonitor::Forget(const std::string& id) { last_.Erase(id); }

std::vector<std::string> HealthMonitor::TakeExpired() {
  std::vector<std::string> expired;
  const TimePoint now = clock_->Now();
  while (!beats_.empty() && now - beats_.front().first > timeout_) {
    const auto& [at, id] = beats_.front();
    const Last* last = last_.Find(id);
    if (last != nullptr && last->at == at) {  // its last beat: not superseded, not forgotten
      expired.push_back(id);
      last_.Erase(id);
    }
    beats_.pop_front();
  }
  std::sort(expired.begin(), expired.end());
  return expired;
}

int64_t HealthMonitor::MillisSinceLast(const std::string& id) const {
  const Last* last = last_.Find(id);
  if (last == nullptr) return -1;
  return std::chrono::duration_cast<Duration>(clock_->Now() - last->at).count();
}

}  // namespace elastra::coordinator
