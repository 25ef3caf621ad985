// The job status as JSON: the object `elastra status --json` prints and `elastra run` writes to
// <state_dir>/status.json. Made from the typed proto::JobStatus, which is what programs decide
// on; the JSON is for people and scripts. Thread-safe (pure).
#pragma once

#include <string>

#include "common/messages.h"

namespace elastra::proto {

// One line of JSON: job, state, generation, layout, step, workers, history, agents, counters,
// and pending_resize while a resize is in flight (README.md, "elastra status").
std::string StatusJson(const JobStatus& status);

}  // namespace elastra::proto
