// Admin client -> coordinator messages (part of the wire protocol, messages.h): resize and drain
// requests with their replies, and the job's status as `elastra status` shows it. Plain data;
// thread-compatible.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/message_vocabulary.h"
#include "protocol/worker_messages.h"  // TrainingMetric, in the status

namespace elastra::proto {

struct ResizeRequest {
  int32_t workers = 0;      // 0 with spares >= 0: only the spares change
  bool has_layout = false;  // an exact layout was asked for
  Layout layout;
  bool wait = false;        // send a second reply when the job runs at the new size
  // The standby workers to keep beyond the layout from now on (protocol 10); -1: unchanged.
  int32_t spares = -1;
  template <class A> void serialize(A& ar) { ar(workers, has_layout, layout, wait, spares); }
};

struct ResizeReply {
  ResizePhase phase = ResizePhase::kAccepted;
  uint64_t generation = 0;
  int32_t workers = 0;
  Layout layout;
  double downtime_ms = 0;   // first worker paused -> last worker ready
  double agreement_ms = 0;  // pause request -> all paused
  double rebuild_ms = 0;    // slowest communicator build
  double transfer_ms = 0;   // slowest state transfer
  double total_ms = 0;      // request -> done (includes starting new workers)
  std::string message;
  template <class A> void serialize(A& ar) {
    SerializeEnum(ar, phase);
    ar(generation, workers, layout, downtime_ms, agreement_ms, rebuild_ms, transfer_ms, total_ms,
       message);
  }
};

struct StatusRequest {
  // Only the job as a whole (job, state, generation, layout, target_workers): no workers, hosts,
  // step or history. What a parked worker and an idle agent poll for (protocol 10): a full status grows
  // with the job (about 2 MB and 7 ms of the coordinator's CPU at 16,384 workers).
  bool brief = false;
  template <class A> void serialize(A& ar) { ar(brief); }
};

// The job as the coordinator sees it: what `elastra status` shows (protocol/status_json.h turns it
// into the object `elastra status --json` prints) and what launchers and parked workers decide on.
struct WorkerStatus {
  std::string id;
  std::string host;
  int64_t pid = 0;
  int32_t device = -1;
  WorkerState state = WorkerState::kStandby;
  int32_t rank = -1;
  int64_t step = -1;                   // the last step it reported applying
  int64_t last_heartbeat_ms_ago = -1;  // -1: none awaited
  template <class A> void serialize(A& ar) {
    ar(id, host, pid, device);
    SerializeEnum(ar, state);
    ar(rank, step, last_heartbeat_ms_ago);
  }
};

// One committed generation and what forming it cost.
struct GenerationRecord {
  uint64_t generation = 0;
  GenerationReason reason = GenerationReason::kStart;
  std::vector<std::string> workers;  // by rank
  Layout layout;
  double downtime_ms = 0;   // first worker paused -> last worker ready
  double agreement_ms = 0;  // pause request -> all paused
  double rebuild_ms = 0;    // slowest communicator build
  double transfer_ms = 0;   // slowest state transfer
  // State bytes the members received from other workers (0 after a coordinator restart: not
  // journaled); a recovery with a standby moves the lost worker's shards only (protocol 9).
  int64_t bytes_moved = 0;
  // The communicators the change built and those it kept from the generation before: the world
  // (with NCCL, and its Gloo control world) and each dp, pp and tp group that is not the world
  // (protocol 10; 0 and 0 after a coordinator restart: not journaled).
  int32_t groups_rebuilt = 0;
  int32_t groups_kept = 0;
  template <class A> void serialize(A& ar) {
    ar(generation);
    SerializeEnum(ar, reason);
    ar(workers, layout, downtime_ms, agreement_ms, rebuild_ms, transfer_ms, bytes_moved,
       groups_rebuilt, groups_kept);
  }
};

struct AgentStatus {
  std::string id;
  std::string host;
  int32_t max_workers = 0;
  template <class A> void serialize(A& ar) { ar(id, host, max_workers); }
};

// One host: an agent's registration and what runs there now.
struct HostStatus {
  std::string name;
  std::string address;
  int32_t slots = 0;
  int32_t gpus = 0;
  int32_t workers = 0;  // members, standby and leaving workers on it now
  HostState state = HostState::kUp;
  int64_t last_heartbeat_ms_ago = -1;  // of its agent; -1 when none is awaited
  template <class A> void serialize(A& ar) {
    ar(name, address, slots, gpus, workers);
    SerializeEnum(ar, state);
    ar(last_heartbeat_ms_ago);
  }
};

// What the training loops reported (Worker::Report, ReportSamples), summed up by the coordinator
// (coordinator/training_metrics.h), and a bounded series of it over steps for the dashboard.
struct TrainingPoint {
  int64_t step = -1;
  double seconds = 0;             // since the coordinator started
  double samples_per_second = 0;  // since the previous point
  std::vector<TrainingMetric> metrics;
  template <class A> void serialize(A& ar) { ar(step, seconds, samples_per_second, metrics); }
};
struct TrainingStatus {
  int64_t samples = 0;            // consumed since the job started, one count per replica
  double samples_per_second = 0;  // over the last few seconds; 0 when none were reported
  double goodput = 0;             // time running over time since the coordinator started
  double running_seconds = 0;
  double wall_seconds = 0;         // since the coordinator started
  std::vector<TrainingMetric> metrics;  // per name, the value of the lowest-ranked member
  std::vector<TrainingPoint> series;    // oldest first, at most TrainingMetrics::kMaxPoints
  template <class A> void serialize(A& ar) {
    ar(samples, samples_per_second, goodput, running_seconds, wall_seconds, metrics, series);
  }
};

struct JobStatus {
  std::string job;
  JobState state = JobState::kForming;
  uint64_t generation = 0;  // committed
  Layout layout;
  int64_t step = -1;        // the furthest step a member or finished worker reported
  std::vector<WorkerStatus> workers;       // by join order
  std::vector<GenerationRecord> history;   // oldest first
  std::vector<AgentStatus> agents;
  std::vector<HostStatus> hosts;  // every host an agent registered, by registration order
  int32_t target_workers = 0;     // the size the job returns to: the start size or last resize
  uint64_t malformed_frames = 0;
  uint64_t stale_messages = 0;
  bool resize_pending = false;             // an accepted resize not yet done or failed
  int32_t resize_workers = 0;              // what it asked for
  bool resize_waiting_for_workers = false;  // it waits for workers to start and join
  TrainingStatus training;
  // Checkpoints to disk: the newest committed one (step -1 and "" when none), and the newest that
  // failed, with why (a rank's write or the commit; step -1 and "" when none failed since the
  // coordinator started). A failure newer than the committed step means checkpoints fail now.
  int64_t checkpoint_step = -1;
  std::string checkpoint_dir;
  int64_t checkpoint_error_step = -1;
  std::string checkpoint_error;
  // Why the job waits for workers (state kWaitingForWorkers): no layout of the live workers fits
  // their memory, with the numbers. Empty otherwise.
  std::string waiting_reason;
  // The standby workers the job keeps beyond its layout (--spares, or the last resize that named
  // them; protocol 10). The standbys standing now are the workers whose state is kStandby.
  int32_t spares_target = 0;
  template <class A> void serialize(A& ar) {
    ar(job);
    SerializeEnum(ar, state);
    ar(generation, layout, step, workers, history, agents, hosts, target_workers, malformed_frames,
       stale_messages, resize_pending, resize_workers, resize_waiting_for_workers, training,
       checkpoint_step, checkpoint_dir, checkpoint_error_step, checkpoint_error, waiting_reason,
       spares_target);
  }
  bool over() const { return state == JobState::kFinished || state == JobState::kFailed; }
};

struct StatusReply {
  JobStatus status;
  template <class A> void serialize(A& ar) { ar(status); }
};

// Admin (any host) or the agent of `host` (its own host only) -> coordinator: move the job off
// `host` in one planned generation (replacements start on other hosts with free slots up to the
// target size); its agent is then told to exit 0. Replied to as a resize.
struct DrainRequest {
  std::string host;
  bool wait = false;  // a second reply when the job has left the host
  template <class A> void serialize(A& ar) { ar(host, wait); }
};

}  // namespace elastra::proto
