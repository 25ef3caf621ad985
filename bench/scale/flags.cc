#include "bench/scale/flags.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "bench/scale/scenario_3d.h"
#include "bench/scale/sim.h"

namespace elastra::scale {

namespace {

bool ParseSizes(const std::string& s, std::vector<int>* out) {
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const int v = std::atoi(item.c_str());
    if (v < 8) return false;
    out->push_back(v);
  }
  return !out->empty();
}

}  // namespace

int Usage() {
  std::fprintf(stderr,
               "usage: bench_scale [--max-workers N] [--sizes A,B,..] [--quick] [--budget-s S]\n"
               "  [--heartbeat-periods K] [--rendezvous-sample S] [--server-batch B] [--fsync-ms X]\n"
               "  [--latency-us X] [--coordinator-gbps X] [--step-ms X] [--journal-dir DIR]\n"
               "  [--seed N] [--no-nccl] [--no-curve] [--every-rank-sets] [--event-timeout-s S]\n"
               "  [--store-rendezvous] [--thread-clock] [--no-look-ahead] [--repeat R]\n"
               "  [--scenario default|3d]  (3d: sizes multiples of %d)\n",
               kThreeDTp * kThreeDPp);
  return 2;
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  ScaleParams& p = f->params;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--quick") {
      f->quick = true;
    } else if (a == "--no-nccl") {
      p.job.nccl = false;
    } else if (a == "--no-curve") {
      f->curve = false;
    } else if (a == "--every-rank-sets") {
      p.job.every_rank_sets = true;
    } else if (a == "--store-rendezvous") {
      p.job.peer_rendezvous = false;
    } else if (a == "--repeat" && (v = value())) {
      f->repeat = std::atoi(v);
      f->repeat_set = true;
    } else if (a == "--scenario" && (v = value())) {
      if (std::string(v) != "default" && std::string(v) != "3d") return false;
      f->three_d = std::string(v) == "3d";
    } else if (a == "--no-look-ahead") {
      p.server.look_ahead = false;
    } else if (a == "--thread-clock") {
      SetCallClock(CallClock::kThreadCpu);
    } else if (a == "--event-timeout-s" && (v = value())) {
      p.event_timeout_us = static_cast<SimTime>(std::atof(v) * kSec);
    } else if ((a == "--max-workers") && (v = value())) {
      f->max_workers = std::atoi(v);
    } else if (a == "--sizes" && (v = value())) {
      if (!ParseSizes(v, &f->sizes)) return false;
    } else if (a == "--budget-s" && (v = value())) {
      f->budget_s = std::atof(v);
    } else if (a == "--heartbeat-periods" && (v = value())) {
      p.heartbeat_periods = std::atoi(v);
    } else if (a == "--rendezvous-sample" && (v = value())) {
      p.job.rendezvous_sample = std::atoi(v);
    } else if (a == "--server-batch" && (v = value())) {
      p.server.batch = std::atoi(v);
    } else if (a == "--fsync-ms" && (v = value())) {
      p.server.fsync_us = std::atof(v) * 1000;
    } else if (a == "--latency-us" && (v = value())) {
      p.net.latency_us = std::atoll(v);
    } else if (a == "--coordinator-gbps" && (v = value())) {
      p.net.coordinator_gbps = std::atof(v);
    } else if (a == "--step-ms" && (v = value())) {
      p.job.step_us = static_cast<SimTime>(std::atof(v) * kMs);
    } else if (a == "--journal-dir" && (v = value())) {
      f->journal_dir = v;
    } else if (a == "--seed" && (v = value())) {
      p.seed = std::strtoull(v, nullptr, 10);
    } else {
      return false;
    }
  }
  return f->max_workers >= 8 && p.heartbeat_periods >= 1 && p.job.rendezvous_sample >= 2 &&
         p.job.step_us > 0 && f->budget_s > 0 && f->repeat >= 1;
}

bool ApplyDefaults(Flags* f) {
  ScaleParams& p = f->params;
  if (f->quick) {
    p.heartbeat_periods = std::min(p.heartbeat_periods, 5);
    p.heartbeat_min_beats = 0;
    p.job.rendezvous_sample = std::min(p.job.rendezvous_sample, 16);
    f->repeat = 1;
  }
  // A 3-D run at 16,384 takes minutes here (docs/scale.md): once unless asked.
  if (f->three_d && !f->repeat_set) f->repeat = 1;
  if (f->sizes.empty()) {
    for (int n : {256, 1024, 4096, 16384}) {
      if (n <= f->max_workers && (!f->quick || n <= 1024)) f->sizes.push_back(n);
    }
    if (!f->quick && (f->sizes.empty() || f->sizes.back() != f->max_workers)) {
      f->sizes.push_back(f->max_workers);
    }
  }
  std::sort(f->sizes.begin(), f->sizes.end());
  f->sizes.erase(std::unique(f->sizes.begin(), f->sizes.end()), f->sizes.end());
  struct stat st{};
  if (f->journal_dir.empty()) {
    f->journal_dir = stat("/dev/shm", &st) == 0 && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  }
  p.journal_root = f->journal_dir;
  const int replica = kThreeDTp * kThreeDPp;
  return !f->three_d || std::all_of(f->sizes.begin(), f->sizes.end(),
                                    [replica](int n) { return n % replica == 0; });
}

}  // namespace elastra::scale
