#include "protocol/codec.h"

namespace elastra::proto {

bool IsKnownType(uint16_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kError:
    case MessageType::kJoin:
    case MessageType::kLeave:
    case MessageType::kHeartbeat:
    case MessageType::kPaused:
    case MessageType::kGenerationReady:
    case MessageType::kFailureReport:
    case MessageType::kCheckpointWritten:
    case MessageType::kJoinReply:
    case MessageType::kPauseRequest:
    case MessageType::kRecoverRequest:
    case MessageType::kNewGeneration:
    case MessageType::kKvSet:
    case MessageType::kKvGet:
    case MessageType::kKvWait:
    case MessageType::kKvAdd:
    case MessageType::kKvReply:
    case MessageType::kKvSetAndGet:
    case MessageType::kKvValues:
    case MessageType::kResize:
    case MessageType::kResizeReply:
    case MessageType::kStatusRequest:
    case MessageType::kStatusReply:
    case MessageType::kAgentRegister:
    case MessageType::kSpawnRequest:
    case MessageType::kProcessExited:
    case MessageType::kShutdown:
    case MessageType::kDrain:
    case MessageType::kHeartbeatAck:
    case MessageType::kAck:
      return true;
  }
  return false;
}

const char* TypeName(MessageType type) {
  switch (type) {
    case MessageType::kError: return "Error";
    case MessageType::kJoin: return "Join";
    case MessageType::kLeave: return "Leave";
    case MessageType::kHeartbeat: return "Heartbeat";
    case MessageType::kPaused: return "Paused";
    case MessageType::kGenerationReady: return "GenerationReady";
    case MessageType::kFailureReport: return "FailureReport";
    case MessageType::kCheckpointWritten: return "CheckpointWritten";
    case MessageType::kJoinReply: return "JoinReply";
    case MessageType::kPauseRequest: return "PauseRequest";
    case MessageType::kRecoverRequest: return "RecoverRequest";
    case MessageType::kNewGeneration: return "NewGeneration";
    case MessageType::kKvSet: return "KvSet";
    case MessageType::kKvGet: return "KvGet";
    case MessageType::kKvWait: return "KvWait";
    case MessageType::kKvAdd: return "KvAdd";
    case MessageType::kKvReply: return "KvReply";
    case MessageType::kKvSetAndGet: return "KvSetAndGet";
    case MessageType::kKvValues: return "KvValues";
    case MessageType::kResize: return "Resize";
    case MessageType::kResizeReply: return "ResizeReply";
    case MessageType::kStatusRequest: return "StatusRequest";
    case MessageType::kStatusReply: return "StatusReply";
    case MessageType::kAgentRegister: return "AgentRegister";
    case MessageType::kSpawnRequest: return "SpawnRequest";
    case MessageType::kProcessExited: return "ProcessExited";
    case MessageType::kShutdown: return "Shutdown";
    case MessageType::kDrain: return "Drain";
    case MessageType::kHeartbeatAck: return "HeartbeatAck";
    case MessageType::kAck: return "Ack";
  }
  return "Unknown";
}

std::string EncodeEnvelope(const Envelope& e) {
  std::string out;
  StringOutputArchive ar(&out);
  ar(e.magic, e.version, static_cast<uint16_t>(e.type), e.job, e.generation, e.sender,
     e.request_id, e.payload);
  return out;
}

size_t EncodeEnvelopeHead(MessageType type, const std::string& job, uint64_t generation,
                          const std::string& sender, uint64_t request_id, StringOutputArchive* ar,
                          std::string* frame) {
  (*ar)(kMagic, kProtocolVersion, static_cast<uint16_t>(type), job, generation, sender,
        request_id);
  const size_t at = frame->size();
  frame->append(sizeof(uint64_t), '\0');
  return at;
}

StatusOr<Envelope> DecodeEnvelope(std::string_view frame) {
  if (frame.size() > kMaxFrameBytes) {
    return InvalidArgumentError("frame of " + std::to_string(frame.size()) +
                                " bytes exceeds the limit of " + std::to_string(kMaxFrameBytes));
  }
  Envelope e;
  try {
    BoundedInputArchive ar(frame.data(), frame.size());
    ar(e.magic);
    if (e.magic != kMagic) {
      return ProtocolMismatchError("bad magic; not an Elastra frame");
    }
    ar(e.version);
    if (e.version != kProtocolVersion) {
      return ProtocolMismatchError("protocol version " + std::to_string(e.version) +
                                   ", this side speaks " + std::to_string(kProtocolVersion));
    }
    uint16_t type = 0;
    ar(type);
    if (!IsKnownType(type)) {
      return InvalidArgumentError("unknown message type " + std::to_string(type));
    }
    e.type = static_cast<MessageType>(type);
    ar(e.job);
    if (e.job.size() > kMaxNameBytes) return CorruptError("job name too long");
    ar(e.generation, e.sender);
    if (e.sender.size() > kMaxNameBytes) return CorruptError("sender id too long");
    ar(e.request_id, e.payload);
    if (ar.remaining() != 0) {
      return CorruptError("frame has " + std::to_string(ar.remaining()) + " trailing bytes");
    }
  } catch (const std::exception& ex) {
    return CorruptError(std::string("malformed frame: ") + ex.what());
  }
  return e;
}

}  // namespace elastra::proto
