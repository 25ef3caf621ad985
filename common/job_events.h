// The job's events as GET /v1/events streams them (docs/http.md, "GET /v1/events"): each
// generation formed, worker or host lost, resize accepted and ended, checkpoint committed and the
// job's end. The journal makes them from its records (journal/events.h); the HTTP API reads them
// through a JobEventSource that its launcher hands it, so neither knows the other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace elastra {

struct JobEvent {
  uint64_t id = 0;   // grows with every event; "after id N" is a resumable position
  std::string type;  // generation, worker_lost, host_lost, resize_accepted, resize_refused,
                     // resize_end, checkpoint, job_end
  std::string data;  // one line of JSON: {"type": ..., fields of the event}
};

// A reader of the job's events from some position on. Thread-compatible: one reader per stream.
class JobEventSource {
 public:
  virtual ~JobEventSource() = default;
  // The events that came since the last call (all of them after the start position the first
  // time), oldest first; none when there is nothing new.
  virtual std::vector<JobEvent> ReadNew() = 0;
};

}  // namespace elastra
