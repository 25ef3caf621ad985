#include "bench/scale/scenario.h"

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <mutex>

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

}  // namespace

ScaleRun RunScale(int n, const ScaleParams& p) {
  ScaleRun run;
  run.n = n;
  const auto wall0 = std::chrono::steady_clock::now();
  const int64_t thread_cpu0 = ThreadCpuNanos();
  auto over_budget = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count() >
           p.wall_budget_s;
  };

  auto counts = std::make_shared<LogCounts>();
  logging::SetSink([counts](logging::Severity s, const std::string& line) {
    std::lock_guard<std::mutex> lock(counts->mu);
    if (s >= logging::Severity::kError) {
      ++counts->errors;
      if (counts->first_errors.size() < 4) counts->first_errors.push_back(line);
    } else if (s == logging::Severity::kWarning) {
      ++counts->warnings;
      if (line.find("lost: missed heartbeat deadline") != std::string::npos) ++counts->expired;
    }
  });

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
  SimCoordinator coordinator(&loop, options, p.net, p.server, &meter, &env);
  SimJob job(&loop, &coordinator, p.job, options.job);

  for (const auto& name : EventNames()) run.events.push_back(EventResult{name});
  auto event = [&](const std::string& name) -> EventResult& {
    for (auto& e : run.events) {
      if (e.name == name) return e;
    }
    return run.events.front();
  };
  bool failed = state_dir.empty();
  if (failed) event("join").detail = "cannot make a state directory under " + p.journal_root;
  if (!failed) {
    Status started = coordinator.Start();
    if (!started.ok()) {
      failed = true;
      event("join").detail = "the coordinator did not start: " + started.ToString();
    }
  }

  // Runs the simulation for event `e` until `done` (or its timeout), its costs booked to `e`.
  auto measure = [&](EventResult& e, const std::function<bool()>& done) {
    meter.Measure(&e.cost);
    const SimTime t0 = loop.now();
    uint64_t checks = 0;
    bool budget = false;
    const bool ok = loop.RunUntil(
        [&] {
          if ((++checks & 0xFFF) == 0 && over_budget()) budget = true;
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
  };
  auto settle = [&] {
    meter.Measure(&scratch);
    loop.RunFor(p.settle_us);
  };
  auto committed = [&](uint64_t after, int world) {
    return coordinator.up() && coordinator.core().generation() > after &&
           coordinator.core().state() == JobState::kRunning &&
           coordinator.core().layout().world() == world;
  };
  auto workers_now = [&] { return coordinator.up() ? coordinator.core().layout().world() : 0; };
  auto finish = [&](EventResult& e, bool ok, const std::string& why) {
    e.ok = ok;
    if (!ok && e.detail.empty()) e.detail = why;
    e.workers = workers_now();
    failed = failed || !ok;
  };

  // 1-2. The join storm; the first generation starts inside the Handle of the last join.
  if (!failed) {
    EventResult& join = event("join");
    EventResult& first = event("first_generation");
    SimTime first_started = -1;
    meter.SwitchOn(proto::MessageType::kNewGeneration, &first.cost,
                   [&](SimTime t) { first_started = t; });
    const SimTime t0 = loop.now();
    job.Launch(n);
    bool ok = measure(join, [&] { return job.joined() + job.join_failures() >= n; });
    join.time_s = static_cast<double>(job.last_join_reply() - t0) / kSec;
    finish(join, ok && job.join_failures() == 0,
           std::to_string(job.join_failures()) + " workers could not join");
    if (!failed) {
      ok = measure(first, [&] { return committed(0, n); });
      if (ok && first_started >= 0) {
        first.time_s = static_cast<double>(loop.now() - first_started) / kSec;
      }
      finish(first, ok, "the first generation did not form");
    }
  }
  if (!failed) settle();

  // 3. Heartbeats in steady state.
  if (!failed) {
    EventResult& hb = event("heartbeats");
    const uint64_t g = coordinator.core().generation();
    meter.Measure(&hb.cost);
    const SimTime t0 = loop.now();
    // The period in force: a large job's is longer than the default (ScaledHeartbeats).
    const auto period = coordinator.core().options().heartbeat_interval;
    const int64_t periods = std::max<int64_t>(
        p.heartbeat_periods, (p.heartbeat_min_beats + n - 1) / std::max(1, n));
    loop.RunFor(static_cast<SimTime>(periods) * period.count() * kMs);
    meter.Measure(&scratch);
    hb.window_s = static_cast<double>(loop.now() - t0) / kSec;
    hb.time_s = hb.window_s;
    finish(hb, coordinator.core().generation() == g,
           "the generation changed while only heartbeats were expected");
  }

  // 4-5. A planned grow by one host, then the shrink back.
  for (const auto& [name, target] : {std::pair<std::string, int>{"grow", n + p.job.host_size},
                                     std::pair<std::string, int>{"shrink", n}}) {
    if (failed) break;
    EventResult& e = event(name);
    job.Resize(target);
    const bool ok = measure(e, [&] { return job.resize().over; });
    if (job.resize().over) {
      e.time_s = static_cast<double>(job.resize().answered - job.resize().sent) / kSec;
    }
    finish(e, ok && job.resize().phase == proto::ResizePhase::kDone &&
                  job.resize().workers == target,
           "resize: " + job.resize().message);
    if (!failed) settle();
  }

  // 6. 1% of the workers fail at once.
  if (!failed) {
    EventResult& e = event("fail_1pct");
    const uint64_t g = coordinator.core().generation();
    const int before = workers_now();
    const int k = std::max(1, n / 100);
    const auto killed = job.KillMembers(k);
    const SimTime t0 = loop.now();
    const bool ok = measure(e, [&] { return committed(g, before - k); });
    if (ok) e.time_s = static_cast<double>(loop.now() - t0) / kSec;
    finish(e, ok, "no recovery to " + std::to_string(before - k) + " workers");
    if (ok) e.detail = std::to_string(killed.size()) + " killed";
    if (!failed) settle();
  }

  // 7. A host vanishes with its agent: only heartbeats tell.
  if (!failed) {
    EventResult& e = event("host_lost");
    const uint64_t g = coordinator.core().generation();
    const int before = workers_now();
    const std::string host = job.KillHost();
    const SimTime t0 = loop.now();
    const bool ok =
        !host.empty() && measure(e, [&] { return committed(g, before - p.job.host_size); });
    if (ok) e.time_s = static_cast<double>(loop.now() - t0) / kSec;
    finish(e, ok, host.empty() ? "no host whose workers all are members" : "no recovery");
    if (ok) e.detail = host;
    if (!failed) settle();
  }

  // 8. The coordinator dies and a new one takes the job back from the journal.
  if (!failed) {
    EventResult& e = event("restart");
    const uint64_t g = coordinator.core().generation();
    const int before = workers_now();
    meter.Measure(&e.cost);
    coordinator.Crash();
    coordinator.Restart(p.restart_delay_us, p.reconnect_us);
    const SimTime t0 = loop.now();
    bool reconnected = false;
    std::function<void()> probe = [&] {
      if (coordinator.up() && AllMembersHeard(coordinator.core())) {
        reconnected = true;
        return;
      }
      loop.After(10 * kMs, probe);
    };
    loop.After(p.restart_delay_us, probe);
    const bool ok = measure(e, [&] {
      return reconnected && coordinator.core().state() == JobState::kRunning;
    });
    if (ok) e.time_s = static_cast<double>(loop.now() - t0) / kSec;
    run.replay_cpu_ms = coordinator.start_cpu_ms();
    e.cost.cpu_ms += run.replay_cpu_ms;
    e.cost.busy_ms += run.replay_cpu_ms;
    if (run.replay_cpu_ms > e.cost.longest_call_ms) {
      e.cost.longest_call_ms = run.replay_cpu_ms;
      e.cost.longest_call = "journal replay";
    }
    const bool same = coordinator.up() && coordinator.core().restored() &&
                      coordinator.core().generation() == g && workers_now() == before;
    finish(e, ok && same,
           ok ? "took back generation " +
                    std::to_string(coordinator.up() ? coordinator.core().generation() : 0) +
                    " of " + std::to_string(workers_now()) + " workers, expected " +
                    std::to_string(g) + " of " + std::to_string(before)
              : "the workers did not all reconnect");
  }

  for (auto& e : run.events) {
    if (!e.ok && e.detail.empty()) e.detail = "skipped (an earlier event failed)";
  }
  run.journal_bytes = env.appended_bytes();
  run.journal_syncs = env.syncs();
  run.join_failures = job.join_failures();
  run.build_failures = job.build_failures();
  run.first_build_error = job.first_build_error();
  run.rendezvous_sample = job.rendezvous_samples();
  run.sim_events = loop.events_run();
  run.messages_handled = coordinator.messages_handled();
  logging::ResetSink();
  {
    std::lock_guard<std::mutex> lock(counts->mu);
    run.warnings = counts->warnings;
    run.errors = counts->errors;
    run.expired_heartbeats = counts->expired;
    run.first_errors = counts->first_errors;
  }
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
