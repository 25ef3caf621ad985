// TrainingMetrics: what the training loops report (Worker::Report, ReportSamples), carried by the
// workers' heartbeats, summed up for the job: samples consumed and their rate, the latest value of
// each named number, goodput (time running over time since the coordinator started), and a
// bounded series of them over steps for the dashboard. Time comes from the injected Clock, so the
// test steps it. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/id_map.h"
#include "common/messages.h"
#include "coordinator/membership.h"

namespace elastra::coordinator {

class TrainingMetrics {
 public:
  static constexpr size_t kMaxPoints = 600;  // the series keeps the newest this many points
  // A point joins the series at most this often, and samples/s is the rate over about this long.
  static constexpr Duration kPointInterval{1000};

  // Not owned; both outlive this.
  TrainingMetrics(Clock* clock, const Membership* membership);
  TrainingMetrics(const TrainingMetrics&) = delete;
  TrainingMetrics& operator=(const TrainingMetrics&) = delete;

  // A heartbeat of `worker`, a member of the committed `layout` (or standby: its numbers are kept,
  // its samples counted only while it is a member). Samples count when the worker is pipeline
  // stage 0 and tensor rank 0 of its replica, as the growth of its running total (a total that
  // went down is a restarted process: counted from there). Metrics with an invalid name or a value
  // that is not finite are dropped; at most kMaxTrainingMetrics per worker are kept.
  void OnHeartbeat(const std::string& worker, const proto::Heartbeat& hb, const Layout& layout);
  // The same for a worker already looked up (the coordinator's heartbeat handler's).
  void OnHeartbeat(const WorkerInfo& w, const proto::Heartbeat& hb, const Layout& layout);
  // The job's state after every message or tick: the time spent running adds up from here.
  void ObserveState(proto::JobState state);

  proto::TrainingStatus Snapshot() const;

 private:
  struct Reported {
    std::string id;       // the worker's
    int64_t samples = 0;  // the last running total seen
    std::vector<proto::TrainingMetric> metrics;
  };

  // The job's value of each name now: the lowest-ranked member's.
  std::vector<proto::TrainingMetric> JobMetrics() const;
  void MaybeAddPoint(int64_t step);
  double Seconds(TimePoint t) const;

  Clock* clock_;
  const Membership* membership_;
  TimePoint start_;
  IdMap<Reported> reported_;  // by worker id: O(1) per heartbeat, a flat table (common/id_map.h)
  int64_t samples_ = 0;
  // Time running: the state now, and since when it is being integrated.
  proto::JobState state_ = proto::JobState::kForming;
  TimePoint state_since_;
  Duration running_{0};
  // The series, and the samples at the last point (the rate's base).
  std::deque<proto::TrainingPoint> series_;
  TimePoint last_point_time_{};
  int64_t last_point_samples_ = 0;
  bool have_point_ = false;
};

}  // namespace elastra::coordinator
