// Clocks that can be injected: the coordinator's health checks and timers take a Clock so that
// tests step time instead of sleeping. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace elastra {

using Duration = std::chrono::milliseconds;
using TimePoint = std::chrono::steady_clock::time_point;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The real monotonic clock.
class SystemClock : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  static SystemClock* Get() {
    static SystemClock clock;
    return &clock;
  }
};

// A clock that moves only when told to.
class FakeClock : public Clock {
 public:
  TimePoint Now() const override { return TimePoint(Duration(now_ms_.load())); }
  void Advance(Duration d) { now_ms_ += d.count(); }

 private:
  std::atomic<int64_t> now_ms_{1000000};
};

// Milliseconds elapsed since `start` on the steady clock, as a double.
inline double MillisSince(TimePoint start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace elastra
