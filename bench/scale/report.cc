#include "bench/scale/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "protocol/messages.h"

namespace elastra::scale {

std::string Bytes(double b) {
  char buf[32];
  const char* units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (b >= 1000 && u < 5) {
    b /= 1000;
    ++u;
  }
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

std::string Count(double c) {
  char buf[32];
  if (c >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2fG", c / 1e9);
  } else if (c >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.2fM", c / 1e6);
  } else if (c >= 1e4) {
    std::snprintf(buf, sizeof(buf), "%.1fk", c / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f", c);
  }
  return buf;
}

double Exponent(const std::vector<std::pair<double, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int k = 0;
  for (const auto& [x, y] : points) {
    if (x <= 0 || y <= 0) continue;
    const double lx = std::log(x), ly = std::log(y);
    sx += lx;
    sy += ly;
    sxx += lx * lx;
    sxy += lx * ly;
    ++k;
  }
  if (k < 2 || sxx * k - sx * sx == 0) return std::nan("");
  return (k * sxy - sx * sy) / (k * sxx - sx * sx);
}

std::vector<Series> AllSeries() {
  std::vector<Series> s;
  auto ev = [](const ScaleRun& r, const std::string& name) { return r.Find(name); };
  for (const std::string name : {"join", "first_generation", "grow", "shrink", "fail_1pct",
                                 "host_lost", "restart"}) {
    s.push_back({name + ".cpu", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? e->cost.change_cpu_ms() : -1;
                 }});
    s.push_back({name + ".own_cpu", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? e->cost.change_own_cpu_ms() : -1;
                 }});
    s.push_back({name + ".bytes", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? static_cast<double>(e->cost.change_bytes()) : -1;
                 }});
    s.push_back({name + ".messages", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? static_cast<double>(e->cost.change_msgs()) : -1;
                 }});
    s.push_back({name + ".time", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? e->time_s : -1;
                 }});
    s.push_back({name + ".longest_call", [=](const ScaleRun& r) {
                   auto* e = ev(r, name);
                   return e && e->ok ? e->cost.longest_call_ms : -1;
                 }});
  }
  s.push_back({"heartbeats.cpu_per_s", [=](const ScaleRun& r) {
                 auto* e = ev(r, "heartbeats");
                 return e && e->ok ? e->CpuPerSecond() : -1;
               }});
  s.push_back({"heartbeats.bytes_per_s", [=](const ScaleRun& r) {
                 auto* e = ev(r, "heartbeats");
                 return e && e->ok && e->window_s > 0
                            ? static_cast<double>(e->cost.bytes_in + e->cost.bytes_out) / e->window_s
                            : -1;
               }});
  // The rendezvous of the grow's new generation (the whole world reconnects), scaled to every rank.
  s.push_back({"rendezvous.cpu", [=](const ScaleRun& r) {
                 auto* e = ev(r, "grow");
                 return e && e->ok ? e->cost.kv_cpu_ms_all : -1;
               }});
  s.push_back({"rendezvous.bytes", [=](const ScaleRun& r) {
                 auto* e = ev(r, "grow");
                 return e && e->ok ? e->cost.kv_bytes_all : -1;
               }});
  s.push_back({"rendezvous.messages", [=](const ScaleRun& r) {
                 auto* e = ev(r, "grow");
                 return e && e->ok ? e->cost.kv_msgs_all : -1;
               }});
  s.push_back({"replay.cpu", [](const ScaleRun& r) { return r.replay_cpu_ms; }});
  return s;
}

double TimeWithRendezvous(const EventResult& e) {
  if (e.time_s < 0) return -1;
  return e.time_s + std::max(0.0, e.cost.kv_cpu_ms_all - e.cost.kv_cpu_ms) / 1000;
}

