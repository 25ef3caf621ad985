// HealthMonitor: heartbeat deadlines, as Ray's GCS health-check manager keeps them. Time comes from
// an injected Clock so tests step it. Thread-compatible.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/clock.h"

namespace elastra::coordinator {

class HealthMonitor {
 public:
  // `clock` is not owned and must outlive the monitor.
  HealthMonitor(Clock* clock, Duration timeout) : clock_(clock), timeout_(timeout) {}

  // Starts watching `id` (or refreshes its deadline).
  void Beat(const std::string& id);
  // Stops watching `id` (finished, leaving, removed).
  void Forget(const std::string& id);
  bool Watching(const std::string& id) const { return last_.count(id) > 0; }

  // The ids whose last beat is older than the timeout; they are no longer watched.
  std::vector<std::string> TakeExpired();

  // Milliseconds since the last beat of `id`, -1 when not watched.
  int64_t MillisSinceLast(const std::string& id) const;

  Duration timeout() const { return timeout_; }

 private:
  Clock* clock_;
  Duration timeout_;
  std::map<std::string, TimePoint> last_;
};

}  // namespace elastra::coordinator
