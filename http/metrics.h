// The job's metrics in the Prometheus text exposition format (version 0.0.4), what GET /metrics of
// the HTTP API answers (docs/http.md, "GET /metrics"). Made only from what the coordinator knows
// (proto::JobStatus): generation, sizes, layout, steps, the reconfiguration downtime of each
// generation in the history by reason, failures by kind, worker heartbeat ages. Thread-safe
// (pure).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "protocol/messages.h"
#include "common/job_events.h"

namespace elastra::http {

// Every metric is named elastra_*, has a # HELP and a # TYPE line, and label values are escaped.
std::string PrometheusMetrics(const proto::JobStatus& status);

// The metrics made from the job's journal events (common/job_events.h), which the status
// does not carry and which survive a coordinator restart: events by type, the newest committed
// checkpoint's step and bytes, the steps rolled back by recoveries. Fed every event once, in order.
// Thread-compatible.
class JournalEventMetrics {
 public:
  JournalEventMetrics();
  void Add(const JobEvent& event);
  // Prometheus text, in the same conventions as PrometheusMetrics.
  std::string Text() const;

 private:
  std::map<std::string, uint64_t> counts_;  // by event type
  int64_t checkpoint_step_ = -1;
  int64_t checkpoint_bytes_ = -1;    // of the newest committed checkpoint; -1 when not known
  int64_t checkpoint_bytes_total_ = 0;
  double checkpoint_seconds_ = -1;
  int64_t rolled_back_steps_ = 0;
};

}  // namespace elastra::http
