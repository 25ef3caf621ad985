// The wire protocol between workers, agents, admin clients and the coordinator: the one place where
// messages are defined. docs/protocol.md tells the sequences; this file tells the bytes.
//
// Every ZeroMQ frame is one Envelope (cereal binary, decoded with BoundedInputArchive): magic,
// protocol version, message type, job, generation, sender, request id, payload. The payload is the
// cereal encoding of the struct named by the type. Requests carry a request id that the reply
// repeats; pushes from the coordinator carry request id 0.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "elastra/layout.h"
#include "elastra/sharding.h"

namespace elastra {
// Wire forms of the sharding types (they live in the public headers without cereal).
template <class A>
void serialize(A& ar, ShardingRule& r) {
  ar(r.tp_split_dim, r.layer, r.zero);
}
template <class A>
void serialize(A& ar, TensorSpec& t) {
  uint64_t element_size = t.element_size;
  ar(t.name, t.shape, element_size, t.rule);
  t.element_size = static_cast<size_t>(element_size);
}
template <class A>
void serialize(A& ar, StateSpec& s) {
  ar(s.num_layers, s.tensors);
}
}  // namespace elastra

namespace elastra::proto {

inline constexpr uint32_t kMagic = 0x454C5354;  // "ELST"
// 2: enums on the wire (reasons, phases, states) and a typed job status.
// 3: heartbeats carry the training loop's numbers (Worker::Report), the status their summary.
// 4: a checkpoint report carries its write time (CheckpointWritten.write_seconds); a
//    communicator's rendezvous in one request (KvSetAndGet).
// 5: NewGeneration is addressed to each recipient: its own entries and those of the workers it
//    trades state with (sparse member tables), its part of the state move the coordinator
//    planned, the scalars' source and the NCCL world's reuse, not the whole tables twice.
// 6: NcclReuse carries the number of old ranks excluded; the list itself goes to the new rank 0
//    only, which broadcasts it over the control world (O(N) bytes a change, not N x excluded).
//    PausedReport says in which layout and at which rank its commits are.
// 7: a worker serves its own rendezvous records (JoinRequest.rendezvous) and its NewGeneration
//    carries its world build peers' endpoints (NewGeneration.build_peers): the world's address
//    records no longer go through the coordinator's store.
// 8: NewGeneration's fields that every recipient of a change shares come first on the wire, so
//    that the coordinator encodes them once per change, not once per recipient.
inline constexpr uint16_t kProtocolVersion = 8;
inline constexpr size_t kMaxFrameBytes = 16u << 20;

// ---------------------------------------------------------------------------------------------
// The protocol's vocabulary. Every decision a peer makes reads one of these, never a string.
// Each has a name (ToString) for logs, status JSON and the journal, and FromString for the
// journal's replay.

// Why a generation formed.
enum class GenerationReason : uint8_t {
  kStart = 0,    // the job's first generation (rank 0's initial state is broadcast)
  kResize = 1,   // a planned change: resize, layout change
  kFailure = 2,  // recovery after a lost worker
  kResume = 3,   // the first generation of a job restarted from a disk checkpoint
  kDrain = 4,    // a planned change that moves the job off a host (elastra drain, agent SIGTERM)
  kRegrow = 5,   // back towards the target size after a failure, on hosts with free slots
};

// Where a resize request stands, in the replies to it.
enum class ResizePhase : uint8_t {
  kAccepted = 0,  // admitted; the change runs
  kDone = 1,      // the job runs at the new size
  kFailed = 2,    // it did not happen (message says why)
};

// What a client's CURVE key grants (decided by the server from the key, never sent).
enum class Role : uint8_t {
  kWorker = 0,  // join, heartbeat, key-value store, status
  kAdmin = 1,   // everything a worker may do, plus resize, agent registration, exit reports
};

// A worker as the coordinator sees it.
enum class WorkerState : uint8_t {
  kStandby = 0,   // joined, holds no rank
  kMember = 1,    // has a rank in the current (or building) generation
  kLeaving = 2,   // told to leave in a shrink; exits 0
  kLost = 3,      // died or missed its heartbeat deadline
  kFinished = 4,  // finished training
};

// The job as a whole.
enum class JobState : uint8_t {
  kForming = 0,     // waiting for the first generation
  kRunning = 1,     // training; no change in flight
  kPausing = 2,     // a planned change waits for the members to pause at one step
  kBuilding = 3,    // the members build the next generation
  kRecovering = 4,  // survivors of a failure report what they hold
  kFinished = 5,    // every member finished training
  kFailed = 6,      // the job cannot go on
};

// A host (one agent) as the coordinator sees it.
enum class HostState : uint8_t {
  kUp = 0,        // its agent is heard from; new workers may start there
  kDraining = 1,  // the job is being moved off it; nothing new starts there
  kDrained = 2,   // the job left it; its agent was told to exit
  kLost = 3,      // its agent and workers vanished together (one recovery round)
};

// Why a worker leaves the job outside a resize.
enum class LeaveReason : uint8_t {
  kFinished = 0,  // it finished training (keeps its rank for status)
  kQuit = 1,      // it stops for another reason (LeaveRequest::detail); the others recover
};

const char* ToString(GenerationReason v);
const char* ToString(ResizePhase v);
const char* ToString(Role v);
const char* ToString(WorkerState v);
const char* ToString(JobState v);
const char* ToString(LeaveReason v);
const char* ToString(HostState v);
// False when `name` is none of the enum's names (`out` unchanged).
bool FromString(std::string_view name, GenerationReason* out);
bool FromString(std::string_view name, WorkerState* out);

// The last enumerator of each wire enum: a decoded byte above it is a malformed payload.
template <class E>
inline constexpr E kLastEnumerator = E{};
template <> inline constexpr GenerationReason kLastEnumerator<GenerationReason> =
    GenerationReason::kRegrow;
template <> inline constexpr ResizePhase kLastEnumerator<ResizePhase> = ResizePhase::kFailed;
template <> inline constexpr WorkerState kLastEnumerator<WorkerState> = WorkerState::kFinished;
template <> inline constexpr JobState kLastEnumerator<JobState> = JobState::kFailed;
template <> inline constexpr LeaveReason kLastEnumerator<LeaveReason> = LeaveReason::kQuit;
template <> inline constexpr HostState kLastEnumerator<HostState> = HostState::kLost;

// An enum travels as one byte and is checked when decoded: a value the enum does not have makes
// the payload malformed (kCorrupt from DecodePayload), never an enum out of range.
template <class A, class E>
  requires std::is_enum_v<E>
void SerializeEnum(A& ar, E& e) {
  static_assert(kLastEnumerator<E> != E{}, "add a kLastEnumerator for this enum");
  uint8_t v = static_cast<uint8_t>(e);
  ar(v);
  if constexpr (std::is_base_of_v<cereal::detail::InputArchiveBase, A>) {
    if (v > static_cast<uint8_t>(kLastEnumerator<E>)) {
      throw cereal::Exception("enum value " + std::to_string(v) + " out of range");
    }
    e = static_cast<E>(v);
  }
}

enum class MessageType : uint16_t {
  kError = 1,  // ErrorReply: answer to a request that failed

  // Worker -> coordinator.
  kJoin = 10,             // JoinRequest -> JoinReply
  kLeave = 11,            // LeaveRequest -> Ack (graceful leave outside a resize)
  kHeartbeat = 12,        // Heartbeat (no reply)
  kPaused = 13,           // PausedReport (no reply): stopped after step, or aborted for recovery
  kGenerationReady = 14,  // GenerationReady (no reply): communicators built, state moved
  kFailureReport = 15,    // FailureReport (no reply): a collective failed in this generation
  kCheckpointWritten = 16,  // CheckpointWritten (no reply): a rank's shard file is durable

  // Coordinator -> worker pushes.
  kJoinReply = 20,
  kPauseRequest = 21,     // PauseRequest: stop at an agreed step and report kPaused
  kRecoverRequest = 22,   // RecoverRequest: abort communicators now and report kPaused
  kNewGeneration = 23,    // NewGeneration: the layout to build (or leave)

  // Rendezvous key-value store (any authenticated peer).
  kKvSet = 30,   // KvSetRequest -> KvReply
  kKvGet = 31,   // KvGetRequest -> KvReply (blocks until the key exists or timeout)
  kKvWait = 32,  // KvWaitRequest -> KvReply (blocks until all keys exist or timeout)
  kKvAdd = 33,   // KvAddRequest -> KvReply (number = new value)
  kKvReply = 34,
  kKvSetAndGet = 35,  // KvSetAndGetRequest -> KvValuesReply (sets, then blocks until every get
                      // key exists or timeout): a communicator's whole rendezvous in one request
  kKvValues = 36,

  // Admin (admin key only for kResize).
  kResize = 40,         // ResizeRequest -> ResizeReply (phase accepted, then done, if wait)
  kResizeReply = 41,
  kStatusRequest = 42,  // StatusRequest -> StatusReply
  kStatusReply = 43,

  // Agent (elastra run) <-> coordinator.
  kAgentRegister = 50,  // AgentRegister -> Ack
  kSpawnRequest = 51,   // SpawnRequest: coordinator asks the agent to start workers
  kProcessExited = 52,  // ProcessExited: agent saw a worker exit (faster than heartbeats)
  kShutdown = 53,       // Shutdown: coordinator -> agent or worker: stop (the job is over,
                        // the host drained, the worker declared lost)
  kDrain = 54,          // DrainRequest -> ResizeReply (accepted, then done or failed if wait)
  kHeartbeatAck = 55,   // HeartbeatAck: coordinator -> a worker or agent that sent a Heartbeat

