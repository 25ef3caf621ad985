#include "coordinator/outbox.h"

namespace elastra::coordinator {

void Outbox::SendError(const std::string& identity, uint64_t request_id, const Status& status) {
  proto::ErrorReply err;
  err.code = static_cast<int32_t>(status.code());
  err.message = status.message();
  Send(identity, proto::MessageType::kError, err, request_id);
}

void Outbox::SendHeartbeatAck(const std::string& identity) {
  const uint64_t generation = generation_();
  if (ack_frame_.empty() || ack_generation_ != generation) {
    ack_frame_ = proto::MakeFrame(proto::MessageType::kHeartbeatAck,
                                  proto::HeartbeatAck{generation}, job_, generation, kSender, 0);
    ack_generation_ = generation;
  }
  out_.push_back({identity, ack_frame_});
}

}  // namespace elastra::coordinator
