// Fencing: what a worker whose lease ran out does once the coordinator answers again
// (docs/hosts.md, "Partitions and fencing"). The lease itself is the ControlClient's (Lease in
// protocol/control_client.h); ReconfigurationLoop::StepEnd asks it before and after the step
// agreement and, when fenced, completes nothing until the coordinator has said where the worker
// stands. The decision on that answer is here, as a pure function of the job's status, so that
// every case is tested without a coordinator. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <string>

#include "protocol/messages.h"

namespace elastra {

// What a fenced worker does after the coordinator's answer.
enum class FenceOutcome {
  // Nothing changed: the coordinator runs (or pauses) the generation this worker runs, and holds
  // it as a live member. The fence is lifted and the step completes as if the silence had not been.
  kResume,
  // Still a member, but the job is changing (a recovery or a build in flight, another generation):
  // the worker reports a failure and waits for the coordinator's decision, as after a failed step.
  kRecover,
  // The coordinator has moved on without it (declared lost, holds it as standby, or no longer
  // knows it): the worker
  // stops (exit code 1, so that its agent may start a fresh one), or parks as standby under
  // mpirun (park_when_removed).
  kRemoved,
  // The job finished or failed meanwhile.
  kJobFinished,
  kJobFailed,
};

const char* ToString(FenceOutcome outcome);

// The outcome for worker `worker_id`, which runs generation `generation`, from the coordinator's
// status of the job. Only an exact match resumes: the committed generation is the worker's, the
// job is running or pausing, and the worker is a member. Anything else goes the way the
// coordinator decides (kRecover), unless it shows the worker gone (kRemoved) or the job over.
FenceOutcome DecideAfterFence(const proto::JobStatus& status, const std::string& worker_id,
                              uint64_t generation);

}  // namespace elastra
