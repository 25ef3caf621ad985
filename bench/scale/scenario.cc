#include "bench/scale/scenario.h"

#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>

#include "bench/scale/scenario_run.h"
#include "common/logging.h"

namespace elastra::scale {

using coordinator::CoordinatorCore;
using proto::JobState;

const EventResult* ScaleRun::Find(const std::string& name) const {
  for (const auto& e : events) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

bool ScaleRun::ok() const {
  for (const auto& e : events) {
    if (!e.ok) return false;
  }
  return !events.empty();
}

const std::vector<std::string>& EventNames() {
  static const std::vector<std::string> names = {
      "join", "first_generation", "heartbeats", "grow", "shrink", "fail_1pct", "host_lost",
      "restart"};
  return names;
}

namespace {

// What the core logs during a run: counted (the formatting is the core's real cost), not printed.
struct LogCounts {
  std::mutex mu;
  uint64_t warnings = 0, errors = 0, expired = 0;
  std::vector<std::string> first_errors;
};

std::string MakeStateDir(const std::string& root) {
  std::string templ = root + "/elastra-scale-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

// Every member of the committed generation was heard from since the coordinator (re)started.
bool AllMembersHeard(const CoordinatorCore& core) {
  for (const auto& id : core.membership().Members()) {
    const auto* w = core.membership().Find(id);
    if (w == nullptr || w->identity.empty()) return false;
  }
  return true;
}

// Counts what the core logs into `counts` instead of printing it; ELASTRA_SCALE_LOG=1 in the
// environment prints it too, on stderr (to read why an event had no outcome).
void CountLogs(const std::shared_ptr<LogCounts>& counts) {
  const char* echo_env = getenv("ELASTRA_SCALE_LOG");
  const bool echo = echo_env != nullptr && std::string(echo_env) == "1";
  logging::SetSink([counts, echo](logging::Severity s, const std::string& line) {
    std::lock_guard<std::mutex> lock(counts->mu);
    if (echo) std::fprintf(stderr, "%s\n", line.c_str());
    if (s >= logging::Severity::kError) {
      ++counts->errors;
      if (counts->first_errors.size() < 4) counts->first_errors.push_back(line);
    } else if (s == logging::Severity::kWarning) {
      ++counts->warnings;
      if (line.find("lost: missed heartbeat deadline") != std::string::npos) ++counts->expired;
    }
  });
}

}  // namespace

void RunJoinStorm(Scenario& s) {
  EventResult& join = s.Event("join");
  EventResult& first = s.Event("first_generation");
  SimTime first_started = -1;
  s.meter.SwitchOn(proto::MessageType::kNewGeneration, &first.cost,
                   [&](SimTime t) { first_started = t; });
  const SimTime t0 = s.loop.now();
  s.job.Launch(s.n);
  bool ok = s.Measure(join, [&] { return s.job.joined() + s.job.join_failures() >= s.n; });
  join.time_s = static_cast<double>(s.job.last_join_reply() - t0) / kSec;
  s.Finish(join, ok && s.job.join_failures() == 0,
           std::to_string(s.job.join_failures()) + " workers could not join");
  if (!s.failed) {
    ok = s.Measure(first, [&] { return s.Committed(0, s.n); });
    if (ok && first_started >= 0) {
      first.time_s = static_cast<double>(s.loop.now() - first_started) / kSec;
    }
    s.Finish(first, ok, "the first generation did not form");
  }
}

namespace {

// 3. Heartbeats in steady state.
void RunHeartbeats(Scenario& s) {
  EventResult& hb = s.Event("heartbeats");
  const uint64_t g = s.coordinator.core().generation();
  s.meter.Measure(&hb.cost);
  const SimTime t0 = s.loop.now();
  // The period in force: a large job's is longer than the default (ScaledHeartbeats).
  const auto period = s.coordinator.core().options().heartbeat_interval;
  const int64_t periods = std::max<int64_t>(
      s.p.heartbeat_periods, (s.p.heartbeat_min_beats + s.n - 1) / std::max(1, s.n));
  s.loop.RunFor(static_cast<SimTime>(periods) * period.count() * kMs);
  s.meter.Measure(&s.scratch);
  hb.window_s = static_cast<double>(s.loop.now() - t0) / kSec;
  hb.time_s = hb.window_s;
  s.Finish(hb, s.coordinator.core().generation() == g,
           "the generation changed while only heartbeats were expected");
}

// 4-5. A planned grow by one host, then the shrink back.
void RunResizes(Scenario& s) {
  for (const auto& [name, target] :
       {std::pair<std::string, int>{"grow", s.n + s.p.job.host_size},
        std::pair<std::string, int>{"shrink", s.n}}) {
    if (s.failed) break;
    EventResult& e = s.Event(name);
    s.job.Resize(target);
    const bool ok = s.Measure(e, [&] { return s.job.resize().over; });
    if (s.job.resize().over) {
      e.time_s = static_cast<double>(s.job.resize().answered - s.job.resize().sent) / kSec;
    }
    s.Finish(e, ok && s.job.resize().phase == proto::ResizePhase::kDone &&
                    s.job.resize().workers == target,
             "resize: " + s.job.resize().message);
    if (!s.failed) s.Settle();
  }
}

// 6. 1% of the workers fail at once.
void RunFailOnePercent(Scenario& s) {
  EventResult& e = s.Event("fail_1pct");
  const uint64_t g = s.coordinator.core().generation();
  const int before = s.WorkersNow();
  const int k = std::max(1, s.n / 100);
  const auto killed = s.job.KillMembers(k);
  const SimTime t0 = s.loop.now();
  const bool ok = s.Measure(e, [&] { return s.Committed(g, before - k); });
  if (ok) e.time_s = static_cast<double>(s.loop.now() - t0) / kSec;
  s.Finish(e, ok, "no recovery to " + std::to_string(before - k) + " workers");
  if (ok) e.detail = std::to_string(killed.size()) + " killed";
  if (!s.failed) s.Settle();
}

// 7. A host vanishes with its agent: only heartbeats tell.
void RunHostLost(Scenario& s) {
  EventResult& e = s.Event("host_lost");
  const uint64_t g = s.coordinator.core().generation();
  const int before = s.WorkersNow();
  const std::string host = s.job.KillHost();
  const SimTime t0 = s.loop.now();
  const bool ok = !host.empty() &&
                  s.Measure(e, [&] { return s.Committed(g, before - s.p.job.host_size); });
  if (ok) e.time_s = static_cast<double>(s.loop.now() - t0) / kSec;
  s.Finish(e, ok, host.empty() ? "no host whose workers all are members" : "no recovery");
  if (ok) e.detail = host;
  if (!s.failed) s.Settle();
}

// 8. The coordinator dies and a new one takes the job back from the journal.
void RunRestart(Scenario& s) {
  EventResult& e = s.Event("restart");
  SimCoordinator& coordinator = s.coordinator;
  const uint64_t g = coordinator.core().generation();
  const int before = s.WorkersNow();
  s.meter.Measure(&e.cost);
  coordinator.Crash();
  coordinator.Restart(s.p.restart_delay_us, s.p.reconnect_us);
  const SimTime t0 = s.loop.now();
  bool reconnected = false;
  std::function<void()> probe = [&] {
    if (coordinator.up() && AllMembersHeard(coordinator.core())) {
      reconnected = true;
      return;
    }
    s.loop.After(10 * kMs, probe);
  };
  s.loop.After(s.p.restart_delay_us, probe);
  const bool ok = s.Measure(e, [&] {
    return reconnected && coordinator.core().state() == JobState::kRunning;
  });
  if (ok) e.time_s = static_cast<double>(s.loop.now() - t0) / kSec;
  s.run.replay_cpu_ms = coordinator.start_cpu_ms();
  e.cost.cpu_ms += s.run.replay_cpu_ms;
  e.cost.busy_ms += s.run.replay_cpu_ms;
  if (s.run.replay_cpu_ms > e.cost.longest_call_ms) {
    e.cost.longest_call_ms = s.run.replay_cpu_ms;
    e.cost.longest_call = "journal replay";
  }
  const bool same = coordinator.up() && coordinator.core().restored() &&
                    coordinator.core().generation() == g && s.WorkersNow() == before;
  s.Finish(e, ok && same,
           ok ? "took back generation " +
                    std::to_string(coordinator.up() ? coordinator.core().generation() : 0) +
                    " of " + std::to_string(s.WorkersNow()) + " workers, expected " +
                    std::to_string(g) + " of " + std::to_string(before)
              : "the workers did not all reconnect");
}

// The run's totals, once every event ran or one failed: the journal's, the job's, the
// simulation's and the logs'.
void CollectTotals(Scenario& s, const CountingEnv& env, LogCounts& counts) {
  ScaleRun& run = s.run;
  for (auto& e : run.events) {
    if (!e.ok && e.detail.empty()) e.detail = "skipped (an earlier event failed)";
  }
  run.journal_bytes = env.appended_bytes();
  run.journal_syncs = env.syncs();
  run.join_failures = s.job.join_failures();
  run.build_failures = s.job.build_failures();
  run.first_build_error = s.job.first_build_error();
  run.rendezvous_sample = s.job.rendezvous_samples();
  run.sim_events = s.loop.events_run();
  run.messages_handled = s.coordinator.messages_handled();
  logging::ResetSink();
  {
    std::lock_guard<std::mutex> lock(counts.mu);
    run.warnings = counts.warnings;
    run.errors = counts.errors;
    run.expired_heartbeats = counts.expired;
    run.first_errors = counts.first_errors;
  }
}

}  // namespace

ScaleRun RunScenario(int n, const ScaleParams& p, const std::vector<std::string>& events,
                     const std::function<void(coordinator::CoordinatorOptions&)>& configure,
                     const std::function<void(Scenario&)>& body) {
  ScaleRun run;
  run.n = n;
  const auto wall0 = std::chrono::steady_clock::now();
  const int64_t thread_cpu0 = ThreadCpuNanos();
  auto counts = std::make_shared<LogCounts>();
  CountLogs(counts);

  const std::string state_dir = MakeStateDir(p.journal_root);
  EventLoop loop(p.seed);
  Meter meter;
  Cost scratch;
  meter.Measure(&scratch);
  CountingEnv env(Env::Default());
  coordinator::CoordinatorOptions options;
  options.job = "scale";
  options.initial_workers = n;
  options.max_workers = n + 64;  // the grow's extra host
  options.state_dir = state_dir;
  if (configure) configure(options);
  SimCoordinator coordinator(&loop, options, p.net, p.server, &meter, &env);
  SimJob job(&loop, &coordinator, p.job, options.job);

  for (const auto& name : events) run.events.push_back(EventResult{name});
  Scenario s{n, p, run, loop, meter, scratch, coordinator, job, wall0};
  s.failed = state_dir.empty();
  if (s.failed) s.Event("join").detail = "cannot make a state directory under " + p.journal_root;
  if (!s.failed) {
    Status started = coordinator.Start();
    if (!started.ok()) {
      s.failed = true;
      s.Event("join").detail = "the coordinator did not start: " + started.ToString();
    }
  }

  if (!s.failed) body(s);

  CollectTotals(s, env, *counts);
  if (!state_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(state_dir, ec);
  }
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  if (run.wall_s > 0) {
    run.on_cpu = static_cast<double>(ThreadCpuNanos() - thread_cpu0) / 1e9 / run.wall_s;
  }
  return run;
}

ScaleRun RunScale(int n, const ScaleParams& p) {
  return RunScenario(n, p, EventNames(), nullptr, [](Scenario& s) {
    RunJoinStorm(s);
    if (!s.failed) s.Settle();
    if (!s.failed) RunHeartbeats(s);
    RunResizes(s);
    if (!s.failed) RunFailOnePercent(s);
    if (!s.failed) RunHostLost(s);
    if (!s.failed) RunRestart(s);
  });
}

ScaleRun MedianOf(std::vector<ScaleRun> runs) {
  if (runs.empty()) return ScaleRun();
  ScaleRun median = runs.front();
  median.wall_s = 0;
  for (const auto& r : runs) {
    median.wall_s += r.wall_s;
    median.on_cpu = std::min(median.on_cpu, r.on_cpu);
  }
  auto cost = [](const EventResult& e) {
    return e.name == "heartbeats" ? e.CpuPerSecond() : e.cost.cpu_ms;
  };
  for (auto& e : median.events) {
    std::vector<std::pair<double, size_t>> ok;  // (cost, run) of the runs where it succeeded
    const EventResult* failed = nullptr;
    for (size_t i = 0; i < runs.size(); ++i) {
      const EventResult* other = runs[i].Find(e.name);
      if (other == nullptr) continue;
      if (other->ok) {
        ok.push_back({cost(*other), i});
      } else if (failed == nullptr) {
        failed = other;
      }
    }
    if (failed != nullptr) {
      e = *failed;  // a failure in any run stands
      continue;
    }
    if (ok.empty()) continue;
    std::sort(ok.begin(), ok.end());
    const size_t i = ok[(ok.size() - 1) / 2].second;  // the lower median of an even count
    e = *runs[i].Find(e.name);
    if (e.name == "restart") median.replay_cpu_ms = runs[i].replay_cpu_ms;
  }
  return median;
}

}  // namespace elastra::scale
