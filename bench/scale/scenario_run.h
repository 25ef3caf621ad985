// One run of a scenario in progress, as its events' phases share it (scenario.cc, scenario_3d.cc):
// the simulation, the coordinator and the job, and the steps every event takes (measure until an
// outcome, settle, book the outcome). Internal to the simulator. Not thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "bench/scale/scenario.h"
#include "coordinator/options.h"

namespace elastra::scale {

struct Scenario {
  int n;
  const ScaleParams& p;
  ScaleRun& run;
  EventLoop& loop;
  Meter& meter;
  Cost& scratch;
  SimCoordinator& coordinator;
  SimJob& job;
  std::chrono::steady_clock::time_point wall0;
  bool failed = false;

  bool OverBudget() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count() >
           p.wall_budget_s;
  }

  EventResult& Event(const std::string& name) {
    for (auto& e : run.events) {
      if (e.name == name) return e;
    }
    return run.events.front();
  }

  // Runs the simulation for event `e` until `done` (or its timeout), its costs booked to `e`.
  bool Measure(EventResult& e, const std::function<bool()>& done) {
    meter.Measure(&e.cost);
    const SimTime t0 = loop.now();
    uint64_t checks = 0;
    bool budget = false;
    const bool ok = loop.RunUntil(
        [&] {
          if ((++checks & 0xFFF) == 0 && OverBudget()) budget = true;
          return budget || done();
        },
        t0 + p.event_timeout_us);
    e.window_s = static_cast<double>(loop.now() - t0) / kSec;
    meter.Measure(&scratch);
    if (budget) {
      e.detail = "stopped: the wall-clock budget ran out";
      return false;
    }
    if (!ok) e.detail = "no outcome within " + std::to_string(p.event_timeout_us / kSec) + " s";
    return ok;
  }

  void Settle() {
    meter.Measure(&scratch);
    loop.RunFor(p.settle_us);
  }

  // A generation after `after` is committed and running (with `world` ranks when world >= 0).
  bool Committed(uint64_t after, int world) const {
    return coordinator.up() && coordinator.core().generation() > after &&
           coordinator.core().state() == proto::JobState::kRunning &&
           (world < 0 || coordinator.core().layout().world() == world);
  }

  int WorkersNow() const { return coordinator.up() ? coordinator.core().layout().world() : 0; }

  void Finish(EventResult& e, bool ok, const std::string& why) {
    e.ok = ok;
    if (!ok && e.detail.empty()) e.detail = why;
    e.workers = WorkersNow();
    failed = failed || !ok;
  }
};

// Runs a scenario of `n` workers: the coordinator (CoordinatorOptions for `n` workers, then
// `configure`d) on a fresh state directory, the job, the events named `events` (in order, none
// run yet), then `body`; collects the run's totals (journal, job, simulation, logs).
ScaleRun RunScenario(int n, const ScaleParams& p, const std::vector<std::string>& events,
                     const std::function<void(coordinator::CoordinatorOptions&)>& configure,
                     const std::function<void(Scenario&)>& body);

// Events "join" and "first_generation": the join storm of the scenario's n workers; the first
// generation starts inside the Handle of the last join and is measured until n ranks commit.
void RunJoinStorm(Scenario& s);

}  // namespace elastra::scale
