// FakeCoordinator: the coordinator's end of the agent and admin protocol, played by a test. A
// ZeroMQ ROUTER with CURVE on 127.0.0.1 (a free port) and a ZAP handler that admits the admin and
// worker keys of its ConnectionInfo and tells which one a message came with, as the real server
// does. The test sees every message (Next) and answers as it likes (Reply, Push), so the agent's
// and `elastra drain`'s side of docs/hosts.md is checked without the coordinator's side.
//
// Single-threaded: the test thread drives it; nothing happens between calls.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "protocol/codec.h"
#include "protocol/keys.h"
#include "protocol/messages.h"
#include "elastra/status.h"

namespace elastra::testing {

class FakeCoordinator {
 public:
  struct Message {
    std::string identity;                     // the ROUTER identity of the client (for Reply/Push)
    proto::Role role = proto::Role::kWorker;  // from the client's CURVE key
    proto::Envelope envelope;
  };

  // Binds tcp://127.0.0.1:0 with fresh server, admin and worker keys.
  static StatusOr<std::unique_ptr<FakeCoordinator>> Start(const std::string& job = "fake-job");
  ~FakeCoordinator();
  FakeCoordinator(const FakeCoordinator&) = delete;
  FakeCoordinator& operator=(const FakeCoordinator&) = delete;

  // What coordinator.json of this coordinator holds (address, job, keys; pid 0).
  const ConnectionInfo& info() const { return info_; }

  // The next message of `type` within `timeout`; messages of other types that arrive meanwhile
  // are kept for later calls, except heartbeats (counted) and status requests (answered with
  // set_status's status when one is set). nullopt when none came.
  std::optional<Message> Next(proto::MessageType type, std::chrono::milliseconds timeout);
  // Receives for `duration`, keeping, counting and answering as Next does.
  void Serve(std::chrono::milliseconds duration);

  // Answers `to` (same request id).
  template <class T>
  void Reply(const Message& to, proto::MessageType type, const T& payload) {
    SendFrame(to.identity, type, proto::EncodePayload(payload), to.envelope.request_id);
  }
  void ReplyError(const Message& to, const Status& status);
  // A push (request id 0) to the client with `identity`.
  template <class T>
  void Push(const std::string& identity, proto::MessageType type, const T& payload) {
    SendFrame(identity, type, proto::EncodePayload(payload), 0);
  }

  // Heartbeats received from `sender` so far.
  int heartbeats(const std::string& sender) const;
  // Status requests are answered with this from now on.
  void set_status(const proto::JobStatus& status) { status_ = status; }

 private:
  FakeCoordinator() = default;
  // Receives one message within `timeout` into the backlog; false when none came.
  bool ReceiveOne(std::chrono::milliseconds timeout);
  void HandleZap();
  void SendFrame(const std::string& identity, proto::MessageType type, const std::string& payload,
                 uint64_t request_id);

  ConnectionInfo info_;
  void* ctx_ = nullptr;
  void* router_ = nullptr;
  void* zap_ = nullptr;
  std::map<std::string, int> heartbeats_;
  std::optional<proto::JobStatus> status_;
  std::vector<Message> backlog_;
};

}  // namespace elastra::testing