  kAck = 60,  // Ack: empty success reply
};

// True for the types above; anything else is refused as unknown.
bool IsKnownType(uint16_t type);
const char* TypeName(MessageType type);

struct Envelope {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  MessageType type = MessageType::kError;
  std::string job;
  uint64_t generation = 0;
  std::string sender;
  uint64_t request_id = 0;
  std::string payload;
};

struct ErrorReply {
  int32_t code = 0;  // elastra::StatusCode
  std::string message;
  template <class A> void serialize(A& ar) { ar(code, message); }
};

struct Ack {
  template <class A> void serialize(A&) {}
};

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
  template <class A> void serialize(A& ar) {
    ar(worker_id, host, device, pid, state, model_json, rendezvous);
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
  template <class A> void serialize(A& ar) {
    ar(target_generation, step, commit_steps, failed, commits_layout, commits_rank);
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
// once from the full tables (common/state_move_plan.h); each worker gets the transfers it sends
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
  // On the wire the fields every recipient of one change shares come first, then the recipient's
  // own: the coordinator encodes the shared ones once per change and each recipient's behind a
  // copy of them (MakeFrameShared, common/codec.h; protocol 8).
  template <class A> void SerializeShared(A& ar) {
    ar(generation, layout, restore_step, source_rank, kv_prefix);
    SerializeEnum(ar, reason);
    ar(prev_layout, checkpoint_dir, scalars_source, nccl.from_generation, nccl.from_world,
       nccl.renumber, nccl.excluded);
  }
  template <class A> void SerializeOwn(A& ar) {
    ar(members, leave, prev_members, move, nccl.possible, nccl.exclude, build_peers);
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

struct ResizeRequest {
  int32_t workers = 0;
  bool has_layout = false;  // an exact layout was asked for
  Layout layout;
  bool wait = false;        // send a second reply when the job runs at the new size
  template <class A> void serialize(A& ar) { ar(workers, has_layout, layout, wait); }
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
  template <class A> void serialize(A&) {}
};

// The job as the coordinator sees it: what `elastra status` shows (common/status_json.h turns it
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
  template <class A> void serialize(A& ar) {
    ar(generation);
    SerializeEnum(ar, reason);
    ar(workers, layout, downtime_ms, agreement_ms, rebuild_ms, transfer_ms);
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
  template <class A> void serialize(A& ar) {
    ar(job);
    SerializeEnum(ar, state);
    ar(generation, layout, step, workers, history, agents, hosts, target_workers, malformed_frames,
       stale_messages, resize_pending, resize_workers, resize_waiting_for_workers, training,
       checkpoint_step, checkpoint_dir, checkpoint_error_step, checkpoint_error);
  }
  bool over() const { return state == JobState::kFinished || state == JobState::kFailed; }
};

struct StatusReply {
  JobStatus status;
  template <class A> void serialize(A& ar) { ar(status); }
};

// Agent -> coordinator, at start and again every few seconds (and after a coordinator restart).
// One agent per host; its sender id names it.
struct AgentRegister {
  std::string host;         // the host's name (elastra agent --name; default gethostname())
  int32_t max_workers = 0;  // slots: how many workers this agent may run at once
  std::string address;      // where its workers bind their collectives (reachable by the others)
  int32_t gpus = 0;         // CUDA devices it hands its workers (0: CPU workers)
  template <class A> void serialize(A& ar) { ar(host, max_workers, address, gpus); }
};

// Admin (any host) or the agent of `host` (its own host only) -> coordinator: move the job off
// `host` in one planned generation (replacements start on other hosts with free slots up to the
// target size); its agent is then told to exit 0. Replied to as a resize.
struct DrainRequest {
  std::string host;
  bool wait = false;  // a second reply when the job has left the host
  template <class A> void serialize(A& ar) { ar(host, wait); }
};

// Coordinator -> the sender of a Heartbeat: the coordinator hears it. A worker that hears nothing
// for longer than its lease fences itself (docs/hosts.md, "Partitions and fencing").
struct HeartbeatAck {
  uint64_t generation = 0;  // the coordinator's committed generation
  template <class A> void serialize(A& ar) { ar(generation); }
};

struct SpawnRequest {
  std::vector<std::string> worker_ids;  // start one worker with each of these ids
  template <class A> void serialize(A& ar) { ar(worker_ids); }
};

struct ProcessExited {
  std::string worker_id;
  int32_t exit_code = 0;  // valid when signal == 0
  int32_t signal = 0;
  template <class A> void serialize(A& ar) { ar(worker_id, exit_code, signal); }
};

struct Shutdown {
  int32_t exit_code = 0;
  std::string reason;
  template <class A> void serialize(A& ar) { ar(exit_code, reason); }
};

}  // namespace elastra::proto
