#include "bench/scale/scenario_3d.h"

#include <functional>

#include "bench/scale/scenario_run.h"

namespace elastra::scale {

StateSpec ThreeDState() {
  // 70e9 parameters: 8 blocks x 4 tensors x 8 rows x 273,437,500 columns.
  constexpr int64_t kColumns = 273'437'500;
  constexpr size_t kBytesPerParameter = 2 + 4 + 8;  // bf16 weight, fp32 master, Adam m and v
  StateSpec state;
  state.num_layers = kThreeDPp;
  for (int layer = 0; layer < state.num_layers; ++layer) {
    for (const char* name : {"qkv", "proj", "fc1", "fc2"}) {
      TensorSpec t;
      t.name = "layer" + std::to_string(layer) + "." + name;
      t.shape = {kThreeDTp, kColumns};
      t.element_size = kBytesPerParameter;
      t.rule.tp_split_dim = 0;
      t.rule.layer = layer;
      state.tensors.push_back(t);
    }
  }
  return state;
}

int64_t ThreeDMemoryBytes() { return int64_t{24} << 30; }

const std::vector<std::string>& ThreeDEventNames() {
  static const std::vector<std::string> names = {"join", "first_generation", "worker_lost",
                                                 "host_lost", "regrow"};
  return names;
}

namespace {

bool Keeps(const Layout& l) { return l.tp == kThreeDTp && l.pp == kThreeDPp; }

// Books the outcome of change `e`, begun at `t0` from committed generation `from`: `ok` when a
// later generation committed and keeps tp and pp. Its layout and the groups it rebuilt and kept
// come from the coordinator's status history.
void FinishChange(Scenario& s, EventResult& e, uint64_t from, SimTime t0, bool ok,
                  const std::string& why) {
  if (ok) e.time_s = static_cast<double>(s.loop.now() - t0) / kSec;
  const auto& history = s.coordinator.core().history();
  const bool recorded = ok && !history.empty() && history.back().generation > from;
  if (recorded) {
    const auto& h = history.back();
    e.layout = h.layout;
    e.groups_rebuilt = h.timings.groups_rebuilt;
    e.groups_kept = h.timings.groups_kept;
    e.standby = static_cast<int>(s.coordinator.core().membership().StandbyCount());
  }
  if (recorded && !Keeps(e.layout)) {
    e.detail = "layout " + e.layout.ToString() + " does not keep tp=" + std::to_string(kThreeDTp) +
               ", pp=" + std::to_string(kThreeDPp);
    ok = false;
  }
  s.Finish(e, ok && recorded, why);
}

// Runs change `e`, triggered at the current time, until a generation after `from` commits (with
// `world` ranks when world >= 0), and books it; `e.decision_s` is the time to the call that sent
// its first NewGeneration.
bool RunChange(Scenario& s, EventResult& e, uint64_t from, int world, const std::string& why) {
  const SimTime t0 = s.loop.now();
  SimTime decided = -1;
  s.meter.SwitchOn(proto::MessageType::kNewGeneration, &e.cost,
                   [&decided](SimTime t) { decided = t; });
  const bool ok = s.Measure(e, [&] { return s.Committed(from, world); });
  s.meter.CancelSwitch();
  if (decided >= 0) e.decision_s = static_cast<double>(decided - t0) / kSec;
  FinishChange(s, e, from, t0, ok, why);
  return e.ok;
}

// A member dies (its agent reports the exit); a spare takes its rank.
void RunWorkerLost(Scenario& s) {
  EventResult& e = s.Event("worker_lost");
  const uint64_t g = s.coordinator.core().generation();
  const auto killed = s.job.KillMembers(1);
  if (killed.empty()) {
    s.Finish(e, false, "no member to kill");
    return;
  }
  if (RunChange(s, e, g, -1, "no recovery")) e.detail = killed.front() + " killed";
}

// A host of members vanishes with its agent: only heartbeats tell.
void RunHostLost(Scenario& s) {
  EventResult& e = s.Event("host_lost");
  const uint64_t g = s.coordinator.core().generation();
  const std::string host = s.job.KillHost();
  if (host.empty()) {
    s.Finish(e, false, "no host whose workers all are members");
    return;
  }
  if (RunChange(s, e, g, -1, "no recovery")) e.detail = host;
}

// The coordinator grows the job back to its n workers: a replacement starts on the dead worker's
// free slot, and with the standbys it makes a whole replica again.
void RunRegrow(Scenario& s) {
  EventResult& e = s.Event("regrow");
  const uint64_t g = s.coordinator.core().generation();
  RunChange(s, e, g, s.n, "no regrow to " + std::to_string(s.n) + " workers");
}

}  // namespace

bool KeepsModelParallelism(const ScaleRun& run) {
  bool any = false;
  for (const auto& e : run.events) {
    if (!e.ok || e.groups_rebuilt < 0) continue;
    if (!Keeps(e.layout)) return false;
    any = true;
  }
  return any;
}

ScaleRun RunScale3D(int n, const ScaleParams& params, int spares) {
  ScaleParams p = params;
  p.job.state = ThreeDState();
  p.job.device_memory_bytes = ThreeDMemoryBytes();
  p.job.agent_heartbeat_us = 200 * kMs;  // a regrow starts workers only on watched hosts
  return RunScenario(n, p, ThreeDEventNames(), nullptr, [spares](Scenario& s) {
    RunJoinStorm(s);
    if (s.failed) return;
    // Watched from now on: a regrow starts its replacement on a host whose agent heartbeats.
    s.job.WatchAgents();
    EventResult& first = s.Event("first_generation");
    const double first_time_s = first.time_s;  // RunJoinStorm's: from the last join to the commit
    FinishChange(s, first, 0, s.loop.now(), true, "");
    first.time_s = first_time_s;
    if (s.failed) return;
    // A host of spares joins and waits as standbys (`elastra run --spares`).
    s.job.AddSpares(spares);
    s.Settle();
    RunWorkerLost(s);
    if (!s.failed) s.Settle();
    if (!s.failed) RunHostLost(s);
    // No settling: the regrow starts at the recovery's commit, or at the next agent registration.
    if (!s.failed) RunRegrow(s);
  });
}

}  // namespace elastra::scale
