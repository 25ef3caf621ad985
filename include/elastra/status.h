// Status and StatusOr: how every Elastra call reports failure. Thread-compatible value types.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace elastra {

// The failure codes of our field. Keep the numbers stable: they travel on the wire.
enum class StatusCode : int {
  kOk = 0,
  kTimedOut = 1,            // a deadline passed (collective, rendezvous, request)
  kPeerLost = 2,            // a peer process or connection is gone
  kMembershipChanged = 3,   // the job's membership changed; re-read the layout
  kStaleGeneration = 4,     // a message or communicator belongs to an older generation
  kProtocolMismatch = 5,    // wrong magic or protocol version
  kCorrupt = 6,             // malformed bytes: a frame, a file, a checksum
  kInvalidArgument = 7,     // a caller's mistake: bad size, bad rank, bad flag
  kUnauthenticated = 8,     // wrong or missing key, or not allowed for this key
  kNotFound = 9,
  kAborted = 10,            // the operation was aborted on purpose (communicator abort)
  kUnavailable = 11,        // the service cannot be reached now
  kResourceExhausted = 12,  // out of memory, disk or a limit
  kFailedPrecondition = 13, // the system is not in a state that allows the call
  kInternal = 14,
  kBusy = 15,  // another change is in flight: the same call may succeed once it is done
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "kPeerLost: rank 2 closed the connection"
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context`.
  Status WithContext(const std::string& context) const;

  // Explicitly drops a status where ignoring it is the right thing (teardown paths).
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status TimedOutError(std::string m) { return {StatusCode::kTimedOut, std::move(m)}; }
inline Status PeerLostError(std::string m) { return {StatusCode::kPeerLost, std::move(m)}; }
inline Status MembershipChangedError(std::string m) {
  return {StatusCode::kMembershipChanged, std::move(m)};
}
inline Status StaleGenerationError(std::string m) {
  return {StatusCode::kStaleGeneration, std::move(m)};
}
inline Status ProtocolMismatchError(std::string m) {
  return {StatusCode::kProtocolMismatch, std::move(m)};
}
inline Status CorruptError(std::string m) { return {StatusCode::kCorrupt, std::move(m)}; }
inline Status InvalidArgumentError(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status UnauthenticatedError(std::string m) {
  return {StatusCode::kUnauthenticated, std::move(m)};
}
inline Status NotFoundError(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AbortedError(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status UnavailableError(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status ResourceExhaustedError(std::string m) {
  return {StatusCode::kResourceExhausted, std::move(m)};
}
inline Status FailedPreconditionError(std::string m) {
  return {StatusCode::kFailedPrecondition, std::move(m)};
}
inline Status InternalError(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status BusyError(std::string m) { return {StatusCode::kBusy, std::move(m)}; }

std::ostream& operator<<(std::ostream& os, const Status& status);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = InternalError("StatusOr built from an OK status without a value");
  }
  StatusOr(Status&& status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = InternalError("StatusOr built from an OK status without a value");
  }
  StatusOr(const T& value) : value_(value) {}  // NOLINT
  StatusOr(T&& value) : value_(std::move(value)) {}  // NOLINT

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  // Only valid when ok().
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace elastra

// Returns early from the enclosing function when `expr` is not OK.
#define ELASTRA_RETURN_IF_ERROR(expr)                 \
  do {                                                \
    ::elastra::Status _elastra_status = (expr);       \
    if (!_elastra_status.ok()) return _elastra_status; \
  } while (0)

#define ELASTRA_CONCAT_INNER(a, b) a##b
#define ELASTRA_CONCAT(a, b) ELASTRA_CONCAT_INNER(a, b)
#define ELASTRA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
// ELASTRA_ASSIGN_OR_RETURN(auto x, MakeX()); returns the error when MakeX() fails.
#define ELASTRA_ASSIGN_OR_RETURN(lhs, expr) \
  ELASTRA_ASSIGN_OR_RETURN_IMPL(ELASTRA_CONCAT(_elastra_or_, __LINE__), lhs, expr)
