// The core's heartbeat with nothing run between two calls: a CoordinatorCore with N members (joined
// and committed through its own handlers), then heartbeats from senders drawn at random, each
// decoded and handled as the simulated server does and timed by the call clock (sim.h). Beside the
// simulation's figure it tells how much of a heartbeat's cost at large N is the caches that the
// simulation's own work between two messages (its event heap, its workers) evicts, and how much
// the core's own reads grow (docs/scale.md, "Where it stands").
#pragma once

#include <cstdint>

namespace elastra::scale {

// Microseconds per heartbeat, the median of `passes` passes of `heartbeats` each; -1 when the
// first generation did not form.
double MeasureLoneHeartbeats(int workers, int heartbeats, int passes, uint64_t seed);

}  // namespace elastra::scale
