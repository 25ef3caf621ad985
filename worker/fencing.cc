#include "worker/fencing.h"

namespace elastra {

using proto::JobState;
using proto::WorkerState;

const char* ToString(FenceOutcome outcome) {
  switch (outcome) {
    case FenceOutcome::kResume:
      return "resume";
    case FenceOutcome::kRecover:
      return "recover";
    case FenceOutcome::kRemoved:
      return "removed";
    case FenceOutcome::kJobFinished:
      return "job finished";
    case FenceOutcome::kJobFailed:
      return "job failed";
  }
  return "?";
}

FenceOutcome DecideAfterFence(const proto::JobStatus& status, const std::string& worker_id,
                              uint64_t generation) {
  if (status.state == JobState::kFinished) return FenceOutcome::kJobFinished;
  if (status.state == JobState::kFailed) return FenceOutcome::kJobFailed;
  const proto::WorkerStatus* me = nullptr;
  for (const auto& w : status.workers) {
    if (w.id == worker_id) me = &w;
  }
  // Gone from the job, declared lost, or held as standby (no generation of the coordinator's
  // includes it): its generation went on, or will, without it.
  if (me == nullptr || me->state == WorkerState::kLost || me->state == WorkerState::kStandby) {
    return FenceOutcome::kRemoved;
  }
  if (me->state == WorkerState::kMember && status.generation == generation &&
      (status.state == JobState::kRunning || status.state == JobState::kPausing)) {
    return FenceOutcome::kResume;
  }
  // A member of a job that is changing, or told to leave by a shrink: the coordinator's next
  // decision tells.
  return FenceOutcome::kRecover;
}

}  // namespace elastra
