// The lease that fences a client the coordinator no longer hears (see Lease in
// control_client.h).
#include <algorithm>

#include "protocol/control_client.h"

namespace elastra {

void Lease::Heard(TimePoint now, bool ack) {
  if (Expired(now)) fenced_ = true;
  last_heard_ = now;
  if (ack) armed_ = true;
}

bool Lease::Fenced(TimePoint now) {
  if (Expired(now)) fenced_ = true;
  return fenced_;
}

Duration LeaseFor(Duration heartbeat_timeout, Duration coordinator_interval,
                  Duration own_interval) {
  const Duration interval = std::max(coordinator_interval, own_interval);
  if (heartbeat_timeout.count() <= 0 || interval >= heartbeat_timeout) return Duration(0);
  return std::max(heartbeat_timeout - 2 * interval, (heartbeat_timeout + interval) / 2);
}

}  // namespace elastra
