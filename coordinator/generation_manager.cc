#include "coordinator/generation_manager.h"

#include <algorithm>
#include <map>

#include "common/id_index.h"
#include "common/logging.h"
#include "common/mesh_peers.h"
#include "coordinator/group_keeping.h"
#include "state/plan/state_move_plan.h"

namespace elastra::coordinator {

GenerationManager::GenerationManager(const CoordinatorContext& context,
                                     const LayoutPolicy* layouts, CheckpointManager* checkpoints)
    : options_(context.options),
      clock_(context.clock),
      membership_(context.membership),
      hosts_(context.hosts),
      health_(context.health),
      outbox_(context.outbox),
      journal_(context.journal),
      layouts_(layouts),
      checkpoints_(checkpoints),
      reconf_(context.clock) {
  layout_.dp = 0;
}

void GenerationManager::AddCommitListener(std::function<void(uint64_t)> listener) {
  commit_listeners_.push_back(std::move(listener));
}

void GenerationManager::AddJobEndListener(std::function<void(const std::string&)> listener) {
  job_end_listeners_.push_back(std::move(listener));
}

void GenerationManager::AddRecoveryListener(std::function<void()> listener) {
  recovery_listeners_.push_back(std::move(listener));
}

proto::JobState GenerationManager::state() const {
  if (job_over()) return job_state_;
  switch (reconf_.phase()) {
    case Phase::kPausing:
      return proto::JobState::kPausing;
    case Phase::kRecovering:
      return waiting_reason_.empty() ? proto::JobState::kRecovering
                                     : proto::JobState::kWaitingForWorkers;
    case Phase::kBuilding:
      return generation_ == 0 ? proto::JobState::kForming : proto::JobState::kBuilding;
    case Phase::kIdle:
      break;
  }
  return job_state_;
}

void GenerationManager::Restore(CommittedJob job) {
  job_state_ = job.state;
  generation_ = job.generation;
  highest_generation_ = job.highest_generation;
  if (job.generation != 0) layout_ = job.layout;
  members_ = std::move(job.members);
  members_index_stale_ = true;
  history_ = std::move(job.history);
}

// ---------------------------------------------------------------------------------------------
// What workers report.

namespace {
size_t HintOf(int rank) { return rank >= 0 ? static_cast<size_t>(rank) : IdIndex::kNone; }
}  // namespace

Status GenerationManager::OnPaused(const std::string& id, const proto::PausedReport& report,
                                   int rank) {
  ELASTRA_RETURN_IF_ERROR(reconf_.RecordPaused(id, report, HintOf(rank)));
  if (!HoldsCommittedPart(id, report)) off_layout_.insert(id);
  if (!reconf_.AllPaused()) return OkStatus();
  if (reconf_.phase() == Phase::kPausing) {
    auto step = reconf_.AgreedStep();
    if (!step.ok()) {
      StartRecovery({}, step.status().message());
      return OkStatus();
    }
    FinishPause(*step);
  } else {
    FinishRecovery();
  }
  return OkStatus();
}

void GenerationManager::Prefetch(int rank) const {
  if (rank < 0) return;
  reconf_.Prefetch(HintOf(rank));
  if (static_cast<size_t>(rank) < members_.size()) __builtin_prefetch(&members_[rank]);
}

Status GenerationManager::OnReady(const std::string& id, const proto::GenerationReady& ready,
                                  int rank) {
  ELASTRA_RETURN_IF_ERROR(reconf_.RecordReady(id, ready, HintOf(rank)));
  if (reconf_.AllReady()) Commit();
  return OkStatus();
}

void GenerationManager::NoteBuiltWorkers() {
  // A worker that reported the generation ready has its shards, and its only commit, in the new
  // layout (GenerationBuilder::CommitNewLayout): it holds nothing of the committed layout, unless
  // its part did not change (same layout, same rank).
  const GenerationPlan& plan = reconf_.plan();
  const bool same_layout = generation_ != 0 && plan.layout == layout_;
  for (size_t r = 0; r < plan.members.size(); ++r) {
    const std::string& id = plan.members[r];
    if (!reconf_.IsReady(id)) continue;
    if (!same_layout || r >= members_.size() || members_[r] != id) off_layout_.insert(id);
  }
}

bool GenerationManager::HoldsCommittedPart(const std::string& id,
                                           const proto::PausedReport& report) {
  if (report.commits_rank < 0 || generation_ == 0) return true;
  const Layout& then = report.commits_layout;
  const auto rank = static_cast<size_t>(report.commits_rank);
  if (then == layout_ && rank < members_.size() && members_[rank] == id) return true;
  if (members_index_stale_) {
    members_index_.Build(&members_);
    members_index_stale_ = false;
  }
  const size_t mine = members_index_.Find(id);
  return mine != IdIndex::kNone && SamePart(layouts_->state(), then, report.commits_rank, layout_,
                                            static_cast<int>(mine));
}

bool GenerationManager::FailureIsCurrent(uint64_t generation) const {
  // The generation the members run now: the one being built, else the committed one.
  const uint64_t live = reconf_.phase() == Phase::kBuilding ? reconf_.target() : generation_;
  return !job_over() && reconf_.phase() != Phase::kRecovering && generation >= live;
}

void GenerationManager::MaybeFinishJob() {
  // Called on every member's Leave: O(1) until the last one. A worker still a member is either a
  // committed member that has not finished or part of a change in flight; neither ends the job.
  if (membership_->MemberCount() > 0) return;
  bool all = !members_.empty();
  for (const auto& id : members_) {
    const WorkerInfo* m = membership_->Find(id);
    if (m != nullptr && m->state != WorkerState::kFinished && m->state != WorkerState::kLost) {
      all = false;
    }
  }
  if (all && reconf_.phase() == Phase::kIdle) FinishJob();
}

void GenerationManager::Tick() {
  if (!reconf_.DeadlinePassed()) return;
  auto silent = reconf_.Unanswered();
  if (!silent.empty()) {
    LOG(WARNING) << silent.size() << " survivor(s) did not answer the recover request in time";
    LoseWorkers(silent, "did not answer the recover request");
  }
}

// ---------------------------------------------------------------------------------------------
// The state machine.

void GenerationManager::MaybeFormFirstGeneration() {
  if (job_state_ != proto::JobState::kForming || reconf_.phase() != Phase::kIdle) return;
  // Called on every join: O(1) until enough workers joined (the usable ones are a subset).
  if (membership_->StandbyCount() < static_cast<size_t>(options_->initial_workers)) return;
  auto standby = hosts_->UsableStandby();
  if (standby.size() < static_cast<size_t>(options_->initial_workers)) return;
  // A layout whose every rank fits its worker's memory, of the initial workers, else of every
  // worker that joined; none: wait for more workers.
  std::vector<std::string> initial(standby.begin(), standby.begin() + options_->initial_workers);
  std::optional<Fit> fitting = FitWorkers(initial, false);
  if (!fitting && standby.size() > initial.size()) {
    standby.resize(std::min(standby.size(), static_cast<size_t>(options_->max_workers)));
    fitting = FitWorkers(standby, false);
  } else {
    standby = std::move(initial);
  }
  if (!fitting) {
    const auto budget = SmallestBudget(standby);
    LOG(WARNING) << "no layout of the " << standby.size() << " workers fits their memory ("
                 << layouts_->CheckMemory(layouts_->Choose(HostNames(standby), layout_),
                                          budget.first, budget.second)
                 << "); waiting for workers";
    return;
  }
  standby = std::move(fitting->workers);
  standby.resize(fitting->layout.world());  // the others stay standby
  GenerationPlan plan;
  plan.generation = ++highest_generation_;
  plan.layout = fitting->layout;
  // Ranks in join order, unless tensor-parallel groups would then span hosts.
  if (plan.layout.tp > 1) standby = layouts_->Assign(plan.layout, standby, HostNames(standby), {}, {});
  plan.members = standby;
  plan.has_state.assign(standby.size(), false);
  plan.has_state[0] = true;  // rank 0's initial state is broadcast
  plan.restore_step = 0;
  plan.source_rank = 0;
  plan.reason = proto::GenerationReason::kStart;
  plan.prev_layout = Layout{};
  plan.prev_members = {standby[0]};
  plan.prev_has_state = {true};
  if (!options_->resume_from.empty()) {
    // A job restarted from disk: every member loads the newest committed checkpoint (falling
    // back to older ones together when it does not load) for its own place in the new layout.
    auto newest = checkpoints_->ResumeFrom(options_->resume_from);
    if (!newest.ok()) {
      FailJob("cannot resume: " + newest.status().message());
      return;
    }
    plan.has_state.assign(standby.size(), false);
    plan.prev_members.clear();
    plan.prev_has_state.clear();
    plan.restore_step = newest->step;
    plan.reason = proto::GenerationReason::kResume;
    LOG(INFO) << "resuming from " << newest->dir << " (step " << newest->step << ", "
              << newest->layout.ToString() << ") on " << standby.size() << " workers";
  }
  reconf_.Reset();
  StartBuild(std::move(plan));
}

void GenerationManager::BeginPause(const SizeGoal& goal) {
  pause_goal_ = goal;
  const std::vector<const WorkerInfo*> infos = membership_->MemberInfos();  // no lookup by id
  std::vector<std::string> members = IdsOf(infos);
  const uint64_t target = ++highest_generation_;
  journal_->ChangeBegun(target, ChangeKind::kPause, members, infos);
  proto::PauseRequest pause;
  pause.target_generation = target;
  pause.reason = goal.reason;
  outbox_->PushAll(infos, proto::MessageType::kPauseRequest, pause, generation_);
  reconf_.BeginPause(target, std::move(members));
  pause_request_ = pause;
  LOG(INFO) << "pausing generation " << generation_ << " for generation " << target << " ("
            << proto::ToString(goal.reason) << ")";
}

void GenerationManager::OnReachable(const std::string& id) {
  const Phase phase = reconf_.phase();
  if ((phase != Phase::kPausing && phase != Phase::kRecovering) || !reconf_.IsParticipant(id)) {
    return;
  }
  if (reconf_.HasAnswered(id)) return;
  LOG(INFO) << "worker " << id << " reached again: its " << PhaseName(phase)
            << " request is sent again";
  if (phase == Phase::kPausing) {
    outbox_->Push(id, proto::MessageType::kPauseRequest, pause_request_, generation_);
  } else {
    outbox_->Push(id, proto::MessageType::kRecoverRequest, recover_request_, generation_);
  }
}

void GenerationManager::FinishPause(int64_t step) {
  // Old members by rank: in the usual pause every participant answered, read in place (valid
  // until StartBuild's reconf_.BeginBuild).
  const bool all = reconf_.answered() == reconf_.participants().size();
  const std::vector<std::string> some = all ? std::vector<std::string>() : reconf_.Answered();
  const std::vector<std::string>& old = all ? reconf_.participants() : some;
  const std::string& except = pause_goal_.except_host;
  GenerationPlan plan;
  plan.generation = reconf_.target();
  // The candidates: the current members (less a draining host's), plus usable standby workers.
  std::vector<std::string> candidates;
  for (const auto& id : old) {
    const WorkerInfo* w = except.empty() ? nullptr : membership_->Find(id);
    if (except.empty() || w == nullptr || w->host != except) candidates.push_back(id);
  }
  size_t staying = candidates.size();
  const std::vector<std::string> standby = hosts_->UsableStandby(except);
  candidates.insert(candidates.end(), standby.begin(), standby.end());
  if (candidates.empty()) {
    // Nobody is left to take over (a replacement vanished meanwhile): this change keeps everyone,
    // and the drain asking for it decides again once it committed.
    candidates = old;
    staying = old.size();
  }
  const size_t want = std::min(pause_goal_.workers, candidates.size());
  // Of them, those with the memory of a layout that fits (members short of it stay, standby),
  // standby workers only up to the size asked for.
  std::unordered_set<std::string> short_of_memory;
  const std::vector<std::string> pool =
      ChangeWorkers(candidates, staying, want, &plan.layout, &short_of_memory);
  // Who takes which rank (and, when shrinking, who leaves): the assignment that keeps the most
  // state in place.
  plan.members = layouts_->Assign(plan.layout, pool, HostNames(pool), layout_, members_);
  IdIndex old_index;  // a flat index of the old members, not a hash node per member
  old_index.Build(&old);
  std::vector<bool> taken(old.size(), false);
  plan.has_state.reserve(plan.members.size());
  for (const auto& id : plan.members) {
    const size_t i = old_index.Find(id);
    const bool held = i != IdIndex::kNone && !taken[i];
    if (held) taken[i] = true;
    plan.has_state.push_back(held);
  }
  // Old members not taken leave the job; those short of the layout's memory, and when the layout
  // uses fewer workers than were asked for (their memory) as many others as it left out, stay
  // standby instead.
  size_t left_out = want - std::min(want, plan.members.size());
  for (size_t i = 0; i < old.size(); ++i) {
    if (taken[i]) continue;
    plan.leaving.push_back(old[i]);  // not taken by the new generation
    if (short_of_memory.count(old[i]) != 0) {
      plan.standby.push_back(old[i]);
    } else if (left_out > 0) {
      plan.standby.push_back(old[i]);
      --left_out;
    }
  }
  plan.restore_step = step;
  plan.source_rank = 0;
  plan.reason = pause_goal_.reason;
  plan.prev_layout = layout_;
  plan.prev_members = members_;
  plan.prev_has_state.assign(members_.size(), true);
  StartBuild(std::move(plan));
}

std::vector<std::string> GenerationManager::IdsOf(const std::vector<const WorkerInfo*>& infos) {
  std::vector<std::string> ids(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) ids[i] = infos[i]->id;
  return ids;
}

std::vector<std::string> GenerationManager::HostNames(const std::vector<std::string>& ids) const {
  std::vector<std::string> hosts;
  hosts.reserve(ids.size());
  for (const auto& id : ids) {
    const WorkerInfo* w = membership_->Find(id);
    hosts.push_back(w != nullptr ? w->host : id);
  }
  return hosts;
}

std::vector<proto::Member> GenerationManager::MembersOf(const Layout& layout,
                                                        const std::vector<std::string>& ids,
                                                        const std::vector<bool>& has_state) const {
  return MembersOf(layout, ids, membership_->FindAll(ids), has_state);
}

std::vector<proto::Member> GenerationManager::MembersOf(const Layout& layout,
                                                        const std::vector<std::string>& ids,
                                                        const std::vector<const WorkerInfo*>& infos,
                                                        const std::vector<bool>& has_state) {
  std::vector<proto::Member> out;
  out.reserve(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) {
    proto::Member m;
    m.worker_id = ids[r];
    if (const WorkerInfo* w = infos[r]) {
      m.host = w->host;
      m.device = w->device;
    }
    m.coords = CoordinatesOf(layout, static_cast<int>(r));
    m.has_state = r < has_state.size() && has_state[r];
    out.push_back(std::move(m));
  }
  return out;
}

void GenerationManager::StartBuild(GenerationPlan plan) {
  // Each member looked up once for the journal, the member table and the push (the entries
  // stay put: Membership never moves a WorkerInfo, and nothing below removes one).
  const std::vector<const WorkerInfo*> infos = membership_->FindAll(plan.members);
  // Members not in the plan that still hold the member state (aborted survivors that did not
  // answer were marked lost already) are not part of the new generation. The plan's ids are
  // distinct, the leaving ones the old members it did not take (FinishPause): when as many of
  // them are members as there are members, there is none such (most changes), and the members
  // need not be looked up again.
  size_t members_in_plan = 0;
  for (const WorkerInfo* w : infos) {
    members_in_plan += w != nullptr && w->state == WorkerState::kMember ? 1 : 0;
  }
  for (const auto& id : plan.leaving) {
    const WorkerInfo* w = membership_->Find(id);
    members_in_plan += w != nullptr && w->state == WorkerState::kMember ? 1 : 0;
  }
  if (members_in_plan != membership_->MemberCount()) {
    // Flat indexes of the two lists, not a hash node per worker (docs/scale.md).
    IdIndex members_index, leaving_index;
    members_index.Build(&plan.members);
    leaving_index.Build(&plan.leaving);
    for (const WorkerInfo* w : membership_->MemberInfos()) {
      const std::string& id = w->id;
      if (members_index.Find(id) == IdIndex::kNone && leaving_index.Find(id) == IdIndex::kNone) {
        health_->Forget(w->slot);
        journal_->WorkerState(id, JournalWorkerState::kLost);
        membership_->SetState(id, WorkerState::kLost);
      }
    }
  }
  journal_->ChangeBegun(plan.generation, ChangeKind::kBuild, plan.members, infos);
  membership_->AssignRanks(plan.members);
  for (const auto& id : plan.leaving) {
    if (const WorkerInfo* w = membership_->Find(id)) health_->Forget(w->slot);
    membership_->SetState(id, WorkerState::kLeaving);
  }
  proto::NewGeneration ng;
  ng.generation = plan.generation;
  ng.layout = plan.layout;
  ng.restore_step = plan.restore_step;
  ng.source_rank = plan.source_rank;
  ng.kv_prefix = "g" + std::to_string(plan.generation) + "/";
  ng.reason = plan.reason;
  ng.prev_layout = plan.prev_layout;
  ng.checkpoint_dir = checkpoints_->latest_dir();
  // The state move is planned here, once, from the full tables; each recipient gets its own
  // entries, those of the workers it trades state with and its transfers: O(1) + O(its
  // transfers) bytes, not the tables (docs/protocol.md).
  std::vector<proto::Member> members = MembersOf(plan.layout, plan.members, infos, plan.has_state);
  std::vector<proto::Member> prev = MembersOf(plan.prev_layout, plan.prev_members,
                                              plan.prev_has_state);
  const bool resume = plan.reason == proto::GenerationReason::kResume;
  ReshardPlanOptions plan_options;
  plan_options.copies = false;  // each worker lists its own copies
  StatusOr<StateMove> planned =
      resume ? StatusOr<StateMove>(UnavailableError("resumed from disk"))
             : PlanStateMove(layouts_->state(), plan.layout, members, plan.prev_layout, prev,
                             plan_options);
  if (!planned.ok() && !resume) {
    LOG(WARNING) << "state move of generation " << plan.generation << ": " << planned.status();
  }
  const MoveAddresser moves(layouts_->state(), plan.layout, std::move(members), plan.prev_layout,
                            std::move(prev), std::move(planned),
                            resume ? proto::MovePlan::kNone : proto::MovePlan::kMove);
  ng.scalars_source = moves.ScalarsSource();
  // The NCCL world of the last generation built, by its ranks, made into this one's.
  const proto::NcclReuse reuse = proto::NcclReuseOf(members_, plan.members);
  // The groups whose members did not change and stood quiet at the pause are kept.
  const KeptGroups kept = PlanKeptGroups(
      layout_, members_, generation_, plan.layout, plan.members,
      [this](const std::string& id, size_t old_rank, uint8_t kind) {
        return reconf_.GroupHealthOf(id, old_rank, kind);
      },
      options_->keep_groups && plan.reason != proto::GenerationReason::kResume);
  plan.groups_rebuilt = kept.rebuilt;
  plan.groups_kept = kept.kept;
  // The world's address records are served by the members themselves when every one serves
  // them (each gets its build peers' endpoints); else all of them go through the store.
  const int world = static_cast<int>(plan.members.size());
  // The endpoints by rank in one string, read once: a member's peers are log N ranks anywhere
  // in the world, each a cache miss when read from its WorkerInfo.
  bool peers_serve = world > 1;
  std::string endpoints;
  if (peers_serve) endpoints.reserve(infos.size() * kRendezvousEndpointBytes);
  for (const WorkerInfo* w : infos) {
    peers_serve = peers_serve && w != nullptr && w->rendezvous.size() == kRendezvousEndpointBytes;
    if (!peers_serve) break;
    endpoints += w->rendezvous;
  }
  ng.nccl.from_generation = generation_;
  ng.nccl.from_world = reuse.from_world;
  ng.nccl.renumber = reuse.renumber;
  ng.nccl.excluded = reuse.excluded;
  // The fields every recipient shares are encoded once; each recipient's own fields are set in
  // one message reused for all (its vectors keep their capacity) and encoded behind them.
  const std::string shared = proto::EncodeShared(ng);
  proto::NewGeneration mine;
  std::vector<int> peers;  // one rank's build peers, reused
  IdIndex standby_index;
  standby_index.Build(&plan.standby);
  auto push = [&](const std::string& id, const WorkerInfo* w, int rank) {
    const bool leave = rank < 0;
    mine.leave = leave;
    mine.standby = leave && !plan.standby.empty() && standby_index.Find(id) != IdIndex::kNone;
    mine.build_peers.clear();
    if (peers_serve && !leave) {
      BuildPeersInto(rank, world, &peers);
      mine.build_peers.reserve(peers.size() * kRendezvousEndpointBytes);
      for (int p : peers) {
        mine.build_peers.append(endpoints, static_cast<size_t>(p) * kRendezvousEndpointBytes,
                                kRendezvousEndpointBytes);
      }
    }
    moves.Address(id, &mine, rank);  // its members, previous members and part of the move
    mine.keep_groups = leave ? 0 : kept.keep[static_cast<size_t>(rank)];
    mine.nccl.possible = !leave && reuse.possible;
    // The ranks to exclude go to the new rank 0 alone, and only on a device (only NCCL worlds
    // need them): it passes them on over the control world (proto::NcclReuse).
    mine.nccl.exclude.clear();
    if (rank == 0 && mine.nccl.possible && w != nullptr && w->device >= 0) {
      mine.nccl.exclude = reuse.exclude;
    }
    outbox_->PushSharedTo(w, proto::MessageType::kNewGeneration, shared, mine, plan.generation);
  };
  outbox_->Reserve(plan.members.size() + plan.leaving.size());
  for (int r = 0; r < world; ++r) push(plan.members[r], infos[r], r);
  for (const auto& id : plan.leaving) push(id, membership_->Find(id), -1);
  LOG(INFO) << "building generation " << plan.generation << " (" << proto::ToString(plan.reason)
            << ", " << plan.layout.ToString() << ", restore step " << plan.restore_step << "; "
            << kept.rebuilt << " communicators to build, " << kept.kept << " kept)";
  reconf_.BeginBuild(std::move(plan));
}

void GenerationManager::Commit() {
  HistoryEntry entry;
  entry.timings = reconf_.Timings();
  GenerationPlan plan = reconf_.TakePlan();  // its member list becomes members_, not a copy
  entry.generation = plan.generation;
  entry.reason = plan.reason;
  entry.workers = plan.members;
  entry.layout = plan.layout;
  const bool recovered = plan.reason == proto::GenerationReason::kFailure;
  journal_->Commit(plan.generation, plan.reason, plan.layout, plan.members, entry.timings,
                   recovered ? plan.reached_step : -1, recovered ? plan.restore_step : -1);
  generation_ = plan.generation;
  layout_ = plan.layout;
  members_ = std::move(plan.members);
  members_index_stale_ = true;
  off_layout_.clear();
  history_.push_back(std::move(entry));
  job_state_ = proto::JobState::kRunning;
  reconf_.Reset();
  LOG(INFO) << "generation " << generation_ << " committed (" << layout_.ToString() << ")";
  for (const auto& listener : commit_listeners_) listener(generation_);
}

void GenerationManager::FinishJob() {
  job_state_ = proto::JobState::kFinished;
  // Every member left after its last checkpoint write was reported (Worker::Finish), so the
  // checkpoints that can be committed are; what is left uncommitted goes.
  checkpoints_->EndJob();
  journal_->End(JobOutcome::kFinished, "every member finished", checkpoints_->latest_step(),
                checkpoints_->latest_dir());
  proto::Shutdown shutdown;
  shutdown.exit_code = 0;
  shutdown.reason = "every member finished";
  ShutdownAgents(shutdown);
  // Standby workers have nothing to come back to (a parked mpirun rank leaves at once).
  for (const WorkerInfo* w : membership_->All()) {
    if (w->state == WorkerState::kStandby) {
      outbox_->Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    }
  }
  EndJob("the job finished");
  LOG(INFO) << "job " << options_->job << " finished";
}

void GenerationManager::FailJob(const std::string& why) {
  job_state_ = proto::JobState::kFailed;
  checkpoints_->EndJob();
  journal_->End(JobOutcome::kFailed, why, checkpoints_->latest_step(), checkpoints_->latest_dir());
  reconf_.Reset();
  proto::Shutdown shutdown;
  shutdown.exit_code = 1;
  shutdown.reason = why;
  ShutdownAgents(shutdown);
  for (const WorkerInfo* w : membership_->All()) {
    if (w->state == WorkerState::kMember || w->state == WorkerState::kStandby) {
      outbox_->Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    }
  }
  EndJob("the job failed: " + why);
  LOG(ERROR) << "job " << options_->job << " failed: " << why;
}

void GenerationManager::ShutdownAgents(const proto::Shutdown& shutdown) {
  for (const HostInfo& host : hosts_->hosts()) {
    if (host.state == proto::HostState::kDrained) continue;
    outbox_->Send(host.identity, proto::MessageType::kShutdown, shutdown, 0);
  }
}

void GenerationManager::EndJob(const std::string& message) {
  for (const auto& listener : job_end_listeners_) listener(message);
}

}  // namespace elastra::coordinator
