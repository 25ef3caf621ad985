// The scenario bench_scale runs at each job size: the events of docs/scale.md ("What the
// simulator runs"), each measured on its own: a join storm, the first generation, heartbeats at
// the default period, a planned grow and shrink by one host, 1% of the workers failing at once, a
// host lost with its agent, and a coordinator restart from its journal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/scale/sim.h"
#include "bench/scale/sim_job.h"

namespace elastra::scale {

struct ScaleParams {
  NetworkModel net;
  ServerModel server;
  JobModel job;
  int heartbeat_periods = 10;              // of the default 200 ms, measured in steady state
  // ... and more at small sizes, until the window holds this many workers' heartbeats: at 256
  // workers ten periods are 2,560 beats of about a microsecond each, a figure that moved by a
  // factor of 2 between runs and with it the fitted exponent.
  int heartbeat_min_beats = 40000;
  SimTime settle_us = 2 * kSec;            // training between two events, not measured
  SimTime event_timeout_us = 180 * kSec;   // simulated time an event may take
  SimTime restart_delay_us = 50 * kMs;     // coordinator death -> new process serving
  SimTime reconnect_us = 50 * kMs;         // ZeroMQ's reconnect interval (clients spread over it)
  std::string journal_root = "/tmp";       // a temporary state directory is made under it
  double wall_budget_s = 1e9;              // give up on an event past this wall-clock time
  uint64_t seed = 1;
};

struct EventResult {
  std::string name;
  bool ok = false;
  std::string detail;   // what went wrong, or what happened
  Cost cost;
  double time_s = -1;   // simulated seconds from the trigger to the outcome (see docs/scale.md)
  double window_s = 0;  // simulated seconds measured
  int workers = 0;      // members of the committed generation afterwards
  // A change's generation as the coordinator's status history records it (the 3-D scenario,
  // scenario_3d.h): its layout, the communicators it built and those it kept; and the standby
  // workers once it committed. -1: not recorded.
  Layout layout;
  int groups_rebuilt = -1, groups_kept = -1;
  int standby = -1;
  // Simulated seconds from the trigger to the start of the call that sent the change's first
  // NewGeneration (detection, the recover or pause round and the decision); -1: not measured.
  double decision_s = -1;

  // The coordinator's CPU per simulated second of the window (the heartbeats' figure); -1 when
  // nothing was measured.
  double CpuPerSecond() const { return window_s > 0 ? cost.cpu_ms / window_s : -1; }
  // The coordinator's CPU per message it received, in ms; -1 when it received none.
  double CpuPerMessageMs() const {
    return cost.msgs_in > 0 ? cost.cpu_ms / static_cast<double>(cost.msgs_in) : -1;
  }
};

struct ScaleRun {
  int n = 0;
  std::vector<EventResult> events;  // in the order run
  double wall_s = 0;
  // The share of wall_s its thread ran: under 1 when it lost the core (another process, the
  // hypervisor), which the calls timed by the monotonic clock then include (CallClock).
  double on_cpu = 1;
  double replay_cpu_ms = 0;  // the restarted core's constructor: the journal replay
  uint64_t journal_bytes = 0, journal_syncs = 0;
  int join_failures = 0, build_failures = 0;
  std::string first_build_error;  // what the store answered the first rank it refused
  int rendezvous_sample = 0;
  uint64_t sim_events = 0, messages_handled = 0;
  uint64_t warnings = 0, errors = 0, expired_heartbeats = 0;
  std::vector<std::string> first_errors;

  const EventResult* Find(const std::string& name) const;
  bool ok() const;
};

// The event names, in order.
const std::vector<std::string>& EventNames();

// Runs the scenario with `n` workers (n / host_size hosts).
ScaleRun RunScale(int n, const ScaleParams& params);

// Several runs of one size as one: each event as its median run measured it (by coordinator CPU,
// per second of window for the heartbeats), the restart's journal replay with the restart it
// belongs to. An event that failed in any run fails here, with that run's detail: a failure is
// never hidden behind a run that went well. The counts (messages, warnings, ...) are the first
// run's; wall_s the sum, on_cpu the lowest.
ScaleRun MedianOf(std::vector<ScaleRun> runs);

}  // namespace elastra::scale
