// GenerationManager's recovery path (see generation_manager.h): workers lost, the survivors
// paused at once with what they hold, and the recovery generation formed from their commits.
// The planned path and the build and commit of a generation are in generation_manager.cc.
#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>
#include <utility>

#include "common/id_index.h"
#include "common/logging.h"
#include "coordinator/generation_manager.h"

namespace elastra::coordinator {
namespace {

// The most hosts of each kind TakeReplacementHosts keeps.
constexpr size_t kMaxReplacementHosts = 16;

void Note(std::vector<std::string>* hosts, const std::string& host) {
  if (host.empty()) return;
  if (hosts->size() >= kMaxReplacementHosts) hosts->erase(hosts->begin());
  hosts->push_back(host);
}

}  // namespace

void GenerationManager::LoseWorkers(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<std::string> lost;
  for (const auto& id : ids) {
    WorkerInfo* w = membership_->Find(id);
    if (w == nullptr) continue;
    bool was_member = w->state == WorkerState::kMember;
    health_->Forget(w->slot);
    if (w->state == WorkerState::kLost) continue;
    LOG(WARNING) << "worker " << id << " lost: " << why;
    Note(&lost_hosts_, w->host);  // its replacement goes there first
    w->last_shutdown = clock_->Now();
    // If the process is in fact alive (stalled, partitioned), it is out of the job: tell it to
    // exit rather than let it wait on communicators its peers have abandoned.
    proto::Shutdown shutdown;
    shutdown.exit_code = 1;
    shutdown.reason = "declared lost: " + why;
    outbox_->Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    membership_->SetState(id, WorkerState::kLost);
    journal_->WorkerState(id, JournalWorkerState::kLost);
    if (reconf_.phase() == Phase::kRecovering && reconf_.IsParticipant(id)) {
      lost.push_back(id);
    } else if (was_member) {
      lost.push_back(id);
    }
  }
  if (lost.empty()) return;
  StartRecovery(lost, why);
}

void GenerationManager::StartRecovery(const std::vector<std::string>& lost,
                                      const std::string& why) {
  if (job_over()) return;
  for (const auto& listener : recovery_listeners_) listener();
  for (const auto& id : lost) {
    const WorkerInfo* w = membership_->Find(id);
    if (w == nullptr) continue;
    if (w->state != WorkerState::kLost) {
      membership_->SetState(id, WorkerState::kLost);
      journal_->WorkerState(id, JournalWorkerState::kLost);
    }
    health_->Forget(w->slot);
  }
  if (reconf_.phase() == Phase::kRecovering) {
    // Already recovering: the dead simply stop being awaited.
    for (const auto& id : lost) reconf_.DropParticipant(id);
    if (reconf_.AllPaused()) FinishRecovery();
    return;
  }
  // A change in flight is aborted. Leaving workers of an aborted shrink stay members.
  if (reconf_.phase() == Phase::kBuilding) {
    NoteBuiltWorkers();
    for (const auto& id : reconf_.plan().leaving) {
      WorkerInfo* w = membership_->Find(id);
      if (w != nullptr && w->state == WorkerState::kLeaving) {
        // It was told to leave and will exit; it holds no rank in what follows.
        membership_->Remove(id);
        journal_->WorkerState(id, JournalWorkerState::kLost);
      }
    }
  }
  const std::vector<const WorkerInfo*> infos = membership_->MemberInfos();  // no lookup by id
  if (infos.empty()) {
    FailJob("every member is lost (" + why + ")");
    return;
  }
  std::vector<std::string> survivors = IdsOf(infos);
  const uint64_t target = ++highest_generation_;
  journal_->ChangeBegun(target, ChangeKind::kRecover, survivors, infos);
  proto::RecoverRequest recover;
  recover.target_generation = target;
  recover.lost = lost;
  outbox_->PushAll(infos, proto::MessageType::kRecoverRequest, recover, generation_);
  reconf_.BeginRecover(target, std::move(survivors), clock_->Now() + options_->recover_timeout);
  recover_request_ = recover;
  LOG(WARNING) << "recovering into generation " << target << ": " << why;
}

void GenerationManager::FinishRecovery() {
  auto survivors = reconf_.Answered();
  auto standby = hosts_->UsableStandby();
  if (survivors.empty()) {
    FailJob("no member survived");
    return;
  }
  GenerationPlan plan;
  plan.generation = reconf_.target();
  plan.source_rank = 0;
  std::optional<RecoveryPlan> recovery;
  if (generation_ == 0) {
    // The first generation never committed: start again from rank 0's initial state.
    plan.members = survivors;
    plan.has_state.assign(survivors.size(), false);
    plan.has_state[0] = true;
    plan.restore_step = 0;
    plan.reason = proto::GenerationReason::kStart;
    plan.prev_layout = Layout{};
    plan.prev_members = {survivors[0]};
    plan.prev_has_state = {true};
  } else {
    auto planned = reconf_.PlanRecovery(off_layout_);
    if (!planned.ok()) {
      FailJob("cannot recover: " + planned.status().message());
      return;
    }
    recovery = std::move(planned).value();
    plan.members = recovery->with_state;
    plan.has_state.assign(plan.members.size(), true);
    for (const auto& id : recovery->without_state) {
      plan.members.push_back(id);
      plan.has_state.push_back(false);
    }
    plan.restore_step = recovery->restore_step;
    plan.reached_step = std::max(recovery->reached_step, recovery->restore_step);
    plan.reason = proto::GenerationReason::kFailure;
    plan.prev_layout = layout_;
    plan.prev_members = members_;
    IdIndex with_state;
    with_state.Build(&recovery->with_state);
    for (const auto& id : members_) {
      plan.prev_has_state.push_back(with_state.Find(id) != IdIndex::kNone);
    }
  }
  const size_t survivor_count = plan.members.size();
  // The survivors and the standby workers that may join them, up to `most` workers in all.
  std::vector<std::string> spares, everyone;
  auto take_standby = [&](size_t most) {
    spares.clear();
    for (const auto& id : standby) {
      if (plan.members.size() + spares.size() >= most) break;
      spares.push_back(id);
    }
    everyone = plan.members;
    everyone.insert(everyone.end(), spares.begin(), spares.end());
  };
  // A layout whose every rank fits its worker's memory. After a failure the model parallelism
  // stays: dp drops by the broken replicas, whose survivors become standbys (docs/recovery.md).
  // With spares kept, standbys beyond the target size stay standing unless only they make a
  // layout fit.
  const size_t most = static_cast<size_t>(options_->max_workers);
  const size_t wanted = std::min(most, RecoveryWorkers(survivor_count));
  take_standby(wanted);
  std::optional<Fit> fitting = FitWorkers(everyone, /*keep_model_parallel=*/generation_ != 0);
  if (!fitting && wanted < most && standby.size() > spares.size()) {
    take_standby(most);
    fitting = FitWorkers(everyone, /*keep_model_parallel=*/generation_ != 0);
  }
  std::vector<bool> held = plan.has_state;
  held.resize(everyone.size(), false);
  if (!fitting) {
    const auto budget = SmallestBudget(everyone);
    // The survivors hold their commits and wait (their decision timeout bounds it): the job goes
    // on when a join makes a layout fit (MaybeResumeWaitingRecovery).
    const Layout all = layouts_->Choose(HostNames(everyone), layout_);
    const std::string why = "no layout of the " + std::to_string(everyone.size()) +
                            " live workers fits their memory (" +
                            layouts_->CheckMemory(all, budget.first, budget.second).message() + ")";
    if (why != waiting_reason_) {  // journaled (an event) once each time the reason changes
      waiting_reason_ = why;
      journal_->Waiting(why);
      LOG(WARNING) << "recovery waits for workers: " << why;
    }
    return;
  }
  waiting_reason_.clear();
  plan.layout = fitting->layout;
  const std::vector<std::string>& usable = fitting->workers;
  const size_t world = static_cast<size_t>(plan.layout.world());
  std::vector<std::string> chosen;
  // With every member of the committed layout still holding its part, the rank assignment keeps
  // it in place by itself; with members lost, it cannot place the rest: whole replicas are kept.
  if (recovery && recovery->with_state.size() < members_.size() &&
      plan.layout.pp == layout_.pp && plan.layout.tp == layout_.tp &&
      layout_.pp * layout_.tp > 1) {
    chosen = RecoveryMembers(plan.layout, *recovery, spares, usable);
  }
  if (chosen.empty()) {
    if (plan.layout.tp > 1 || world < usable.size()) {
      // Tensor-parallel groups inside hosts where they fit; each worker keeps what it holds.
      chosen = layouts_->Assign(plan.layout, usable, HostNames(usable), layout_, members_);
    } else {
      chosen = usable;
    }
  }
  IdIndex everyone_index;
  everyone_index.Build(&everyone);
  plan.members = std::move(chosen);
  plan.has_state.clear();
  std::vector<bool> used(everyone.size(), false);
  for (const auto& id : plan.members) {
    const size_t i = everyone_index.Find(id);
    plan.has_state.push_back(i != IdIndex::kNone && held[i]);
    if (i != IdIndex::kNone) used[i] = true;
  }
  // Survivors the layout leaves out stay in the job as standbys; unused standbys stay as they are.
  for (size_t i = 0; i < survivor_count; ++i) {
    if (used[i]) continue;
    plan.leaving.push_back(everyone[i]);
    plan.standby.push_back(everyone[i]);
  }
  NoteGroupHosts(plan.layout, plan.members, spares);
  if (!plan.standby.empty()) {
    LOG(INFO) << "recovery: " << plan.layout.ToString() << " leaves " << plan.standby.size()
              << " survivor(s) standby";
  }
  if (generation_ == 0) {
    // Re-forming the first generation: the new rank 0 broadcasts its initial state.
    plan.has_state.assign(plan.members.size(), false);
    plan.has_state[0] = true;
    plan.prev_members = {plan.members[0]};
  }
  const auto source = std::find(plan.has_state.begin(), plan.has_state.end(), true);
  plan.source_rank =
      source == plan.has_state.end() ? 0 : static_cast<int32_t>(source - plan.has_state.begin());
  StartBuild(std::move(plan));
}

void GenerationManager::NoteGroupHosts(const Layout& layout,
                                       const std::vector<std::string>& members,
                                       const std::vector<std::string>& standbys) {
  if (standbys.empty() || layout.tp <= 1) return;
  const std::unordered_set<std::string> taken(standbys.begin(), standbys.end());
  for (size_t r = 0; r < members.size(); ++r) {
    if (taken.count(members[r]) == 0) continue;
    // TP is innermost: the group is the tp ranks from r - tp_rank on.
    const size_t begin =
        r - static_cast<size_t>(CoordinatesOf(layout, static_cast<int>(r)).tp_rank);
    std::map<std::string, int> count;
    std::string best;
    int most = 0;
    for (size_t q = begin; q < begin + static_cast<size_t>(layout.tp) && q < members.size(); ++q) {
      const WorkerInfo* w = q == r ? nullptr : membership_->Find(members[q]);
      if (w == nullptr || w->host.empty()) continue;
      if (++count[w->host] > most) {
        most = count[w->host];
        best = w->host;
      }
    }
    Note(&group_hosts_, best);
  }
}

std::vector<std::string> GenerationManager::TakeReplacementHosts() {
  std::vector<std::string> hosts = std::move(lost_hosts_);
  hosts.insert(hosts.end(), group_hosts_.begin(), group_hosts_.end());
  lost_hosts_.clear();
  group_hosts_.clear();
  return hosts;
}

size_t GenerationManager::RecoveryWorkers(size_t survivors) const {
  const size_t most = static_cast<size_t>(options_->max_workers);
  if (!targets_) return most;
  const JobTargets targets = targets_();
  if (targets.spares <= 0) return most;
  return std::max(survivors, static_cast<size_t>(std::max(targets.workers, 0)));
}

std::optional<GenerationManager::Fit> GenerationManager::FitWorkers(
    const std::vector<std::string>& candidates, bool keep_model_parallel, size_t most) const {
  // The distinct budgets, smallest first (0, unlimited, counts as the largest).
  std::vector<int64_t> budgets;
  budgets.reserve(candidates.size());
  for (const auto& id : candidates) budgets.push_back(BudgetOf(id));
  std::vector<int64_t> thresholds = budgets;
  std::sort(thresholds.begin(), thresholds.end());
  thresholds.erase(std::unique(thresholds.begin(), thresholds.end()), thresholds.end());
  std::optional<Fit> best;
  for (const int64_t threshold : thresholds) {
    Fit fit;
    int64_t smallest = INT64_MAX;  // of the workers taken: `threshold` unless `most` cut it off
    for (size_t i = 0; i < candidates.size() && fit.workers.size() < most; ++i) {
      if (budgets[i] < threshold) continue;
      fit.workers.push_back(candidates[i]);
      smallest = std::min(smallest, budgets[i]);
    }
    const std::optional<Layout> layout = layouts_->ChooseFitting(
        HostNames(fit.workers), smallest == INT64_MAX ? 0 : smallest, layout_, keep_model_parallel);
    if (!layout || (best && layout->world() <= best->layout.world())) continue;
    fit.layout = *layout;
    fit.budget = threshold;
    best = std::move(fit);
  }
  return best;
}

void GenerationManager::MaybeResumeWaitingRecovery() {
  if (waiting_reason_.empty() || job_over()) return;
  if (reconf_.phase() != Phase::kRecovering || !reconf_.AllPaused()) return;
  FinishRecovery();
}

std::pair<int64_t, std::string> GenerationManager::SmallestBudget(
    const std::vector<std::string>& ids) const {
  std::pair<int64_t, std::string> smallest{0, ""};
  for (const auto& id : ids) {
    const WorkerInfo* w = membership_->Find(id);
    if (w == nullptr || w->memory_bytes <= 0) continue;
    if (smallest.first == 0 || w->memory_bytes < smallest.first) smallest = {w->memory_bytes, id};
  }
  return smallest;
}

std::vector<std::string> GenerationManager::ChangeWorkers(
    const std::vector<std::string>& candidates, size_t staying, size_t want, Layout* layout,
    std::unordered_set<std::string>* short_of_memory) const {
  std::vector<int64_t> budgets;
  budgets.reserve(candidates.size());
  for (const auto& id : candidates) budgets.push_back(BudgetOf(id));
  std::optional<int64_t> threshold;  // the memory each worker taken has
  if (pause_goal_.has_layout && static_cast<size_t>(pause_goal_.layout.world()) == want) {
    const int64_t need = layouts_->NeedBytes(pause_goal_.layout);
    const size_t enough = static_cast<size_t>(
        std::count_if(budgets.begin(), budgets.end(), [need](int64_t b) { return b >= need; }));
    if (enough >= want) {
      *layout = pause_goal_.layout;
      threshold = need;
    }
  }
  if (!threshold) {
    const bool regrow = pause_goal_.reason == proto::GenerationReason::kRegrow;
    std::optional<Fit> fit = FitWorkers(candidates, /*keep_model_parallel=*/regrow, want);
    if (fit) {
      *layout = fit->layout;
      threshold = fit->budget;
    } else {
      LOG(WARNING) << "no layout of " << want << " workers fits their memory; keeping "
                   << layout_.ToString();
      *layout = layout_;
      threshold = INT64_MIN;
    }
  }
  std::vector<std::string> pool;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (budgets[i] < *threshold) {
      if (i < staying) short_of_memory->insert(candidates[i]);
      continue;
    }
    if (i >= staying && pool.size() >= want) break;
    pool.push_back(candidates[i]);
  }
  return pool;
}

