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
#include "protocol/messages.h"
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
  // Starts loading the tally of the worker in `slot`, for its heartbeat soon
  // (CoordinatorCore::PrefetchAhead).
  void Prefetch(uint32_t slot) const {
    if (slot < tallies_.size()) __builtin_prefetch(&tallies_[slot]);
  }
  // The job's state after every message or tick: the time spent running adds up from here.
  void ObserveState(proto::JobState state);

  proto::TrainingStatus Snapshot() const;

 private:
  // What the worker in one slot (WorkerInfo::slot) reported last: 16 bytes a worker (256 KB at
  // 16,384), the only entry a heartbeat without metrics reads; its metrics are apart.
  struct Tally {
    uint32_t owner = 0;  // OwnerOf its worker; 0: nobody reported in this slot yet
    bool has_metrics = false;
    int64_t samples = 0;  // the last running total seen
  };
  // Tells the workers that held one slot apart: their join orders (unique to each worker), plus 1,
  // to 32 bits (a slot would have to see 2^32 joins to take one worker for another).
  static uint32_t OwnerOf(const WorkerInfo& w) { return static_cast<uint32_t>(w.join_order + 1); }

  // The job's value of each name now: the lowest-ranked member's.
  std::vector<proto::TrainingMetric> JobMetrics() const;
  void MaybeAddPoint(int64_t step);
  double Seconds(TimePoint t) const;

  Clock* clock_;
  const Membership* membership_;
  TimePoint start_;
  // By the worker's slot: O(1) per heartbeat, no hashing. An entry whose owner is not the slot's
  // worker's any more is a removed worker's, replaced when the slot reports again.
  std::vector<Tally> tallies_;
  std::vector<std::vector<proto::TrainingMetric>> metrics_;  // by slot: the latest kept
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
