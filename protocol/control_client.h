// ControlClient: a connection to the coordinator over a ZeroMQ DEALER socket with CURVE.
// One background I/O thread owns the socket; it sends heartbeats when asked to, matches replies to
// requests by request id, and queues the coordinator's pushes (PauseRequest, RecoverRequest,
// NewGeneration, SpawnRequest, Shutdown) for the owner to poll. It also keeps the client's side of
// the lease (Lease below): when it last heard from the coordinator, and whether the silence has
// been long enough to fence. Thread-safe: any thread may call Request / Send / PollPush / Fenced
// concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/clock.h"
#include "protocol/codec.h"
#include "protocol/keys.h"
#include "protocol/messages.h"
#include "elastra/status.h"

namespace elastra {

// The client's side of the lease (docs/hosts.md, "Partitions and fencing"). The coordinator answers
// every heartbeat (HeartbeatAck); a client that has heard nothing from it (no ack, reply or push)
// for `duration` is fenced, and stays fenced until its owner lifts the fence (Unfence) once the
// coordinator confirmed that nothing changed. The fence is sticky because a lease that ran out
// and was renewed later still ran out: the coordinator may have moved on meanwhile.
// Armed by the first HeartbeatAck: a coordinator that does not answer heartbeats grants no lease,
// and its clients are never fenced (as before leases existed).
// Pure: the caller passes the time. Not thread-safe (ControlClient guards it).
class Lease {
 public:
  // Zero (the default) or less: no lease, never fenced.
  void set_duration(Duration duration) { duration_ = duration; }
  Duration duration() const { return duration_; }
  bool armed() const { return armed_; }

  // A message from the coordinator arrived at `now`; `ack` when it is a HeartbeatAck. When the
  // silence before it outlasted the lease, the client is fenced first, then the lease is renewed.
  void Heard(TimePoint now, bool ack);
  // Whether the client is fenced at `now`: the lease ran out at some moment since the last
  // Unfence(). Latches (a later Heard() does not lift it).
  bool Fenced(TimePoint now);
  // The owner's decision after the coordinator confirmed this client's place: not fenced until the
  // lease runs out again, counted from the last message heard.
  void Unfence() { fenced_ = false; }
  // The time of the last message heard (the time of arming before any).
  TimePoint last_heard() const { return last_heard_; }

 private:
  bool Expired(TimePoint now) const {
    return armed_ && duration_.count() > 0 && now - last_heard_ > duration_;
  }

  Duration duration_{0};
  bool armed_ = false;
  bool fenced_ = false;
  TimePoint last_heard_{};
};

// The lease a worker takes from its JoinReply (the coordinator's heartbeat interval and timeout)
// and its own heartbeat interval: heartbeat_timeout - 2 * interval, where interval is the larger
// of the two, so that the lease runs out before the coordinator's deadline for the worker with two
// heartbeats to spare. Never below the midpoint between the interval and the timeout (with a
// heartbeat interval near the timeout, acks come too seldom for the formula), and zero (no lease)
// when the interval is not below the timeout or the timeout is not positive.
Duration LeaseFor(Duration heartbeat_timeout, Duration coordinator_interval, Duration own_interval);

// Where the lease stands, for logs and tests.
struct LeaseStatus {
  bool armed = false;    // a HeartbeatAck arrived
  Duration duration{0};  // zero: no lease
  Duration silence{0};   // since the last message from the coordinator
  bool fenced = false;
  uint64_t acked_generation = 0;  // the generation named by the newest HeartbeatAck
};

struct ControlClientOptions {
  std::string address;        // coordinator endpoint, "tcp://host:port"
  std::string server_public;  // coordinator's CURVE public key (Z85)
  KeyPair client_keys;        // our key pair; must be listed at the coordinator
  std::string job;            // job name put on every envelope
  std::string sender;         // our id (worker id, "admin", "agent-<host>")
  // Sent every interval while > 0; Heartbeat.step comes from SetHeartbeatStep().
  std::chrono::milliseconds heartbeat_interval{0};
  // How long Connect() waits for the CURVE handshake before giving up.
  std::chrono::milliseconds connect_timeout{5000};
  // The clock of the lease (tests step a FakeClock); not owned, outlives the client.
  const Clock* clock = SystemClock::Get();
};

class ControlClient {
 public:
  // Connects and completes the CURVE handshake. kUnauthenticated with a clear message when the
  // coordinator refused our key ("the coordinator refused this client's key ..."), kUnavailable
  // when nothing answered in connect_timeout, kInvalidArgument for malformed options/keys.
  static StatusOr<std::unique_ptr<ControlClient>> Connect(const ControlClientOptions& options);

  ~ControlClient();
  ControlClient(const ControlClient&) = delete;
  ControlClient& operator=(const ControlClient&) = delete;

  // Sends a request and waits for the reply with the same request id. An ErrorReply comes back as
  // its Status; no reply within `timeout` is kTimedOut. `generation` is put on the envelope.
  StatusOr<proto::Envelope> Request(proto::MessageType type, const std::string& payload,
                                    std::chrono::milliseconds timeout, uint64_t generation = 0);

  // Typed convenience: encodes `request`, decodes the reply payload as Reply.
  template <class Reply, class Req>
  StatusOr<Reply> Call(proto::MessageType type, const Req& request,
                       std::chrono::milliseconds timeout, uint64_t generation = 0) {
    auto reply = Request(type, proto::EncodePayload(request), timeout, generation);
    if (!reply.ok()) return reply.status();
    return proto::DecodePayload<Reply>(reply->payload);
  }

  // Waits for a second reply to an earlier request id (ResizeReply "done" after "accepted").
  StatusOr<proto::Envelope> AwaitReply(uint64_t request_id, std::chrono::milliseconds timeout);
  // The request id used by the most recent Request() from this thread.
  uint64_t last_request_id() const;

  // Fire-and-forget message (Heartbeat, Paused, GenerationReady, FailureReport, ProcessExited).
  Status Send(proto::MessageType type, const std::string& payload, uint64_t generation = 0);

  // Next push from the coordinator, waiting up to `timeout` (0: just look).
  std::optional<proto::Envelope> PollPush(std::chrono::milliseconds timeout);

  // Called on the I/O thread for every push as it arrives, before it is queued (may be empty).
  // The worker uses it to abort communicators the moment a RecoverRequest lands.
  void SetPushObserver(std::function<void(const proto::Envelope&)> observer);

  void SetHeartbeatStep(int64_t step);
  // Heartbeats are sent every `interval` from the next one on (the coordinator's JoinReply may ask
  // for a longer period than ControlClientOptions::heartbeat_interval: docs/scale.md). Ignored
  // when the client sends no heartbeats or `interval` is not positive.
  void SetHeartbeatInterval(std::chrono::milliseconds interval);
  // What the next heartbeats carry of the training loop's numbers (Heartbeat::samples, metrics).
  void SetHeartbeatTraining(int64_t samples, std::vector<proto::TrainingMetric> metrics);

  // The lease (see Lease): `duration` from now on; zero turns it off.
  void SetLease(Duration duration);
  // Whether this client is fenced now (latches; see Lease::Fenced).
  bool Fenced();
  // Lifts the fence once the coordinator confirmed that nothing changed.
  void Unfence();
  LeaseStatus lease();

  // Stops the I/O thread and closes the socket (linger 0 after pending sends are flushed briefly).
  void Close();

  class Impl;

 private:
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra
