#include "tests/fuzz/payloads.h"

#include <optional>
#include <string>
#include <typeinfo>

#include "checkpoint/format.h"
#include "protocol/codec.h"
#include "common/logging.h"
#include "protocol/status_json.h"

namespace elastra::fuzz {
namespace {

using proto::MessageType;

// Decodes `bytes` as a T; when that succeeds, the encoding must give the same bytes back.
template <class T>
std::optional<T> RoundTrip(std::string_view bytes) {
  auto decoded = proto::DecodePayload<T>(bytes);
  if (!decoded.ok()) return std::nullopt;
  const std::string again = proto::EncodePayload(*decoded);
  CHECK(again == bytes) << "a " << typeid(T).name() << " payload of " << bytes.size()
                        << " bytes encodes back to " << again.size() << " different bytes";
  return std::move(decoded).value();
}

template <class T>
bool Decodes(std::string_view bytes) {
  return RoundTrip<T>(bytes).has_value();
}

}  // namespace

// No default case: a new message type fails the build here (-Wswitch) until it is decoded.
bool DecodePayloadOf(MessageType type, std::string_view payload) {
  switch (type) {
    case MessageType::kError:
      return Decodes<proto::ErrorReply>(payload);
    case MessageType::kJoin:
      return Decodes<proto::JoinRequest>(payload);
    case MessageType::kLeave:
      return Decodes<proto::LeaveRequest>(payload);
    case MessageType::kHeartbeat:
      return Decodes<proto::Heartbeat>(payload);
    case MessageType::kPaused:
      return Decodes<proto::PausedReport>(payload);
    case MessageType::kGenerationReady:
      return Decodes<proto::GenerationReady>(payload);
    case MessageType::kFailureReport:
      return Decodes<proto::FailureReport>(payload);
    case MessageType::kCheckpointWritten:
      // The descriptor inside is a checkpoint frame the coordinator decodes in turn.
      if (auto w = RoundTrip<proto::CheckpointWritten>(payload)) {
        (void)checkpoint::DecodeShardDescriptor(checkpoint::AsBytes(w->descriptor));
        return true;
      }
      return false;
    case MessageType::kJoinReply:
      return Decodes<proto::JoinReply>(payload);
    case MessageType::kPauseRequest:
      return Decodes<proto::PauseRequest>(payload);
    case MessageType::kRecoverRequest:
      return Decodes<proto::RecoverRequest>(payload);
    case MessageType::kNewGeneration:
      return Decodes<proto::NewGeneration>(payload);
    case MessageType::kKvSet:
      return Decodes<proto::KvSetRequest>(payload);
    case MessageType::kKvGet:
      return Decodes<proto::KvGetRequest>(payload);
    case MessageType::kKvWait:
      return Decodes<proto::KvWaitRequest>(payload);
    case MessageType::kKvAdd:
      return Decodes<proto::KvAddRequest>(payload);
    case MessageType::kKvReply:
      return Decodes<proto::KvReply>(payload);
    case MessageType::kKvSetAndGet:
      return Decodes<proto::KvSetAndGetRequest>(payload);
    case MessageType::kKvValues:
      return Decodes<proto::KvValuesReply>(payload);
    case MessageType::kResize:
      return Decodes<proto::ResizeRequest>(payload);
    case MessageType::kResizeReply:
      return Decodes<proto::ResizeReply>(payload);
    case MessageType::kStatusRequest:
      return Decodes<proto::StatusRequest>(payload);
    case MessageType::kStatusReply:
      // `elastra status --json` prints what it received.
      if (auto r = RoundTrip<proto::StatusReply>(payload)) {
        (void)proto::StatusJson(r->status);
        return true;
      }
      return false;
    case MessageType::kAgentRegister:
      return Decodes<proto::AgentRegister>(payload);
    case MessageType::kSpawnRequest:
      return Decodes<proto::SpawnRequest>(payload);
    case MessageType::kProcessExited:
      return Decodes<proto::ProcessExited>(payload);
    case MessageType::kShutdown:
      return Decodes<proto::Shutdown>(payload);
    case MessageType::kDrain:
      return Decodes<proto::DrainRequest>(payload);
    case MessageType::kHeartbeatAck:
      return Decodes<proto::HeartbeatAck>(payload);
    case MessageType::kAck:
      return Decodes<proto::Ack>(payload);
  }
  return false;
}

}  // namespace elastra::fuzz
