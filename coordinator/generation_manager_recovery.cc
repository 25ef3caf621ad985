// GenerationManager's recovery path (see generation_manager.h): workers lost, the survivors
// paused at once with what they hold, and the recovery generation formed from their commits.
// The planned path and the build and commit of a generation are in generation_manager.cc.
#include <algorithm>
#include <map>

#include "common/id_index.h"
#include "common/logging.h"
#include "coordinator/generation_manager.h"

namespace elastra::coordinator {

void GenerationManager::LoseWorkers(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<std::string> lost;
  for (const auto& id : ids) {
    WorkerInfo* w = membership_->Find(id);
    if (w == nullptr) continue;
    bool was_member = w->state == WorkerState::kMember;
    health_->Forget(w->slot);
    if (w->state == WorkerState::kLost) continue;
    LOG(WARNING) << "worker " << id << " lost: " << why;
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
    auto recovery = reconf_.PlanRecovery(off_layout_);
    if (!recovery.ok()) {
      FailJob("cannot recover: " + recovery.status().message());
      return;
    }
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
  for (const auto& id : standby) {
    if (plan.members.size() >= static_cast<size_t>(options_->max_workers)) break;
    plan.members.push_back(id);
    plan.has_state.push_back(false);
  }
  plan.layout = layouts_->Choose(HostNames(plan.members), layout_);
  if (plan.layout.tp > 1) {
    // Tensor-parallel groups inside hosts where they fit; each worker keeps what it holds.
    std::map<std::string, bool> held;
    for (size_t r = 0; r < plan.members.size(); ++r) held[plan.members[r]] = plan.has_state[r];
    plan.members = layouts_->Assign(plan.layout, plan.members, HostNames(plan.members), layout_,
                                    members_);
    plan.has_state.clear();
    for (const auto& id : plan.members) plan.has_state.push_back(held[id]);
    if (generation_ == 0) {
      // Re-forming the first generation: the new rank 0 broadcasts its initial state.
      plan.has_state.assign(plan.members.size(), false);
      plan.has_state[0] = true;
      plan.prev_members = {plan.members[0]};
    }
    const auto source = std::find(plan.has_state.begin(), plan.has_state.end(), true);
    plan.source_rank = source == plan.has_state.end()
                           ? 0
                           : static_cast<int32_t>(source - plan.has_state.begin());
  }
  StartBuild(std::move(plan));
}

}  // namespace elastra::coordinator
