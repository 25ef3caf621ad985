// FakeCoordinator: a coordinator that a test scripts, for the worker's side of the protocol where
// the real one cannot be made to misbehave on cue. A ZeroMQ ROUTER with CURVE on 127.0.0.1 (no ZAP
// handler: any client key is let in) that
//   - answers Join with a JoinReply carrying the heartbeat settings of its options, and, when
//     `form_on_join`, pushes a one-member generation (dp=1) to the worker that joined;
//   - answers every Heartbeat with a HeartbeatAck (unless `acks` is off), Leave with an Ack, the
//     rendezvous store's requests with an in-memory store, and StatusRequest with the status the
//     test set (by default: running, the current generation, every worker that joined a member);
//   - records every message it receives, and
//   - goes silent on cue (SetSilent): a partition. Nothing is answered or sent, and what arrives
//     is recorded as not heard.
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/codec.h"
#include "protocol/keys.h"
#include "protocol/messages.h"
#include "state/plan/state_move_plan.h"
#include "elastra/worker.h"

namespace elastra::testing {

class FakeCoordinator {
 public:
  struct Options {
    std::string job = "fake";
    std::chrono::milliseconds heartbeat_interval{20};
    std::chrono::milliseconds heartbeat_timeout{1000};
    bool acks = true;          // answer heartbeats with HeartbeatAck
    bool form_on_join = true;  // push generation 1 (dp=1) to the first worker that joins
  };

  // One message as it arrived.
  struct Received {
    proto::Envelope envelope;
    bool heard = true;  // false: it arrived while silent (lost in the partition)
  };

  explicit FakeCoordinator(Options options);
  ~FakeCoordinator();
  FakeCoordinator(const FakeCoordinator&) = delete;
  FakeCoordinator& operator=(const FakeCoordinator&) = delete;

  // WorkerOptions that join this coordinator as `worker_id` (heartbeat interval as the
  // coordinator's; the rest of the defaults).
  WorkerOptions WorkerOptionsFor(const std::string& worker_id) const;
  const std::string& address() const { return address_; }
  const std::string& public_key() const { return server_.public_key; }
  const KeyPair& client_keys() const { return client_; }

  // A partition: while silent nothing is answered or sent, and what arrives is recorded unheard.
  void SetSilent(bool silent);
  // Acks on or off from now on.
  void SetAcks(bool acks);
  // The generation named by acks and join replies and the default status.
  void SetGeneration(uint64_t generation);
  // The status StatusRequest is answered with from now on (nullopt: the default one).
  void SetStatus(std::optional<proto::JobStatus> status);
  // The default status: `state`, the current generation, every worker that joined as a member.
  proto::JobStatus DefaultStatus(proto::JobState state = proto::JobState::kRunning) const;

  // Sends a push (request id 0) to the worker, at its latest ROUTER identity.
  template <class T>
  void Push(const std::string& worker_id, proto::MessageType type, const T& payload,
            uint64_t generation = 0) {
    PushFrame(worker_id, type, proto::EncodePayload(payload), generation);
  }
  // A NewGeneration of one member (dp=1) holding the state: the first generation when
  // `generation` is 1, a recovery to `restore_step` otherwise.
  // `state`: the tensors the worker registered (its JoinRequest's), for the state move's plan.
  static proto::NewGeneration SoloGeneration(const std::string& worker_id, uint64_t generation,
                                             int64_t restore_step, const StateSpec& state);
  // The tensors the last JoinRequest registered.
  StateSpec JoinedState() const {
    std::lock_guard<std::mutex> lock(mu_);
    return joined_state_;
  }

  // Waits (up to `bound`, a bound on a broken test, not a timing assumption) until the
  // `nth` (1-based) message of `type` arrived, heard or not as `heard` says (nullopt: either).
  std::optional<proto::Envelope> WaitFor(
      proto::MessageType type, int nth = 1, std::optional<bool> heard = std::nullopt,
      std::chrono::milliseconds bound = std::chrono::seconds(60));
  // Waits (bounded as above) until `done` holds for what arrived so far.
  bool WaitUntil(const std::function<bool(const std::vector<Received>&)>& done,
                 std::chrono::milliseconds bound = std::chrono::seconds(60));
  // Every message of `type` so far.
  std::vector<Received> All(proto::MessageType type) const;

 private:
  void Loop();
  void Handle(const std::string& identity, proto::Envelope e);
  void Reply(const std::string& identity, const proto::Envelope& request, proto::MessageType type,
             const std::string& payload);
  void SendFrame(const std::string& identity, const proto::Envelope& e);
  void PushFrame(const std::string& worker_id, proto::MessageType type, const std::string& payload,
                 uint64_t generation);
  // Answers the rendezvous requests parked until their keys exist, or their time ran out.
  void ServeParkedKv(bool expire_all);

  Options options_;
  KeyPair server_;
  KeyPair client_;
  std::string address_;
  void* ctx_ = nullptr;
  void* router_ = nullptr;  // the loop thread's
  std::thread thread_;

  mutable std::mutex mu_;
  StateSpec joined_state_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool silent_ = false;
  uint64_t generation_ = 0;
  std::optional<proto::JobStatus> status_;
  std::vector<Received> received_;
  std::map<std::string, std::string> identities_;                // worker id -> ROUTER identity
  std::vector<std::string> joined_;                              // worker ids, in join order
  std::vector<std::pair<std::string, proto::Envelope>> outbox_;  // pushes for the loop to send
  std::map<std::string, std::string> kv_;
  struct ParkedKv {
    std::string identity;
    proto::Envelope request;
    std::chrono::steady_clock::time_point deadline;
  };
  std::vector<ParkedKv> parked_kv_;
};

}  // namespace elastra::testing
