#include "elastra/status.h"

namespace elastra {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "kOk";
    case StatusCode::kTimedOut: return "kTimedOut";
    case StatusCode::kPeerLost: return "kPeerLost";
    case StatusCode::kMembershipChanged: return "kMembershipChanged";
    case StatusCode::kStaleGeneration: return "kStaleGeneration";
    case StatusCode::kProtocolMismatch: return "kProtocolMismatch";
    case StatusCode::kCorrupt: return "kCorrupt";
    case StatusCode::kInvalidArgument: return "kInvalidArgument";
    case StatusCode::kUnauthenticated: return "kUnauthenticated";
    case StatusCode::kNotFound: return "kNotFound";
    case StatusCode::kAborted: return "kAborted";
    case StatusCode::kUnavailable: return "kUnavailable";
    case StatusCode::kResourceExhausted: return "kResourceExhausted";
    case StatusCode::kFailedPrecondition: return "kFailedPrecondition";
    case StatusCode::kInternal: return "kInternal";
    case StatusCode::kBusy: return "kBusy";
  }
  return "kUnknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

}  // namespace elastra
