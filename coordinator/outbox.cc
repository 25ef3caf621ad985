#include "coordinator/outbox.h"

namespace elastra::coordinator {

void Outbox::SendError(const std::string& identity, uint64_t request_id, const Status& status) {
  proto::ErrorReply err;
  err.code = static_cast<int32_t>(status.code());
  err.message = status.message();
  Send(identity, proto::MessageType::kError, err, request_id);
}

}  // namespace elastra::coordinator
