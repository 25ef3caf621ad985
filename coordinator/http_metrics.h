// The job's metrics in the Prometheus text exposition format (version 0.0.4), what GET /metrics of
// the HTTP API answers (docs/http.md, "GET /metrics"). Made only from what the coordinator knows
// (proto::JobStatus): generation, sizes, layout, steps, the reconfiguration downtime of each
// generation in the history by reason, failures by kind, worker heartbeat ages. Thread-safe
// (pure).
#pragma once

#include <string>

#include "common/messages.h"

namespace elastra::coordinator {

// Every metric is named elastra_*, has a # HELP and a # TYPE line, and label values are escaped.
std::string PrometheusMetrics(const proto::JobStatus& status);

}  // namespace elastra::coordinator
