#include "coordinator/reconfiguration.h"

#include <algorithm>

namespace elastra::coordinator {
namespace {

double Ms(TimePoint from, TimePoint to) {
  if (to <= from) return 0;
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kIdle: return "idle";
    case Phase::kPausing: return "pausing";
    case Phase::kRecovering: return "recovering";
    case Phase::kBuilding: return "building";
  }
  return "unknown";
}

void Reconfiguration::BeginPause(uint64_t target, std::vector<std::string> participants) {
  Reset();
  phase_ = Phase::kPausing;
  target_ = target;
  participants_ = std::move(participants);
  participant_set_.insert(participants_.begin(), participants_.end());
  requested_ = clock_->Now();
}

void Reconfiguration::BeginRecover(uint64_t target, std::vector<std::string> participants,
                                   TimePoint deadline) {
  Reset();
  phase_ = Phase::kRecovering;
  target_ = target;
  participants_ = std::move(participants);
  participant_set_.insert(participants_.begin(), participants_.end());
  requested_ = clock_->Now();
  deadline_ = deadline;
  recovering_ = true;
}

void Reconfiguration::BeginBuild(GenerationPlan plan) {
  phase_ = Phase::kBuilding;
  target_ = plan.generation;
  plan_ = std::move(plan);
  plan_members_.clear();
  plan_members_.insert(plan_.members.begin(), plan_.members.end());
  ready_.clear();
}

void Reconfiguration::Reset() {
  phase_ = Phase::kIdle;
  target_ = 0;
  participants_.clear();
  participant_set_.clear();
  paused_.clear();
  ready_.clear();
  plan_ = GenerationPlan();
  plan_members_.clear();
  any_paused_ = false;
  recovering_ = false;
  requested_ = first_paused_ = last_paused_ = last_ready_ = TimePoint{};
}

Status Reconfiguration::RecordPaused(const std::string& id, const proto::PausedReport& report) {
  if ((phase_ != Phase::kPausing && phase_ != Phase::kRecovering) ||
      report.target_generation != target_) {
    return StaleGenerationError("paused report for generation " +
                                std::to_string(report.target_generation) + " is not in flight");
  }
  if (!IsParticipant(id)) return NotFoundError(id + " was not asked to pause");
  const TimePoint now = clock_->Now();
  if (!any_paused_) {
    first_paused_ = now;
    any_paused_ = true;
  }
  last_paused_ = now;
  paused_[id] = report;
  return OkStatus();
}

Status Reconfiguration::RecordReady(const std::string& id, const proto::GenerationReady& ready) {
  if (phase_ != Phase::kBuilding || ready.generation != plan_.generation) {
    return StaleGenerationError("generation " + std::to_string(ready.generation) +
                                " is not being built");
  }
  if (!plan_members_.count(id)) {
    return NotFoundError(id + " is not a member of generation " +
                         std::to_string(plan_.generation));
  }
  ready_[id] = ready;
  last_ready_ = clock_->Now();
  return OkStatus();
}

bool Reconfiguration::AllPaused() const { return paused_.size() == participant_set_.size(); }

bool Reconfiguration::AllReady() const {
  return phase_ == Phase::kBuilding && ready_.size() == plan_members_.size();
}

std::vector<std::string> Reconfiguration::Answered() const {
  std::vector<std::string> out;
  for (const auto& id : participants_) {
    if (paused_.count(id)) out.push_back(id);
  }
  return out;
}

std::vector<std::string> Reconfiguration::Unanswered() const {
  std::vector<std::string> out;
  for (const auto& id : participants_) {
    if (!paused_.count(id)) out.push_back(id);
  }
  return out;
}

bool Reconfiguration::IsParticipant(const std::string& id) const {
  return participant_set_.count(id) > 0;
}

void Reconfiguration::DropParticipant(const std::string& id) {
  if (!participant_set_.erase(id)) return;
  participants_.erase(std::remove(participants_.begin(), participants_.end(), id),
                      participants_.end());
  paused_.erase(id);
}

StatusOr<int64_t> Reconfiguration::AgreedStep() const {
  if (participants_.empty()) return AbortedError("nobody paused");
  int64_t step = -1;
  bool first = true;
  for (const auto& id : participants_) {
    auto it = paused_.find(id);
    if (it == paused_.end()) return AbortedError(id + " has not paused");
    if (it->second.failed) return AbortedError(id + " reported a failure while pausing");
    if (first) {
      step = it->second.step;
      first = false;
    } else if (it->second.step != step) {
      return AbortedError("workers paused at different steps (" + std::to_string(step) + " and " +
                          std::to_string(it->second.step) + ")");
    }
  }
  return step;
}

StatusOr<RecoveryPlan> Reconfiguration::PlanRecovery(
    const std::unordered_set<std::string>& off_layout) const {
  RecoveryPlan plan;
  std::set<int64_t> common;
  bool first = true;
  for (const auto& id : participants_) {
    auto it = paused_.find(id);
    if (it == paused_.end()) continue;
    plan.reached_step = std::max(plan.reached_step, it->second.step);
    const auto& commits = it->second.commit_steps;
    if (commits.empty() || off_layout.count(id) > 0) {
      plan.without_state.push_back(id);
      continue;
    }
    plan.with_state.push_back(id);
    std::set<int64_t> mine(commits.begin(), commits.end());
    if (first) {
      common = std::move(mine);
      first = false;
    } else {
      std::set<int64_t> both;
      std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                            std::inserter(both, both.begin()));
      common = std::move(both);
    }
  }
  if (plan.with_state.empty()) return AbortedError("no survivor holds a commit of the state");
  if (common.empty()) return AbortedError("the survivors hold no commit of the same step");
  plan.restore_step = *common.rbegin();
  return plan;
}

ReconfigurationTimings Reconfiguration::Timings() const {
  ReconfigurationTimings t;
  if (recovering_) {
    // After a failure training stopped when the failure was detected, not when a survivor
    // answered: count from the recovery's start.
    t.downtime_ms = Ms(requested_, last_ready_);
    t.agreement_ms = Ms(requested_, last_paused_);
  } else if (any_paused_) {
    t.downtime_ms = Ms(first_paused_, last_ready_);
    t.agreement_ms = Ms(requested_, last_paused_);
  }
  for (const auto& [id, r] : ready_) {
    t.rebuild_ms = std::max(t.rebuild_ms, r.rebuild_ms);
    t.transfer_ms = std::max(t.transfer_ms, r.transfer_ms);
  }
  return t;
}

}  // namespace elastra::coordinator
