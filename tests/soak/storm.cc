#include "tests/soak/storm.h"

#include <algorithm>

namespace elastra::testing {

const char* EventName(StormEvent e) {
  switch (e) {
    case StormEvent::kKillWorker:
      return "kill_worker";
    case StormEvent::kKillCoordinator:
      return "kill_coordinator";
    case StormEvent::kHangWorker:
      return "hang_worker";
    case StormEvent::kResize:
      return "resize";
    case StormEvent::kDiskFull:
      return "disk_full";
    case StormEvent::kCorruptResume:
      return "corrupt_resume";
  }
  return "?";
}

const std::vector<Layout>& StormLayouts() {
  static const std::vector<Layout> layouts = {
      {1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {4, 1, 1}, {1, 2, 1}, {2, 2, 1},
      {1, 1, 2}, {2, 1, 2}, {1, 2, 2}, {1, 1, 3}, {1, 1, 4},
  };
  return layouts;
}

std::vector<StormStep> MakeStorm(uint64_t seed, int events) {
  // std::mt19937_64 and the arithmetic below are specified exactly, unlike the standard
  // distributions, so a seed gives the same storm with any standard library.
  std::mt19937_64 rng(seed);
  auto below = [&rng](uint64_t n) { return static_cast<uint32_t>(rng() % n); };
  std::vector<StormEvent> first;
  for (int k = 0; k < kStormEventKinds; ++k) first.push_back(static_cast<StormEvent>(k));
  for (size_t i = first.size(); i > 1; --i) std::swap(first[i - 1], first[below(i)]);
  // Later events by weight: the cheap ones more often than a disk filling or a new job.
  const std::vector<std::pair<StormEvent, int>> weights = {
      {StormEvent::kKillWorker, 5},      {StormEvent::kKillCoordinator, 3},
      {StormEvent::kHangWorker, 3},      {StormEvent::kResize, 6},
      {StormEvent::kDiskFull, 1},        {StormEvent::kCorruptResume, 1}};
  int total = 0;
  for (const auto& [e, w] : weights) total += w;
  std::vector<StormStep> storm;
  for (int i = 0; i < events; ++i) {
    StormStep s;
    if (i < kStormEventKinds) {
      s.event = first[static_cast<size_t>(i)];
    } else {
      int r = static_cast<int>(below(static_cast<uint64_t>(total)));
      for (const auto& [e, w] : weights) {
        if (r < w) {
          s.event = e;
          break;
        }
        r -= w;
      }
    }
    s.gap_steps = 3 + below(10);
    s.pick = below(1u << 16);
    if (s.event == StormEvent::kResize) {
      s.layout = StormLayouts()[below(StormLayouts().size())];
    } else if (s.event == StormEvent::kCorruptResume) {
      s.layout = Layout{2 + static_cast<int>(below(3)), 1, 1};
    }
    storm.push_back(s);
  }
  return storm;
}

std::string CountsLine(const std::map<StormEvent, int>& counts) {
  std::string line;
  for (int k = 0; k < kStormEventKinds; ++k) {
    const auto e = static_cast<StormEvent>(k);
    auto it = counts.find(e);
    if (!line.empty()) line += ' ';
    line += std::string(EventName(e)) + "=" + std::to_string(it == counts.end() ? 0 : it->second);
  }
  return line;
}

}  // namespace elastra::testing
