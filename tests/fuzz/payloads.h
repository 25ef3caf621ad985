// The payload struct of every message type, decoded as its receiver decodes it (shared by the
// codec and coordinator fuzz targets).
#pragma once

#include <iterator>
#include <string_view>

#include "protocol/messages.h"

namespace elastra::fuzz {

// Every message type, in the order of proto::MessageType.
inline constexpr proto::MessageType kMessageTypes[] = {
    proto::MessageType::kError,          proto::MessageType::kJoin,
    proto::MessageType::kLeave,          proto::MessageType::kHeartbeat,
    proto::MessageType::kPaused,         proto::MessageType::kGenerationReady,
    proto::MessageType::kFailureReport,  proto::MessageType::kCheckpointWritten,
    proto::MessageType::kJoinReply,      proto::MessageType::kPauseRequest,
    proto::MessageType::kRecoverRequest, proto::MessageType::kNewGeneration,
    proto::MessageType::kKvSet,          proto::MessageType::kKvGet,
    proto::MessageType::kKvWait,         proto::MessageType::kKvAdd,
    proto::MessageType::kKvReply,        proto::MessageType::kKvSetAndGet,
    proto::MessageType::kKvValues,       proto::MessageType::kResize,
    proto::MessageType::kResizeReply,    proto::MessageType::kStatusRequest,
    proto::MessageType::kStatusReply,    proto::MessageType::kAgentRegister,
    proto::MessageType::kSpawnRequest,   proto::MessageType::kProcessExited,
    proto::MessageType::kShutdown,       proto::MessageType::kDrain,
    proto::MessageType::kHeartbeatAck,   proto::MessageType::kAck,
};

// Decodes `payload` as the struct `type` names (and what a receiver decodes from it in turn: a
// checkpoint descriptor, the status JSON). False when it does not decode. Aborts (CHECK) when a
// payload that decodes encodes back to other bytes.
bool DecodePayloadOf(proto::MessageType type, std::string_view payload);

}  // namespace elastra::fuzz
