#include "coordinator/training_metrics.h"

#include <algorithm>
#include <cmath>

namespace elastra::coordinator {

using proto::JobState;
using proto::TrainingMetric;
using proto::WorkerState;

TrainingMetrics::TrainingMetrics(Clock* clock, const Membership* membership)
    : clock_(clock), membership_(membership), start_(clock->Now()), state_since_(start_) {}

double TrainingMetrics::Seconds(TimePoint t) const {
  return std::chrono::duration<double>(t - start_).count();
}

void TrainingMetrics::OnHeartbeat(const std::string& worker, const proto::Heartbeat& hb,
                                  const Layout& layout) {
  if (const WorkerInfo* w = membership_->Find(worker)) OnHeartbeat(*w, hb, layout);
}

void TrainingMetrics::OnHeartbeat(const WorkerInfo& worker, const proto::Heartbeat& hb,
                                  const Layout& layout) {
  const WorkerInfo* w = &worker;
  const uint32_t slot = w->slot;
  if (slot >= tallies_.size()) {
    tallies_.resize(static_cast<size_t>(slot) + 1);
    metrics_.resize(tallies_.size());
  }
  Tally& t = tallies_[slot];
  if (t.owner != OwnerOf(*w)) {  // the slot's first report, or a new worker's
    t = Tally{OwnerOf(*w)};
    metrics_[slot].clear();
  }
  if (!hb.metrics.empty() || t.has_metrics) {  // the latest heartbeat's numbers replace the last
    std::vector<TrainingMetric>& kept = metrics_[slot];
    kept.clear();
    for (const TrainingMetric& m : hb.metrics) {
      if (kept.size() >= proto::kMaxTrainingMetrics) break;
      if (!proto::IsValidMetricName(m.name) || !std::isfinite(m.value)) continue;
      if (std::any_of(kept.begin(), kept.end(),
                      [&](const TrainingMetric& k) { return k.name == m.name; })) {
        continue;
      }
      kept.push_back(m);
    }
    t.has_metrics = !kept.empty();
  }
  const int64_t total = std::max<int64_t>(0, hb.samples);
  const int64_t grown = total >= t.samples ? total - t.samples : total;
  t.samples = total;
  const bool counted =
      w->state == WorkerState::kMember && w->rank >= 0 && w->rank < layout.world() && [&] {
        const Coordinates c = CoordinatesOf(layout, w->rank);
        return c.pp_rank == 0 && c.tp_rank == 0;
      }();
  if (!counted) return;
  samples_ += grown;
  MaybeAddPoint(hb.step);
}

void TrainingMetrics::MaybeAddPoint(int64_t step) {
  const TimePoint now = clock_->Now();
  if (!have_point_) {
    // The first report is the base of the first rate.
    have_point_ = true;
    last_point_time_ = now;
    last_point_samples_ = samples_;
    return;
  }
  if (now - last_point_time_ < kPointInterval) return;
  proto::TrainingPoint p;
  p.step = step;
  p.seconds = Seconds(now);
  p.samples_per_second = static_cast<double>(samples_ - last_point_samples_) /
                         std::chrono::duration<double>(now - last_point_time_).count();
  p.metrics = JobMetrics();
  series_.push_back(std::move(p));
  if (series_.size() > kMaxPoints) series_.pop_front();
  last_point_time_ = now;
  last_point_samples_ = samples_;
}

void TrainingMetrics::ObserveState(JobState state) {
  const TimePoint now = clock_->Now();
  if (state_ == JobState::kRunning) {
    running_ += std::chrono::duration_cast<Duration>(now - state_since_);
  }
  state_ = state;
  state_since_ = now;
}

std::vector<TrainingMetric> TrainingMetrics::JobMetrics() const {
  std::map<std::string, std::pair<int, TrainingMetric>> best;  // name -> (rank, metric)
  for (size_t slot = 0; slot < metrics_.size(); ++slot) {
    if (!tallies_[slot].has_metrics) continue;
    const WorkerInfo* w = membership_->AtSlot(static_cast<uint32_t>(slot));
    if (w == nullptr || tallies_[slot].owner != OwnerOf(*w)) continue;  // a removed worker's
    if (w->state != WorkerState::kMember || w->rank < 0) continue;
    for (const TrainingMetric& m : metrics_[slot]) {
      auto it = best.find(m.name);
      if (it == best.end() || w->rank < it->second.first) best[m.name] = {w->rank, m};
    }
  }
  std::vector<TrainingMetric> out;
  for (auto& [name, ranked] : best) out.push_back(ranked.second);
  return out;
}

proto::TrainingStatus TrainingMetrics::Snapshot() const {
  proto::TrainingStatus s;
  const TimePoint now = clock_->Now();
  s.samples = samples_;
  // The newest point's rate, unless the samples stopped coming since (a pause, the job's end).
  if (!series_.empty() && now - last_point_time_ < 3 * kPointInterval) {
    s.samples_per_second = series_.back().samples_per_second;
  }
  Duration running = running_;
  if (state_ == JobState::kRunning) {
    running += std::chrono::duration_cast<Duration>(now - state_since_);
  }
  s.running_seconds = std::chrono::duration<double>(running).count();
  s.wall_seconds = Seconds(now);
  s.goodput = s.wall_seconds > 0 ? s.running_seconds / s.wall_seconds : 0;
  s.metrics = JobMetrics();
  s.series.assign(series_.begin(), series_.end());
  return s;
}

}  // namespace elastra::coordinator
