#include "coordinator/health.h"

namespace elastra::coordinator {

void HealthMonitor::Beat(const std::string& id) { last_[id] = clock_->Now(); }

void HealthMonitor::Forget(const std::string& id) { last_.erase(id); }

std::vector<std::string> HealthMonitor::TakeExpired() {
  std::vector<std::string> expired;
  const TimePoint now = clock_->Now();
  for (auto it = last_.begin(); it != last_.end();) {
    if (now - it->second > timeout_) {
      expired.push_back(it->first);
      it = last_.erase(it);
    } else {
      ++it;
    }
  }
  return expired;
}

int64_t HealthMonitor::MillisSinceLast(const std::string& id) const {
  auto it = last_.find(id);
  if (it == last_.end()) return -1;
  return std::chrono::duration_cast<Duration>(clock_->Now() - it->second).count();
}

}  // namespace elastra::coordinator
