#include "coordinator/reconfiguration.h"

#include <algorithm>
#include <iterator>
#include <set>

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
  participant_index_.Build(&participants_);
  answers_.assign(participants_.size(), kAwaited);
  paused_.resize(participants_.size());
  commit_steps_.reserve(2 * participants_.size());  // a report holds one or two commits
  live_ = participants_.size();
  requested_ = clock_->Now();
}

void Reconfiguration::BeginRecover(uint64_t target, std::vector<std::string> participants,
                                   TimePoint deadline) {
  BeginPause(target, std::move(participants));
  phase_ = Phase::kRecovering;
  deadline_ = deadline;
  recovering_ = true;
}

void Reconfiguration::BeginBuild(GenerationPlan plan) {
  phase_ = Phase::kBuilding;
  target_ = plan.generation;
  member_index_.Clear();
  plan_ = std::move(plan);
  member_index_.Build(&plan_.members);
  ready_.assign(plan_.members.size(), false);
  ready_ms_.assign(plan_.members.size(), {0.0, 0.0});
  ready_bytes_.assign(plan_.members.size(), 0);
  ready_count_ = 0;
}

GenerationPlan Reconfiguration::TakePlan() {
  member_index_.Clear();  // it indexes plan_.members
  return std::exchange(plan_, GenerationPlan());
}

void Reconfiguration::Reset() {
  phase_ = Phase::kIdle;
  target_ = 0;
  participant_index_.Clear();
  participants_.clear();
  answers_.clear();
  paused_.clear();
  commit_steps_.clear();
  groups_.clear();
  answered_ = live_ = 0;
  member_index_.Clear();
  plan_ = GenerationPlan();
  ready_.clear();
  ready_ms_.clear();
  ready_bytes_.clear();
  ready_count_ = 0;
  any_paused_ = false;
  recovering_ = false;
  requested_ = first_paused_ = last_paused_ = last_ready_ = TimePoint{};
}

size_t Reconfiguration::ParticipantIndex(const std::string& id, size_t hint) const {
  const size_t i = participant_index_.Find(id, hint);
  if (i == IdIndex::kNone || answers_[i] == kDropped) return IdIndex::kNone;
  return i;
}

Status Reconfiguration::RecordPaused(const std::string& id, const proto::PausedReport& report,
                                     size_t hint) {
  if ((phase_ != Phase::kPausing && phase_ != Phase::kRecovering) ||
      report.target_generation != target_) {
    return StaleGenerationError("paused report for generation " +
                                std::to_string(report.target_generation) + " is not in flight");
  }
  const size_t i = ParticipantIndex(id, hint);
  if (i == IdIndex::kNone) return NotFoundError(id + " was not asked to pause");
  const TimePoint now = clock_->Now();
  if (!any_paused_) {
    first_paused_ = now;
    any_paused_ = true;
  }
  last_paused_ = now;
  if (answers_[i] == kAwaited) {
    answers_[i] = kAnswered;
    ++answered_;
  }
  // At most one group of each kind counts (a worker has three).
  const size_t groups = std::min<size_t>(report.groups.size(), 3);
  paused_[i] = Report{report.step,
                      static_cast<uint32_t>(commit_steps_.size()),
                      static_cast<uint32_t>(report.commit_steps.size()),
                      static_cast<uint32_t>(groups_.size()),
                      static_cast<uint8_t>(groups),
                      report.failed};
  commit_steps_.insert(commit_steps_.end(), report.commit_steps.begin(),
                       report.commit_steps.end());
  groups_.insert(groups_.end(), report.groups.begin(), report.groups.begin() + groups);
  return OkStatus();
}

const proto::GroupHealth* Reconfiguration::GroupHealthOf(const std::string& id, size_t hint,
                                                         uint8_t kind) const {
  const size_t i = ParticipantIndex(id, hint);
  if (i == IdIndex::kNone || answers_[i] != kAnswered) return nullptr;
  const Report& r = paused_[i];
  for (size_t g = r.groups_at; g < r.groups_at + r.groups; ++g) {
    if (groups_[g].kind == kind) return &groups_[g];
  }
  return nullptr;
}

