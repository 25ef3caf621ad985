// Worker <-> coordinator messages (part of the wire protocol, messages.h): joining and leaving,
// heartbeats, the pause/recover/new-generation sequence of a change, checkpoint and failure
// reports, and the key-value store of communicator rendezvous. Plain data; thread-compatible.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/message_vocabulary.h"

namespace elastra::proto {

struct JoinRequest {
  std::string worker_id;  // stable for the process's life; assigned by the launcher
  std::string host;       // host name, for rank placement
  int32_t device = -1;    // local GPU index, -1 for CPU
  int64_t pid = 0;
  StateSpec state;         // the tensors this worker registered: layouts are checked against it
  std::string model_json;  // optional model description for the planner (docs/resharding.md)
  // Where this worker serves its rendezvous records (collectives/record_server.h): an IPv4
  // endpoint packed in 6 bytes (PackEndpoint), or empty when it serves none.
  std::string rendezvous;
  // The memory this worker may use for the job's state (WorkerOptions::device_memory_bytes);
  // 0: unlimited. The coordinator never gives it a rank whose share does not fit (protocol 9).
  int64_t device_memory_bytes = 0;
  template <class A> void serialize(A& ar) {
    ar(worker_id, host, device, pid, state, model_json, rendezvous, device_memory_bytes);
  }
};

struct JoinReply {
  std::string worker_id;
  uint64_t generation = 0;  // the job's current generation
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  template <class A> void serialize(A& ar) {
    ar(worker_id, generation, heartbeat_interval_ms, heartbeat_timeout_ms);
  }
};

struct LeaveRequest {
  LeaveReason reason = LeaveReason::kFinished;
  std::string detail;  // for logs: why, in words
  template <class A> void serialize(A& ar) {
    SerializeEnum(ar, reason);
    ar(detail);
  }
};

// A number the training loop reported (Worker::Report): its latest value and the step it was
// reported in.
struct TrainingMetric {
  std::string name;  // [A-Za-z_][A-Za-z0-9_]*, at most kMaxMetricNameBytes
  double value = 0;
  int64_t step = -1;
  template <class A> void serialize(A& ar) { ar(name, value, step); }
};
inline constexpr size_t kMaxTrainingMetrics = 16;  // names per worker
inline constexpr size_t kMaxMetricNameBytes = 64;
// Whether `name` may name a TrainingMetric: [A-Za-z_][A-Za-z0-9_]*, 1..kMaxMetricNameBytes bytes.
inline bool IsValidMetricName(std::string_view name) {
  if (name.empty() || name.size() > kMaxMetricNameBytes) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Worker -> coordinator, every heartbeat interval. The training loop's numbers ride along, so they
// cost no message of their own.
struct Heartbeat {
  int64_t step = -1;    // the last step this worker applied
  int64_t samples = 0;  // samples this worker reported consumed since it started (ReportSamples)
  std::vector<TrainingMetric> metrics;  // the latest value of each name reported
  template <class A> void serialize(A& ar) { ar(step, samples, metrics); }
};

// Coordinator -> members of the current generation: a planned change is pending. Each worker
// stops after the same step (agreed among the workers with one small collective per step), then
// sends PausedReport.
struct PauseRequest {
  uint64_t target_generation = 0;
  GenerationReason reason = GenerationReason::kResize;
  template <class A> void serialize(A& ar) {
    ar(target_generation);
    SerializeEnum(ar, reason);
  }
};

// Coordinator -> survivors: a member was lost. Abort communicators at once (a collective blocked on
// the lost peer is broken, not waited out) and send PausedReport with the commits held.
struct RecoverRequest {
  uint64_t target_generation = 0;
  std::vector<std::string> lost;  // worker ids
  template <class A> void serialize(A& ar) { ar(target_generation, lost); }
};

// One of a worker's dp, pp or tp communicators as the worker stopped it for a change (protocol
// 10; worker/group_gate.h). The coordinator keeps a group for the next generation when its members
// are the same workers in the same order and every one reports it intact, built in the committed
// generation, with as many collectives completed and every message sent to a peer received by
// it: then no byte of it is in flight and no member is inside a call (docs/recovery.md, "Rebuild
// only what changed").
// A group's kind: its index in GroupHealth::kind, its bit (1 << kind) in keep_groups.
enum GroupKind : uint8_t { kDpGroup = 0, kPpGroup = 1, kTpGroup = 2 };
struct GroupHealth {
  uint8_t kind = kDpGroup;       // GroupKind
  uint64_t generation = 0;       // the generation that built it
  bool intact = false;           // no call was in flight when it stopped, none failed
  int64_t calls = 0;             // collectives completed
  std::vector<int32_t> peers;    // the group ranks it sent to or received from, ascending
  std::vector<int64_t> sent;     // point-to-point messages sent to each of `peers`
  std::vector<int64_t> received; // and received from each
  template <class A> void serialize(A& ar) {
    ar(kind, generation, intact, calls, peers, sent, received);
  }
};

struct PausedReport {
  uint64_t target_generation = 0;
  int64_t step = -1;                  // state held now: steps [0, step) applied
  std::vector<int64_t> commit_steps;  // in-memory commits held (state after that many steps)
  bool failed = false;                // true when answering a RecoverRequest
  // Where those commits are: the layout and the worker's rank in it of the generation that made
  // them (rank -1: not stated). A worker that built a generation which then failed holds its
  // commits in that generation's layout, not the committed one; the coordinator learns it from
  // here, so that it knows even after a restart (protocol 6).
  Layout commits_layout;
  int32_t commits_rank = -1;
  // Its dp, pp and tp communicators, those that are not the world (protocol 10).
  std::vector<GroupHealth> groups;
  template <class A> void serialize(A& ar) {
    ar(target_generation, step, commit_steps, failed, commits_layout, commits_rank, groups);
  }
};

struct Member {
  std::string worker_id;
  std::string host;
  int32_t device = -1;
  Coordinates coords;
  bool has_state = true;  // false for a worker that joined and holds no training state yet
  int32_t rank = -1;      // its global rank in the table's layout (the entry's key)
  // Its index among the workers of the generation's state move (StateMove::workers: the new
  // members by new rank, then the leaving workers that hold state); -1 when it takes no part.
  int32_t worker = -1;
  template <class A> void serialize(A& ar) {
    ar(worker_id, host, device, coords, has_state, rank, worker);
  }
};

// One rectangle of one tensor the state move sends from plan worker `src` to `dst`
// (elastra::Transfer without its byte count, which the rectangle and the tensor give).
struct MoveTransfer {
  int32_t tensor = 0;
  int32_t src = 0;
  int32_t dst = 0;
  int64_t row_begin = 0, row_end = 0, col_begin = 0, col_end = 0;
  template <class A> void serialize(A& ar) {
    ar(tensor, src, dst, row_begin, row_end, col_begin, col_end);
  }
};

// What the coordinator's plan of the state move says.
enum class MovePlan : uint8_t {
  kNone = 0,     // nothing planned: a job resumed from disk loads the checkpoint
  kMove = 1,     // `transfers` hold this recipient's part of the plan
  kLost = 2,     // some shard has no live holder: load the newest checkpoint (`error` says which)
  kInvalid = 3,  // the plan was refused (`error`); the generation fails
};
template <> inline constexpr MovePlan kLastEnumerator<MovePlan> = MovePlan::kInvalid;

// A recipient's part of the state move of a generation change. The coordinator plans the move
// once from the full tables (state/plan/state_move_plan.h); each worker gets the transfers it sends
// or receives, in plan order, and works out its local copies itself.
struct StateMovePart {
  MovePlan plan = MovePlan::kNone;
  std::string error;
  bool needs_leavers = false;  // some transfer is sent by a leaving worker (a hand-off group)
  int32_t workers = 0;         // the plan's workers: new members, then leavers holding state
  int32_t tensors = 0;         // the tensors the coordinator planned for (checked by the worker)
  std::vector<MoveTransfer> transfers;
  template <class A> void serialize(A& ar) {
    SerializeEnum(ar, plan);
    ar(error, needs_leavers, workers, tensors, transfers);
  }
};

// How the new generation's NCCL world can be made from the previous generation's: possible when
// every new member was a rank of generation `from_generation` (of `from_world` ranks), then
// without `excluded` old ranks and renumbered when the survivors' old order is not the new one.
// The old ranks to exclude (`exclude`, ascending) go to the new rank 0 alone, when it is on a
// device: ncclCommShrink takes the list on every rank, and the ranks pass it on over their Gloo
// control world (worker/group_building.h, AgreeNcclReuse), so that a recovery from f failures
// costs the coordinator O(N + f) bytes, not N x f (docs/scale.md). The worker adds what only it
// knows: whether it still holds that world and in what health.
struct NcclReuse {
  uint64_t from_generation = 0;
  int32_t from_world = 0;
  bool possible = false;
  bool renumber = false;
  int32_t excluded = 0;
  std::vector<int32_t> exclude;
  template <class A> void serialize(A& ar) {
    ar(from_generation, from_world, possible, renumber, excluded, exclude);
  }
};
// The reuse of a world of `old_ids` (by old rank) for one of `new_ids` (by new rank), the old
// world being healthy; exclude and excluded are filled.
NcclReuse NcclReuseOf(const std::vector<std::string>& old_ids,
                      const std::vector<std::string>& new_ids);

// Coordinator -> every worker concerned: the next generation, addressed to each recipient. Members
// build communicators under kv_prefix (Gloo and NCCL groups meet by prefix and size: no member
// list), restore the state of `restore_step` (their own commit or current state), run their part
// of the state move, send GenerationReady, and go on. Workers not in the generation but addressed
// (leaving) get leave = true, hand off what the move needs of them, and exit 0.
struct NewGeneration {
  uint64_t generation = 0;
  Layout layout;
  // Sparse, ordered by rank: the recipient's own entry (a member's) and the members it sends
  // state to. Not the whole table: a change costs O(N) bytes in all, not O(N^2).
  std::vector<Member> members;
  int64_t restore_step = 0;     // the step all members continue from
  int32_t source_rank = 0;      // a rank holding the state at restore_step
  bool leave = false;           // for this recipient: hand off and exit 0
  // With `leave`: stay in the job as a standby instead of exiting (release the communicators and
  // the state, join again as standby, and come back at a later change; protocol 9). A layout
  // that uses fewer workers than are alive leaves the others so.
  bool standby = false;
  std::string kv_prefix;        // rendezvous prefix for this generation's communicators
  GenerationReason reason = GenerationReason::kStart;
  // Where the state is now: the previous generation's layout, and, sparse and ordered by old
  // rank, the recipient's own entry and those of the workers it receives state from (has_state
  // = false for a rank whose worker is lost or holds no usable commit). For the first
  // generation: layout dp=pp=tp=1 held by the new rank 0.
  Layout prev_layout;
  std::vector<Member> prev_members;
  // The newest committed checkpoint (a directory; empty when none). Members load it when the
  // state cannot be rebuilt from memory (a shard lost with its only holder), and on reason
  // "resume" (a job restarted from disk).
  std::string checkpoint_dir;
  int32_t scalars_source = 0;  // the lowest new rank that held the state: it broadcasts the scalars
  StateMovePart move;          // this recipient's part of the state move
  NcclReuse nccl;
  // For a member: the rendezvous endpoints (6 bytes each, collectives/record_server.h) of its
  // build peers in the world, BuildPeers(rank, world) in order (common/mesh_peers.h). The world's
  // address records are then read from those peers, not the store under kv_prefix. Empty: every
  // key goes to the store (a member serves no records, or the world has one rank).
  std::string build_peers;
  // For a member (protocol 10): which of its new dp, pp and tp groups (bits 1 << GroupKind) are
  // its communicators of the committed generation, kept instead of built (GroupHealth says when).
  uint8_t keep_groups = 0;
  // On the wire the fields every recipient of one change shares come first, then the recipient's
  // own: the coordinator encodes the shared ones once per change and each recipient's behind a
  // copy of them (MakeFrameShared, protocol/codec.h; protocol 8).
  template <class A> void SerializeShared(A& ar) {
    ar(generation, layout, restore_step, source_rank, kv_prefix);
    SerializeEnum(ar, reason);
    ar(prev_layout, checkpoint_dir, scalars_source, nccl.from_generation, nccl.from_world,
       nccl.renumber, nccl.excluded);
  }
  template <class A> void SerializeOwn(A& ar) {
    ar(members, leave, standby, prev_members, move, nccl.possible, nccl.exclude, build_peers,
       keep_groups);
  }
  template <class A> void serialize(A& ar) {
    SerializeShared(ar);
    SerializeOwn(ar);
  }
};

// Worker -> coordinator: this rank's shard file of checkpoint (step, generation) is durable (or
// failed). The coordinator commits the manifest when every rank of that generation reported.
struct CheckpointWritten {
  uint64_t generation = 0;
  int64_t step = 0;
  int32_t rank = 0;
  int32_t ranks = 0;        // world size of that generation
  Layout layout;
  std::string root;         // the checkpoint root directory
  bool ok = false;
  std::string error;        // why not, when !ok
  std::string descriptor;   // EncodeShardDescriptor() bytes, when ok
  double write_seconds = 0;  // from the snapshot's start until the shard was durable
  template <class A> void serialize(A& ar) {
    ar(generation, step, rank, ranks, layout, root, ok, error, descriptor, write_seconds);
  }
};

struct GenerationReady {
  uint64_t generation = 0;
  double rebuild_ms = 0;   // communicator build
  double transfer_ms = 0;  // state transfer and restore
  int64_t bytes_received = 0;
  template <class A> void serialize(A& ar) { ar(generation, rebuild_ms, transfer_ms, bytes_received); }
};

struct FailureReport {
  uint64_t generation = 0;
  int32_t code = 0;
  std::string message;
  template <class A> void serialize(A& ar) { ar(generation, code, message); }
};

struct KvSetRequest {
  std::string key;
  std::string value;
  template <class A> void serialize(A& ar) { ar(key, value); }
};

struct KvGetRequest {
  std::string key;
  int64_t timeout_ms = 0;
  template <class A> void serialize(A& ar) { ar(key, timeout_ms); }
};

struct KvWaitRequest {
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  template <class A> void serialize(A& ar) { ar(keys, timeout_ms); }
};

struct KvAddRequest {
  std::string key;
  int64_t delta = 0;
  template <class A> void serialize(A& ar) { ar(key, delta); }
};

struct KvReply {
  std::string value;   // for get
  int64_t number = 0;  // for add
  template <class A> void serialize(A& ar) { ar(value, number); }
};

struct KvSetAndGetRequest {
  std::vector<std::string> set_keys;    // set first, in order
  std::vector<std::string> set_values;  // as many as set_keys
  std::vector<std::string> get_keys;    // then answered with their values once all exist
  int64_t timeout_ms = 0;
  template <class A> void serialize(A& ar) { ar(set_keys, set_values, get_keys, timeout_ms); }
};

struct KvValuesReply {
  std::vector<std::string> values;  // of KvSetAndGetRequest::get_keys, in order
  template <class A> void serialize(A& ar) { ar(values); }
};

// Coordinator -> the sender of a Heartbeat: the coordinator hears it. A worker that hears nothing
// for longer than its lease fences itself (docs/hosts.md, "Partitions and fencing").
struct HeartbeatAck {
  uint64_t generation = 0;  // the coordinator's committed generation
  template <class A> void serialize(A& ar) { ar(generation); }
};

}  // namespace elastra::proto