int64_t GenerationManager::BudgetOf(const std::string& id) const {
  const WorkerInfo* w = membership_->Find(id);
  return w == nullptr || w->memory_bytes <= 0 ? INT64_MAX : w->memory_bytes;
}

Status GenerationManager::CheckEnoughFit(const Layout& layout, size_t workers,
                                         const std::vector<std::string>& ids) const {
  const int64_t need = layouts_->NeedBytes(layout);
  size_t enough = 0;
  std::pair<int64_t, std::string> short_of{0, ""};  // the most memory short of `need`, whose
  for (const auto& id : ids) {
    const int64_t budget = BudgetOf(id);
    if (budget >= need) {
      ++enough;
    } else if (short_of.second.empty() || budget > short_of.first) {
      short_of = {budget, id};
    }
  }
  // Workers beyond the live ones are still to start or join: their memory is checked as they do
  // (one short of it stands by, docs/recovery.md), so they count as fitting here.
  const size_t to_come = workers > ids.size() ? workers - ids.size() : 0;
  if (enough + to_come >= workers) return OkStatus();
  const Status fits = layouts_->CheckMemory(layout, short_of.first, short_of.second);
  return ResourceExhaustedError(fits.message() + "; " + std::to_string(enough) + " of the " +
                                std::to_string(ids.size()) + " live workers have that much, " +
                                std::to_string(workers) + " needed");
}

std::vector<std::string> GenerationManager::RecoveryMembers(
    const Layout& layout, const RecoveryPlan& recovery, const std::vector<std::string>& standby,
    const std::vector<std::string>& usable) const {
  const std::unordered_set<std::string> ok(usable.begin(), usable.end());
  auto usable_of = [&](const std::vector<std::string>& ids) {
    std::vector<std::string> out;
    for (const auto& id : ids) {
      if (ok.count(id) > 0) out.push_back(id);
    }
    return out;
  };
  // Survivors without a usable commit hold nothing in place: they serve as spares.
  std::vector<std::string> spares = usable_of(recovery.without_state);
  for (auto& id : usable_of(standby)) spares.push_back(std::move(id));
  return KeepReplicas(layout_, members_, usable_of(recovery.with_state), spares, layout.dp,
                      [this](const std::string& id) {
                        const WorkerInfo* w = membership_->Find(id);
                        return w != nullptr ? w->host : id;
                      });
}

}  // namespace elastra::coordinator
