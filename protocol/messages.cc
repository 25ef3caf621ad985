// Names of the protocol's enums (protocol/messages.h): for logs, the status JSON and the journal.
#include "protocol/messages.h"

#include "common/id_index.h"

namespace elastra::proto {
namespace {

// FromString over the names ToString gives, for enums numbered 0..kLastEnumerator.
template <class E>
bool ParseEnum(std::string_view name, E* out) {
  for (int v = 0; v <= static_cast<int>(kLastEnumerator<E>); ++v) {
    if (name == ToString(static_cast<E>(v))) {
      *out = static_cast<E>(v);
      return true;
    }
  }
  return false;
}

}  // namespace

NcclReuse NcclReuseOf(const std::vector<std::string>& old_ids,
                      const std::vector<std::string>& new_ids) {
  NcclReuse reuse;
  reuse.from_world = static_cast<int32_t>(old_ids.size());
  if (new_ids.empty()) return reuse;
  // A flat index of the old ranks, not a hash node per worker (docs/scale.md). An id twice in the
  // old world makes the reuse impossible.
  IdIndex old_rank;
  if (!old_rank.Build(&old_ids)) return reuse;
  std::vector<char> kept(old_ids.size(), 0);
  int last = -1;
  for (const std::string& id : new_ids) {
    const size_t r = old_rank.Find(id);
    if (r == IdIndex::kNone || kept[r]) return reuse;  // new, or twice
    kept[r] = 1;
    reuse.renumber |= static_cast<int>(r) < last;
    last = static_cast<int>(r);
  }
  for (size_t r = 0; r < old_ids.size(); ++r) {
    if (!kept[r]) reuse.exclude.push_back(static_cast<int32_t>(r));
  }
  reuse.excluded = static_cast<int32_t>(reuse.exclude.size());
  reuse.possible = true;
  return reuse;
}

const char* ToString(GenerationReason v) {
  switch (v) {
    case GenerationReason::kStart: return "start";
    case GenerationReason::kResize: return "resize";
    case GenerationReason::kFailure: return "failure";
    case GenerationReason::kResume: return "resume";
    case GenerationReason::kDrain: return "drain";
    case GenerationReason::kRegrow: return "regrow";
  }
  return "unknown";
}

const char* ToString(ResizePhase v) {
  switch (v) {
    case ResizePhase::kAccepted: return "accepted";
    case ResizePhase::kDone: return "done";
    case ResizePhase::kFailed: return "failed";
  }
  return "unknown";
}

const char* ToString(Role v) {
  switch (v) {
    case Role::kWorker: return "worker";
    case Role::kAdmin: return "admin";
  }
  return "unknown";
}

const char* ToString(WorkerState v) {
  switch (v) {
    case WorkerState::kStandby: return "standby";
    case WorkerState::kMember: return "member";
    case WorkerState::kLeaving: return "leaving";
    case WorkerState::kLost: return "lost";
    case WorkerState::kFinished: return "finished";
  }
  return "unknown";
}

const char* ToString(JobState v) {
  switch (v) {
    case JobState::kForming: return "forming";
    case JobState::kRunning: return "running";
    case JobState::kPausing: return "pausing";
    case JobState::kBuilding: return "building";
    case JobState::kRecovering: return "recovering";
    case JobState::kFinished: return "finished";
    case JobState::kFailed: return "failed";
    case JobState::kWaitingForWorkers: return "waiting_for_workers";
  }
  return "unknown";
}

const char* ToString(LeaveReason v) {
  switch (v) {
    case LeaveReason::kFinished: return "finished";
    case LeaveReason::kQuit: return "quit";
  }
  return "unknown";
}

const char* ToString(HostState v) {
  switch (v) {
    case HostState::kUp: return "up";
    case HostState::kDraining: return "draining";
    case HostState::kDrained: return "drained";
    case HostState::kLost: return "lost";
  }
  return "unknown";
}

bool FromString(std::string_view name, GenerationReason* out) { return ParseEnum(name, out); }
bool FromString(std::string_view name, WorkerState* out) { return ParseEnum(name, out); }

}  // namespace elastra::proto
