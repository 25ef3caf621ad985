#include "common/logging.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <mutex>

namespace elastra::logging {
namespace {

std::mutex& Mu() {
  static std::mutex mu;
  return mu;
}
Sink& CurrentSink() {
  static Sink sink;
  return sink;
}
std::string& Tag() {
  static std::string tag;
  return tag;
}

Severity InitialSeverity() {
  const char* env = std::getenv("ELASTRA_LOG_LEVEL");
  if (env == nullptr) return Severity::kInfo;
  if (std::strcmp(env, "debug") == 0) return Severity::kDebug;
  if (std::strcmp(env, "warning") == 0) return Severity::kWarning;
  if (std::strcmp(env, "error") == 0) return Severity::kError;
  return Severity::kInfo;
}
Severity g_min_severity = InitialSeverity();

const char* Letter(Severity s) {
  switch (s) {
    case Severity::kDebug: return "D";
    case Severity::kInfo: return "I";
    case Severity::kWarning: return "W";
    case Severity::kError: return "E";
    case Severity::kFatal: return "F";
  }
  return "?";
}

}  // namespace

void SetSink(Sink sink) {
  std::lock_guard<std::mutex> lock(Mu());
  CurrentSink() = std::move(sink);
}
void ResetSink() { SetSink(nullptr); }
void SetMinSeverity(Severity severity) { g_min_severity = severity; }
Severity MinSeverity() { return g_min_severity; }
void SetTag(const std::string& tag) {
  std::lock_guard<std::mutex> lock(Mu());
  Tag() = tag;
}

LogMessage::LogMessage(const char* file, int line, Severity severity) : severity_(severity) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::string tag;
  {
    std::lock_guard<std::mutex> lock(Mu());
    tag = Tag();
  }
  stream_ << Letter(severity) << ' ' << buf << '.' << (ms.count() < 100 ? "0" : "")
          << (ms.count() < 10 ? "0" : "") << ms.count() << ' ' << getpid() << ' ';
  if (!tag.empty()) stream_ << '[' << tag << "] ";
  stream_ << base << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  std::string line = stream_.str();
  {
    std::lock_guard<std::mutex> lock(Mu());
    if (CurrentSink()) {
      CurrentSink()(severity_, line);
    } else {
      line.push_back('\n');
      std::fwrite(line.data(), 1, line.size(), stderr);
      std::fflush(stderr);
    }
  }
  if (severity_ == Severity::kFatal) std::abort();
}

bool ShouldLogEvery(std::chrono::steady_clock::time_point* last,
                    std::chrono::milliseconds period) {
  auto now = std::chrono::steady_clock::now();
  if (*last != std::chrono::steady_clock::time_point{} && now - *last < period) return false;
  *last = now;
  return true;
}

}  // namespace elastra::logging
