// The chaos soak's storm: a schedule of faults derived from a seed alone, so that a failing seed
// replays the same storm. What a fault hits (which rank, which layout, how many workers) and how
// many steps the job must train before it (a gap counted in the job's progress, never in wall
// time) are drawn here; where the job then stands when it lands is the job's own business.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "elastra/layout.h"

namespace elastra::testing {

enum class StormEvent {
  kKillWorker,       // SIGKILL of a member
  kKillCoordinator,  // SIGKILL of the coordinator process
  kHangWorker,       // SIGSTOP of a member past the heartbeat deadline, then SIGCONT
  kResize,           // elastra resize to another size and layout (dp, pp and tp)
  kDiskFull,         // the checkpoint file system fills up, then frees again
  kCorruptResume,    // the job stops, its newest checkpoint is damaged, a new job resumes
};
inline constexpr int kStormEventKinds = 6;

const char* EventName(StormEvent e);

struct StormStep {
  StormEvent event = StormEvent::kResize;
  int64_t gap_steps = 0;  // steps the job trains after the previous event before this one
  uint32_t pick = 0;      // which member (taken modulo the members, by rank)
  Layout layout;          // kResize: the layout asked for; kCorruptResume: dp = workers to resume
};

// The layouts a resize picks from: up to 4 workers, every dimension split in some of them (the
// soak's model has 2 blocks, hidden 24, global batch 48).
const std::vector<Layout>& StormLayouts();

// `events` steps from `seed`: the first kStormEventKinds events are every kind once, in an order
// drawn from the seed (so that even a short soak meets every kind), then kinds drawn by weight.
std::vector<StormStep> MakeStorm(uint64_t seed, int events);

// "kill_worker=3 kill_coordinator=1 ..." for the counts of a storm's events.
std::string CountsLine(const std::map<StormEvent, int>& counts);

}  // namespace elastra::testing
