// Outbox: the frames one call into a CoordinatorCore answers with, and the counters of what the
// coordinator dropped (malformed frames, stale messages). Every manager writes its replies and
// pushes here; the core hands them to the server when Handle() or Tick() returns. Replies carry
// the committed generation. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/codec.h"
#include "protocol/messages.h"
#include "coordinator/membership.h"
#include "elastra/status.h"

namespace elastra::coordinator {

// One frame to send to one ROUTER identity.
struct Outgoing {
  std::string identity;
  std::string frame;
};

class Outbox {
 public:
  // `membership` (where a worker's latest ROUTER identity is kept) is not owned and must outlive
  // the outbox; `generation` returns the committed generation that replies carry.
  Outbox(std::string job, const Membership* membership, std::function<uint64_t()> generation)
      : job_(std::move(job)), membership_(membership), generation_(std::move(generation)) {}
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // A frame to ROUTER identity `identity`, carrying the committed generation.
  template <class T>
  void Send(const std::string& identity, proto::MessageType type, const T& payload,
            uint64_t request_id) {
    out_.push_back(
        {identity, proto::MakeFrame(type, payload, job_, generation_(), kSender, request_id)});
  }
  // A push (request id 0) to worker `worker_id` at its latest identity, carrying `generation`.
  // Dropped when the worker is unknown or has not been heard from since a restart.
  template <class T>
  void Push(const std::string& worker_id, proto::MessageType type, const T& payload,
            uint64_t generation) {
    PushTo(membership_->Find(worker_id), type, payload, generation);
  }
  // Push to a worker already looked up (nullptr: unknown, dropped).
  template <class T>
  void PushTo(const WorkerInfo* w, proto::MessageType type, const T& payload,
              uint64_t generation) {
    if (w == nullptr || w->identity.empty()) return;
    out_.push_back({w->identity, proto::MakeFrame(type, payload, job_, generation, kSender, 0)});
  }
  // Push of a payload whose shared fields are encoded already (proto::MakeFrameShared).
  template <class T>
  void PushSharedTo(const WorkerInfo* w, proto::MessageType type, std::string_view shared,
                    const T& payload, uint64_t generation) {
    if (w == nullptr || w->identity.empty()) return;
    out_.push_back({w->identity, proto::MakeFrameShared(type, shared, payload, job_, generation,
                                                        kSender, 0, &own_scratch_)});
  }
  // The same push to each of `worker_ids` (as Push), encoded once.
  template <class T>
  void PushAll(const std::vector<std::string>& worker_ids, proto::MessageType type,
               const T& payload, uint64_t generation) {
    PushAll(membership_->FindAll(worker_ids), type, payload, generation);
  }
  // The same with each worker already looked up (nullptr: unknown, skipped).
  template <class T>
  void PushAll(const std::vector<const WorkerInfo*>& workers, proto::MessageType type,
               const T& payload, uint64_t generation) {
    const std::string frame = proto::MakeFrame(type, payload, job_, generation, kSender, 0);
    for (const WorkerInfo* w : workers) {
      if (w == nullptr || w->identity.empty()) continue;
      out_.push_back({w->identity, frame});
    }
  }
  // A HeartbeatAck{committed generation} to `identity`. Every heartbeat gets one, so the frame is
  // encoded once per generation and reused.
  void SendHeartbeatAck(const std::string& identity);
  // An ErrorReply{code, message} answering request `request_id`.
  void SendError(const std::string& identity, uint64_t request_id, const Status& status);

  // The payload of request `e`; nullopt after counting a malformed frame and answering
  // `identity` with the decode error under e's request id.
  template <class T>
  std::optional<T> DecodeOrReply(const std::string& identity, const proto::Envelope& e) {
    auto v = proto::DecodePayload<T>(e.payload);
    if (v.ok()) return std::move(v).value();
    ++malformed_frames_;
    SendError(identity, e.request_id, v.status());
    return std::nullopt;
  }
  // The payload of a fire-and-forget message `e`; nullopt after counting a malformed frame and
  // answering its sender, when known, with request id 0.
  template <class T>
  std::optional<T> DecodeOrDrop(const proto::Envelope& e) {
    auto v = proto::DecodePayload<T>(e.payload);
    if (v.ok()) return std::move(v).value();
    ++malformed_frames_;
    if (const WorkerInfo* w = membership_->Find(e.sender)) SendError(w->identity, 0, v.status());
    return std::nullopt;
  }

  void CountMalformed() { ++malformed_frames_; }
  void CountStale() { ++stale_messages_; }
  uint64_t malformed_frames() const { return malformed_frames_; }
  uint64_t stale_messages() const { return stale_messages_; }

  // Room for `n` more frames before the next Take() (a change pushes one to every member).
  void Reserve(size_t n) { out_.reserve(out_.size() + n); }

  // The frames written since the last Take().
  std::vector<Outgoing> Take() { return std::exchange(out_, {}); }

 private:
  static constexpr char kSender[] = "coordinator";

  std::string job_;
  const Membership* membership_;
  std::function<uint64_t()> generation_;
  std::vector<Outgoing> out_;
  std::string own_scratch_;  // PushSharedTo's encoding of a payload's own fields
  std::string ack_frame_;    // HeartbeatAck of ack_generation_
  uint64_t ack_generation_ = 0;
  uint64_t malformed_frames_ = 0;
  uint64_t stale_messages_ = 0;
};

}  // namespace elastra::coordinator