void PrintTable(const std::vector<ScaleRun>& runs) {
  std::printf(
      "\n%6s  %-16s %-3s %8s %9s %7s %10s %10s %9s %9s %8s %9s %9s  %11s %8s %9s %6s\n", "N",
      "event", "ok", "time_s", "+rdv_s*", "busy_s", "cpu_ms", "chg_cpu_ms", "own_ms", "longest",
      "chg_msgs",
      "bytes_in", "bytes_out", "kv_cpu_ms*", "kv_msgs*", "kv_bytes*", "fsync");
  for (const auto& run : runs) {
    for (const auto& e : run.events) {
      const Cost& c = e.cost;
      std::printf(
          "%6d  %-16s %-3s %8.2f %9.1f %7.2f %10.1f %10.1f %9.1f %9.1f %8s %9s %9s  %11.1f %8s %9s "
          "%6s\n",
          run.n, e.name.c_str(), e.ok ? "yes" : "NO", e.time_s, TimeWithRendezvous(e),
          c.busy_ms / 1000, c.cpu_ms,
                  c.change_cpu_ms(), c.change_own_cpu_ms(), c.longest_call_ms,
                  Count(static_cast<double>(c.change_msgs())).c_str(),
                  Bytes(static_cast<double>(c.bytes_in)).c_str(),
                  Bytes(static_cast<double>(c.bytes_out)).c_str(), c.kv_cpu_ms_all,
                  Count(c.kv_msgs_all).c_str(), Bytes(c.kv_bytes_all).c_str(),
                  Count(static_cast<double>(c.fsyncs)).c_str());
    }
  }
  std::printf(
      "  time_s: simulated seconds to the outcome (join: last JoinReply; first_generation: from the\n"
      "    last join to the commit; grow/shrink: request to the 'done' reply; fail/host: the kill to\n"
      "    the commit; restart: the death to every member heard from; heartbeats: the window).\n"
      "  +rdv_s: time_s plus the coordinator CPU of the rendezvous requests the sample did not\n"
      "    send (a lower bound of the time with every rank's rendezvous).\n"
      "  busy_s: simulated seconds the coordinator's thread was busy (its CPU and modelled fsyncs).\n"
      "  cpu_ms: the coordinator thread's CPU, all of it; chg_cpu_ms: less heartbeats, agent\n"
      "    registrations and ticks that sent nothing. own_ms: chg_cpu_ms less the encoding of the\n"
      "    NewGeneration frames (encoded again and timed): the coordinator's bookkeeping.\n"
      "    longest: the longest single Handle/Tick.\n"
      "  * the Gloo rendezvous on the coordinator's key-value store, run by a sample of the ranks and\n"
      "    scaled to all of them (docs/scale.md); not in cpu_ms, bytes or msgs.\n");
}

void PrintChanges(const std::vector<ScaleRun>& runs) {
  std::printf("\n%6s  %-16s %-3s %-18s %6s %6s %7s %8s %9s %10s %9s %9s %8s %9s %9s\n", "N",
              "change", "ok", "layout", "built", "kept", "standby", "time_s", "decide_s",
              "chg_cpu_ms", "own_ms", "longest", "chg_msgs", "bytes_in", "bytes_out");
  for (const auto& run : runs) {
    for (const auto& e : run.events) {
      if (e.name == "join") continue;
      const Cost& c = e.cost;
      std::printf("%6d  %-16s %-3s %-18s %6d %6d %7d %8.2f %9.3f %10.1f %9.1f %9.1f %8s %9s %9s\n",
                  run.n, e.name.c_str(), e.ok ? "yes" : "NO",
                  e.groups_rebuilt >= 0 ? e.layout.ToString().c_str() : "-", e.groups_rebuilt,
                  e.groups_kept, e.standby, e.time_s, e.decision_s, c.change_cpu_ms(),
                  c.change_own_cpu_ms(), c.longest_call_ms,
                  Count(static_cast<double>(c.change_msgs())).c_str(),
                  Bytes(static_cast<double>(c.bytes_in)).c_str(),
                  Bytes(static_cast<double>(c.bytes_out)).c_str());
    }
  }
  std::printf(
      "  built, kept: the communicators the change's generation built and kept (the world,\n"
      "    each dp, pp and tp group of more than one rank that is not the world), from the\n"
      "    coordinator's status history; standby: live workers left out of the layout once it\n"
      "    committed.\n"
      "  time_s: simulated seconds from the trigger (the kill; for first_generation the last\n"
      "    join; for regrow the host_lost commit) to the commit, with the simulated workers'\n"
      "    modelled builds (sim_job.h: a fresh NCCL world 1 s, the state 2 s, a step 1 s);\n"
      "    decide_s: to the call that sent the first NewGeneration (detection, the recover or\n"
      "    pause round, the decision). chg_cpu_ms, own_ms, longest, chg_msgs, bytes: as in the\n"
      "    events' table.\n");
}

void PrintHot(const ScaleRun& run) {
  std::printf("\nwhere the coordinator's CPU went at N=%d (top handlers per event, ms):\n", run.n);
  for (const auto& e : run.events) {
    if (!e.ok) continue;
    std::vector<std::pair<double, std::string>> hot;
    for (const auto& [type, tc] : e.cost.by_type) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "%s x%s %.1f (max %.1f)", proto::TypeName(type),
                    Count(static_cast<double>(tc.count)).c_str(), tc.cpu_ms, tc.max_ms);
      hot.push_back({tc.cpu_ms, buf});
    }
    char tick[64];
    std::snprintf(tick, sizeof(tick), "Tick %.1f", e.cost.tick_cpu_ms);
    hot.push_back({e.cost.tick_cpu_ms, tick});
    std::sort(hot.rbegin(), hot.rend());
    std::printf("  %-16s", e.name.c_str());
    for (size_t i = 0; i < hot.size() && i < 3; ++i) std::printf("  %s;", hot[i].second.c_str());
    if (!e.cost.longest_call.empty()) {
      std::printf("  longest: %s %.1f", e.cost.longest_call.c_str(), e.cost.longest_call_ms);
    }
    std::printf("\n");
  }
}

}  // namespace elastra::scale
