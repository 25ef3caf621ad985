// Streaming logs tagged with the process's role, generation and rank, plus CHECK macros.
// Thread-safe: each message is formatted locally and handed to the sink under a lock.
#pragma once

#include <chrono>
#include <functional>
#include <sstream>
#include <string>

namespace elastra::logging {

enum class Severity { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3, kFatal = 4 };

// Where finished lines go. The default writes to stderr. Tests inject their own.
using Sink = std::function<void(Severity, const std::string& line)>;
void SetSink(Sink sink);
void ResetSink();

// The least severity that is printed (default kInfo; ELASTRA_LOG_LEVEL=debug|info|warning|error).
void SetMinSeverity(Severity severity);
Severity MinSeverity();

// A tag printed on every line of this process, e.g. "worker w3 g2 r1".
void SetTag(const std::string& tag);

class LogMessage {
 public:
  LogMessage(const char* file, int line, Severity severity);
  ~LogMessage();  // emits; aborts for kFatal
  std::ostream& stream() { return stream_; }

 private:
  Severity severity_;
  std::ostringstream stream_;
};

// Used by ELASTRA_LOG_EVERY_MS: true at most once per `period` for a call site.
bool ShouldLogEvery(std::chrono::steady_clock::time_point* last, std::chrono::milliseconds period);

struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace elastra::logging

#define ELASTRA_SEVERITY_DEBUG ::elastra::logging::Severity::kDebug
#define ELASTRA_SEVERITY_INFO ::elastra::logging::Severity::kInfo
#define ELASTRA_SEVERITY_WARNING ::elastra::logging::Severity::kWarning
#define ELASTRA_SEVERITY_ERROR ::elastra::logging::Severity::kError
#define ELASTRA_SEVERITY_FATAL ::elastra::logging::Severity::kFatal

#define LOG(severity)                                                             \
  !(ELASTRA_SEVERITY_##severity >= ::elastra::logging::MinSeverity())             \
      ? (void)0                                                                   \
      : ::elastra::logging::Voidify() &                                           \
            ::elastra::logging::LogMessage(__FILE__, __LINE__, ELASTRA_SEVERITY_##severity) \
                .stream()

// Logs at most once every `ms` milliseconds from this call site (heartbeats, polling loops).
#define LOG_EVERY_MS(severity, ms)                                                       \
  static std::chrono::steady_clock::time_point ELASTRA_CONCAT_LOG(_last_, __LINE__){};   \
  if (::elastra::logging::ShouldLogEvery(&ELASTRA_CONCAT_LOG(_last_, __LINE__),          \
                                         std::chrono::milliseconds(ms)))                 \
  LOG(severity)
#define ELASTRA_CONCAT_LOG_INNER(a, b) a##b
#define ELASTRA_CONCAT_LOG(a, b) ELASTRA_CONCAT_LOG_INNER(a, b)

// A broken invariant: aborts with file:line. Never for bad input from outside.
#define CHECK(cond)                                                                         \
  (cond) ? (void)0                                                                          \
         : ::elastra::logging::Voidify() &                                                  \
               ::elastra::logging::LogMessage(__FILE__, __LINE__, ELASTRA_SEVERITY_FATAL)   \
                       .stream()                                                            \
                   << "Check failed: " #cond " "
#define CHECK_OP(a, b, op) CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define CHECK_EQ(a, b) CHECK_OP(a, b, ==)
#define CHECK_NE(a, b) CHECK_OP(a, b, !=)
#define CHECK_LT(a, b) CHECK_OP(a, b, <)
#define CHECK_LE(a, b) CHECK_OP(a, b, <=)
#define CHECK_GT(a, b) CHECK_OP(a, b, >)
#define CHECK_GE(a, b) CHECK_OP(a, b, >=)
#define CHECK_OK(expr)                                     \
  do {                                                     \
    ::elastra::Status _s = (expr);                         \
    CHECK(_s.ok()) << _s.ToString();                       \
  } while (0)
