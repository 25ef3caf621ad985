// The job status as JSON: the object `elastra status --json` prints and `elastra run` writes to
// <state_dir>/status.json. Made from the typed proto::JobStatus, which is what programs decide
// on; the JSON is for people and scripts. Thread-safe (pure).
#pragma once

#include <string>

#include "protocol/messages.h"

namespace elastra::proto {

// One line of JSON: job, state, generation, layout, step, workers, history, agents, counters,
// and pending_resize while a resize is in flight (README.md, "elastra status").
std::string StatusJson(const JobStatus& status);

// A resize's or drain's outcome as one line of JSON, the object `elastra resize|drain` prints:
// phase, generation, workers, layout; with phase "done" also downtime_ms, agreement_ms,
// rebuild_ms, transfer_ms, total_ms; message when there is one; host when `host` is not empty.
std::string ResizeReplyJson(const ResizeReply& reply, const std::string& host = "");

}  // namespace elastra::proto
