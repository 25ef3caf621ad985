// ControlClient: a connection to the coordinator over a ZeroMQ DEALER socket with CURVE.
// One background I/O thread owns the socket; it sends heartbeats when asked to, matches replies to
// requests by request id, and queues the coordinator's pushes (PauseRequest, RecoverRequest,
// NewGeneration, SpawnRequest, Shutdown) for the owner to poll. Thread-safe: any thread may call
// Request / Send / PollPush concurrently.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/codec.h"
#include "common/keys.h"
#include "common/messages.h"
#include "elastra/status.h"

namespace elastra {

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

  // Stops the I/O thread and closes the socket (linger 0 after pending sends are flushed briefly).
  void Close();

  class Impl;

 private:
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra
