#include "http/metrics.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace elastra::http {
namespace {

using proto::GenerationReason;
using proto::JobState;
using proto::WorkerState;

// Upper bounds (seconds) of the downtime histogram's buckets; +Inf follows.
constexpr std::array<double, 11> kDowntimeBuckets = {0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                                     2.5,  5,    10,  30,   60};

std::string Escape(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

class Writer {
 public:
  void Family(const std::string& name, const char* type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Sample(const std::string& name, const std::string& labels, double value) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + Number(value) + "\n";
  }
  void Gauge(const std::string& name, const std::string& help, double value) {
    Family(name, "gauge", help);
    Sample(name, "", value);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Label(const char* key, const std::string& value) {
  return std::string(key) + "=\"" + Escape(value) + "\"";
}

}  // namespace

std::string PrometheusMetrics(const proto::JobStatus& s) {
  Writer w;
  w.Family("elastra_job_state", "gauge", "1 for the state the job is in, 0 for the others");
  for (JobState st :
       {JobState::kForming, JobState::kRunning, JobState::kPausing, JobState::kBuilding,
        JobState::kRecovering, JobState::kFinished, JobState::kFailed,
        JobState::kWaitingForWorkers}) {
    w.Sample("elastra_job_state", Label("state", proto::ToString(st)), s.state == st ? 1 : 0);
  }
  w.Gauge("elastra_generation", "The committed generation", static_cast<double>(s.generation));
  w.Gauge("elastra_target_workers", "The size the job returns to: its start size or last resize",
          s.target_workers);
  w.Gauge("elastra_spares_target",
          "Standby workers the job keeps beyond its layout: --spares or the last resize's",
          s.spares_target);
  w.Gauge("elastra_current_workers", "Ranks in the committed generation", s.layout.world());
  w.Family("elastra_layout", "gauge", "The committed layout, one sample per dimension");
  w.Sample("elastra_layout", Label("dim", "dp"), s.layout.dp);
  w.Sample("elastra_layout", Label("dim", "pp"), s.layout.pp);
  w.Sample("elastra_layout", Label("dim", "tp"), s.layout.tp);
  w.Gauge("elastra_steps_applied", "The furthest step a member or finished worker reported",
          static_cast<double>(s.step));
  w.Gauge("elastra_resize_pending", "1 while an accepted resize or drain is not done",
          s.resize_pending ? 1 : 0);

  std::map<std::string, int> workers_by_state;
  for (WorkerState st : {WorkerState::kStandby, WorkerState::kMember, WorkerState::kLeaving,
                         WorkerState::kLost, WorkerState::kFinished}) {
    workers_by_state[proto::ToString(st)] = 0;
  }
  for (const auto& wk : s.workers) ++workers_by_state[proto::ToString(wk.state)];
  w.Family("elastra_workers", "gauge", "Workers the coordinator knows, by state");
  for (const auto& [state, n] : workers_by_state) {
    w.Sample("elastra_workers", Label("state", state), n);
  }

  // Downtime of each generation in the history, by the reason it formed.
  struct Histogram {
    std::array<uint64_t, kDowntimeBuckets.size()> buckets{};
    uint64_t count = 0;
    double sum = 0;
  };
  std::map<std::string, Histogram> downtime;
  for (GenerationReason r :
       {GenerationReason::kStart, GenerationReason::kResize, GenerationReason::kFailure,
        GenerationReason::kResume, GenerationReason::kDrain, GenerationReason::kRegrow}) {
    downtime[proto::ToString(r)];
  }
  for (const auto& g : s.history) {
    Histogram& h = downtime[proto::ToString(g.reason)];
    const double seconds = g.downtime_ms / 1000.0;
    for (size_t i = 0; i < kDowntimeBuckets.size(); ++i) {
      if (seconds <= kDowntimeBuckets[i]) ++h.buckets[i];
    }
    ++h.count;
    h.sum += seconds;
  }
  w.Family("elastra_reconfiguration_downtime_seconds", "histogram",
           "First worker paused to last worker ready, per generation formed, by reason");
  for (const auto& [reason, h] : downtime) {
    const std::string r = Label("reason", reason);
    for (size_t i = 0; i < kDowntimeBuckets.size(); ++i) {
      w.Sample("elastra_reconfiguration_downtime_seconds_bucket",
               r + "," + Label("le", Number(kDowntimeBuckets[i])),
               static_cast<double>(h.buckets[i]));
    }
    w.Sample("elastra_reconfiguration_downtime_seconds_bucket", r + ",le=\"+Inf\"",
             static_cast<double>(h.count));
    w.Sample("elastra_reconfiguration_downtime_seconds_sum", r, h.sum);
    w.Sample("elastra_reconfiguration_downtime_seconds_count", r, static_cast<double>(h.count));
  }

  // Failures by kind: workers and hosts lost, and the recoveries they caused.
  int hosts_lost = 0;
  for (const auto& h : s.hosts) hosts_lost += h.state == proto::HostState::kLost ? 1 : 0;
  int recoveries = 0;
  for (const auto& g : s.history) recoveries += g.reason == GenerationReason::kFailure ? 1 : 0;
  w.Family("elastra_failures", "gauge",
           "Failures the coordinator saw, by kind: workers lost, hosts lost, recovery generations");
  w.Sample("elastra_failures", Label("kind", "worker_lost"), workers_by_state["lost"]);
  w.Sample("elastra_failures", Label("kind", "host_lost"), hosts_lost);
  w.Sample("elastra_failures", Label("kind", "recovery"), recoveries);

  // Communicators of the generations formed: built, or kept from the generation before
  // (docs/recovery.md, "Rebuild only what changed").
  int64_t rebuilt = 0, kept = 0;
  for (const auto& g : s.history) {
    rebuilt += g.groups_rebuilt;
    kept += g.groups_kept;
  }
  w.Family("elastra_communicators", "gauge",
           "Communicators (world and dp, pp, tp groups) of the generations in the history: built "
           "by their change, or kept from the generation before");
  w.Sample("elastra_communicators", Label("fate", "rebuilt"), static_cast<double>(rebuilt));
  w.Sample("elastra_communicators", Label("fate", "kept"), static_cast<double>(kept));
  if (!s.history.empty()) {
    w.Family("elastra_last_generation_communicators", "gauge",
             "Communicators of the last generation formed: built, or kept");
    w.Sample("elastra_last_generation_communicators", Label("fate", "rebuilt"),
             s.history.back().groups_rebuilt);
    w.Sample("elastra_last_generation_communicators", Label("fate", "kept"),
             s.history.back().groups_kept);
  }

  w.Family("elastra_worker_heartbeat_age_seconds", "gauge",
           "Since the last heartbeat of each worker whose heartbeat is awaited");
  for (const auto& wk : s.workers) {
    if (wk.last_heartbeat_ms_ago < 0) continue;
    w.Sample("elastra_worker_heartbeat_age_seconds",
             Label("worker", wk.id) + "," + Label("host", wk.host),
             static_cast<double>(wk.last_heartbeat_ms_ago) / 1000.0);
  }
  // What the training loops reported (Worker::Report, ReportSamples).
  w.Family("elastra_training_samples_total", "counter",
           "Samples the job consumed (one count per data-parallel replica) since it started");
  w.Sample("elastra_training_samples_total", "", static_cast<double>(s.training.samples));
  w.Gauge("elastra_training_samples_per_second", "Samples per second over the last second or so",
          s.training.samples_per_second);
  w.Gauge("elastra_goodput",
          "Time the job spent running (training) over the time since the coordinator started",
          s.training.goodput);
  w.Family("elastra_training_metric", "gauge",
           "The latest value of each number the training loop reported (Worker::Report)");
  for (const auto& m : s.training.metrics) {
    w.Sample("elastra_training_metric", Label("name", m.name), m.value);
  }
  w.Gauge("elastra_malformed_frames", "Frames the coordinator could not decode",
          static_cast<double>(s.malformed_frames));
  w.Gauge("elastra_stale_messages", "Messages of an older generation the coordinator dropped",
          static_cast<double>(s.stale_messages));
  return w.Take();
}

JournalEventMetrics::JournalEventMetrics() {
  for (const char* type : {"generation", "worker_lost", "host_lost", "resize_accepted",
                           "resize_refused", "resize_end", "checkpoint", "job_end",
                           "waiting_for_workers"}) {
    counts_[type] = 0;
  }
}

void JournalEventMetrics::Add(const JobEvent& e) {
  ++counts_[e.type];
  if (e.type != "checkpoint" && e.type != "generation") return;
  const auto data = nlohmann::json::parse(e.data, nullptr, /*allow_exceptions=*/false);
  if (!data.is_object()) return;
  if (e.type == "checkpoint") {
    checkpoint_step_ = data.value("step", int64_t{-1});
    checkpoint_bytes_ = data.contains("bytes") ? data.value("bytes", int64_t{-1}) : -1;
    if (checkpoint_bytes_ > 0) checkpoint_bytes_total_ += checkpoint_bytes_;
    checkpoint_seconds_ = data.contains("seconds") ? data.value("seconds", -1.0) : -1;
  } else {
    rolled_back_steps_ += std::max<int64_t>(0, data.value("rolled_back_steps", int64_t{0}));
  }
}

std::string JournalEventMetrics::Text() const {
  Writer w;
  w.Family("elastra_events_total", "counter",
           "The job's events since it started, by type (GET /v1/events)");
  for (const auto& [type, n] : counts_) {
    w.Sample("elastra_events_total", Label("type", type), static_cast<double>(n));
  }
  w.Gauge("elastra_last_checkpoint_step", "The step of the newest committed checkpoint (-1: none)",
          static_cast<double>(checkpoint_step_));
  w.Gauge("elastra_checkpoint_bytes",
          "Bytes the ranks wrote for the newest committed checkpoint (-1: none or not known)",
          static_cast<double>(checkpoint_bytes_));
  w.Gauge("elastra_checkpoint_save_seconds",
          "Save time of the newest committed checkpoint: from the snapshot's start to the last "
          "rank's shard durable, plus the commit (-1: none or not known)",
          checkpoint_seconds_);
  w.Family("elastra_checkpoint_bytes_total", "counter",
           "Bytes the ranks wrote for every committed checkpoint since the job started");
  w.Sample("elastra_checkpoint_bytes_total", "", static_cast<double>(checkpoint_bytes_total_));
  w.Family("elastra_rolled_back_steps_total", "counter",
           "Steps trained again after failures: per recovery, the furthest step a survivor had "
           "reached minus the step restored");
  w.Sample("elastra_rolled_back_steps_total", "", static_cast<double>(rolled_back_steps_));
  return w.Take();
}

}  // namespace elastra::http
