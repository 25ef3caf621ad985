// The wire protocol's vocabulary and envelope (see messages.h, which includes this with every
// message): the protocol version, the enums every decision reads, the message types and the
// Envelope that frames each message. Plain data; thread-compatible.
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
// 9: memory budgets (Join.device_memory_bytes), standbys (NewGeneration.standby), the job state
//    waiting_for_workers, GenerationRecord.bytes_moved.
// 10: a paused worker reports its groups' health (PausedReport.groups); NewGeneration says which
//    groups a member keeps (keep_groups); GenerationRecord counts groups rebuilt and kept.
//    Hot spares: ResizeRequest.spares (-1: unchanged) and JobStatus.spares_target.
inline constexpr uint16_t kProtocolVersion = 10;
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
  // A recovery whose live workers fit no layout in their memory: the survivors hold their commits
  // and the job goes on when enough workers join (docs/recovery.md; protocol 9).
  kWaitingForWorkers = 7,
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
template <> inline constexpr JobState kLastEnumerator<JobState> = JobState::kWaitingForWorkers;
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


}  // namespace elastra::proto