Status Reconfiguration::RecordReady(const std::string& id, const proto::GenerationReady& ready,
                                    size_t hint) {
  if (phase_ != Phase::kBuilding || ready.generation != plan_.generation) {
    return StaleGenerationError("generation " + std::to_string(ready.generation) +
                                " is not being built");
  }
  const size_t i = member_index_.Find(id, hint);
  if (i == IdIndex::kNone) {
    return NotFoundError(id + " is not a member of generation " +
                         std::to_string(plan_.generation));
  }
  if (!ready_[i]) {
    ready_[i] = true;
    ++ready_count_;
  }
  ready_ms_[i] = {ready.rebuild_ms, ready.transfer_ms};
  ready_bytes_[i] = std::max<int64_t>(0, ready.bytes_received);
  last_ready_ = clock_->Now();
  return OkStatus();
}

void Reconfiguration::Prefetch(size_t hint) const {
  auto fetch = [hint](const auto& v) {
    if (hint < v.size()) __builtin_prefetch(&v[hint]);
  };
  if (phase_ == Phase::kPausing || phase_ == Phase::kRecovering) {
    fetch(participants_);
    fetch(answers_);
    fetch(paused_);
  } else if (phase_ == Phase::kBuilding) {
    fetch(plan_.members);
    fetch(ready_ms_);
  }
}

bool Reconfiguration::AllPaused() const { return answered_ == live_; }

bool Reconfiguration::AllReady() const {
  return phase_ == Phase::kBuilding && ready_count_ == plan_.members.size();
}

bool Reconfiguration::IsReady(const std::string& id) const {
  const size_t i = member_index_.Find(id);
  return i != IdIndex::kNone && ready_[i];
}

bool Reconfiguration::HasAnswered(const std::string& id) const {
  const size_t i = ParticipantIndex(id);
  return i != IdIndex::kNone && answers_[i] == kAnswered;
}

std::vector<std::string> Reconfiguration::Answered() const {
  std::vector<std::string> out;
  out.reserve(answered_);
  for (size_t i = 0; i < participants_.size(); ++i) {
    if (answers_[i] == kAnswered) out.push_back(participants_[i]);
  }
  return out;
}

std::vector<std::string> Reconfiguration::Unanswered() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < participants_.size(); ++i) {
    if (answers_[i] == kAwaited) out.push_back(participants_[i]);
  }
  return out;
}

bool Reconfiguration::IsParticipant(const std::string& id) const {
  return ParticipantIndex(id) != IdIndex::kNone;
}

void Reconfiguration::DropParticipant(const std::string& id) {
  const size_t i = ParticipantIndex(id);
  if (i == IdIndex::kNone) return;
  if (answers_[i] == kAnswered) {
    --answered_;
    paused_[i] = Report();
  }
  answers_[i] = kDropped;
  --live_;
}

StatusOr<int64_t> Reconfiguration::AgreedStep() const {
  if (live_ == 0) return AbortedError("nobody paused");
  int64_t step = -1;
  bool first = true;
  for (size_t i = 0; i < participants_.size(); ++i) {
    if (answers_[i] == kDropped) continue;
    const std::string& id = participants_[i];
    if (answers_[i] != kAnswered) return AbortedError(id + " has not paused");
    const Report& report = paused_[i];
    if (report.failed) return AbortedError(id + " reported a failure while pausing");
    if (first) {
      step = report.step;
      first = false;
    } else if (report.step != step) {
      return AbortedError("workers paused at different steps (" + std::to_string(step) + " and " +
                          std::to_string(report.step) + ")");
    }
  }
  return step;
}

StatusOr<RecoveryPlan> Reconfiguration::PlanRecovery(
    const std::unordered_set<std::string>& off_layout) const {
  RecoveryPlan plan;
  std::set<int64_t> common;
  bool first = true;
  for (size_t i = 0; i < participants_.size(); ++i) {
    if (answers_[i] != kAnswered) continue;
    const std::string& id = participants_[i];
    plan.reached_step = std::max(plan.reached_step, paused_[i].step);
    const int64_t* commits = commit_steps_.data() + paused_[i].commits_at;
    if (paused_[i].commits == 0 || off_layout.count(id) > 0) {
      plan.without_state.push_back(id);
      continue;
    }
    plan.with_state.push_back(id);
    std::set<int64_t> mine(commits, commits + paused_[i].commits);
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
  for (size_t i = 0; i < ready_.size(); ++i) {
    if (!ready_[i]) continue;
    t.rebuild_ms = std::max(t.rebuild_ms, ready_ms_[i].first);
    t.transfer_ms = std::max(t.transfer_ms, ready_ms_[i].second);
    t.bytes_moved += ready_bytes_[i];
  }
  t.groups_rebuilt = plan_.groups_rebuilt;
  t.groups_kept = plan_.groups_kept;
  return t;
}

}  // namespace elastra::coordinator
