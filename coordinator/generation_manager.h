// GenerationManager: the job's generations and the state machine that changes them
// (docs/protocol.md): forming the first generation, pausing for a planned change, recovering from
// a failure, building the next generation, committing it, and ending the job. It owns the
// committed generation (number, layout, members by rank, history) and the change in flight
// (Reconfiguration), and decides what the members are sent. The worker service calls in with what
// workers report, the resize manager with the pause a resize needs, the restore manager with what
// a restart took back; they learn of commits, recoveries and the job's end through listeners.
// Time comes from the injected Clock. Thread-compatible: the core's loop owns it, like every
// manager.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id_index.h"
#include "protocol/messages.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/context.h"
#include "coordinator/health.h"
#include "coordinator/host_table.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/layout_policy.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"
#include "coordinator/reconfiguration.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra::coordinator {

struct HistoryEntry {
  uint64_t generation = 0;
  proto::GenerationReason reason = proto::GenerationReason::kStart;
  std::vector<std::string> workers;
  Layout layout;
  ReconfigurationTimings timings;
};

// What a planned change is to reach (the resize, drain or regrow that asked for it).
struct SizeGoal {
  size_t workers = 0;
  bool has_layout = false;  // `layout` was asked for; else the layout policy chooses
  Layout layout;
  proto::GenerationReason reason = proto::GenerationReason::kResize;  // kResize, kDrain, kRegrow
  std::string except_host;  // kDrain: the host whose workers leave (none of its workers stays)
};

// What the job returns to (ResizeManager's targets), as a recovery reads them.
struct JobTargets {
  int workers = 0;  // the target size
  int spares = 0;   // standby workers kept beyond it (CoordinatorOptions::spares)
};

// The committed job a restart took back from the journal.
struct CommittedJob {
  proto::JobState state = proto::JobState::kForming;  // kForming, kRunning, kFinished or kFailed
  uint64_t generation = 0;                            // 0: none committed
  uint64_t highest_generation = 0;                    // highest number ever handed out
  Layout layout;
  std::vector<std::string> members;  // of `generation`, by rank
  std::vector<HistoryEntry> history;
};

class GenerationManager {
 public:
  // Every pointer is not owned and must outlive the manager. `options` are normalized
  // (CoordinatorCore's constructor).
  // Calls the layout policy (each generation's layout) and the checkpoint manager (what a
  // recovery restores from).
  GenerationManager(const CoordinatorContext& context, const LayoutPolicy* layouts,
                    CheckpointManager* checkpoints);
  GenerationManager(const GenerationManager&) = delete;
  GenerationManager& operator=(const GenerationManager&) = delete;

  // Called, in the order added, after generation `generation` committed.
  void AddCommitListener(std::function<void(uint64_t generation)> listener);
  // Called when the job finishes or fails, with what to tell a waiting resize ("the job
  // finished", "the job failed: why").
  void AddJobEndListener(std::function<void(const std::string& message)> listener);
  // Called when a recovery round starts.
  void AddRecoveryListener(std::function<void()> listener);
  // Where a recovery reads the job's targets. With spares kept, a recovery takes standby workers
  // only up to the target size and leaves the others standing, unless only more of them make a
  // layout fit; unset, or with no spares, it may take every usable standby worker.
  void SetTargets(std::function<JobTargets()> targets) { targets_ = std::move(targets); }

  // The job as status shows it: the phase of a change in flight, else the committed state.
  proto::JobState state() const;
  bool job_over() const {
    return job_state_ == proto::JobState::kFinished || job_state_ == proto::JobState::kFailed;
  }
  Phase phase() const { return reconf_.phase(); }
  uint64_t generation() const { return generation_; }  // committed; 0 before the first
  const Layout& layout() const { return layout_; }
  const std::vector<std::string>& members() const { return members_; }  // committed, by rank
  const std::vector<HistoryEntry>& history() const { return history_; }

  // Forms the first generation once initial_workers standby workers joined (the newest
  // checkpoint under resume_from when set; the job fails when there is none).
  void MaybeFormFirstGeneration();
  // A planned change: asks every member to pause for the next generation, which is to reach
  // `goal`: the members (less those on goal.except_host) and usable standby workers up to
  // goal.workers; members left out leave (they hand their state off and exit 0).
  void BeginPause(const SizeGoal& goal);
  // Member `id` is heard from at an identity it did not have (its first message to a restarted
  // coordinator): a pause or recover request it has not answered was pushed while it could not be
  // reached and dropped, so it is pushed again.
  void OnReachable(const std::string& id);
  // A PausedReport from `id`. Reconfiguration's error (kStaleGeneration, kNotFound) when it was
  // not expected. Once every participant answered: builds the next generation at the agreed step,
  // or recovers when the steps differ or one failed (pausing); builds the recovery generation
  // (recovering). `rank`: the sender's rank, where it probably is in the change's lists (-1: none).
  Status OnPaused(const std::string& id, const proto::PausedReport& report, int rank = -1);
  // A GenerationReady from `id`. Reconfiguration's error when it was not expected. Commits the
  // generation once every member is ready. `rank`: the sender's rank (its new one).
  Status OnReady(const std::string& id, const proto::GenerationReady& ready, int rank = -1);
  // Starts loading what a PausedReport or GenerationReady from the worker of rank `rank` will
  // read (CoordinatorCore::PrefetchAhead). Changes nothing.
  void Prefetch(int rank) const;
  // True when a FailureReport about `generation` concerns what the members run now (the
  // generation being built, else the committed one) and no recovery is under way.
  bool FailureIsCurrent(uint64_t generation) const;
  // A member finished training: the job finishes when every member of the committed generation
  // has finished (or is lost) and no change is in flight.
  void MaybeFinishJob();

  // Workers that died or went silent: marked lost, told to exit (they may be alive but cut off),
  // and recovered from when they were members (or participants of the recovery under way): one
  // recovery round for all of `ids`.
  void LoseWorkers(const std::vector<std::string>& ids, const std::string& why);
  // Starts a recovery round without `lost` (may be empty: a collective failed and nobody is known
  // dead). A change in flight is aborted; already recovering, the lost stop being awaited. The job
  // fails when no member is left.
  void StartRecovery(const std::vector<std::string>& lost, const std::string& why);
  // Recovering: survivors that did not answer by the deadline are lost.
  void Tick();

  // A restart: the committed job from the journal.
  void Restore(CommittedJob job);

  // A recovery that waits for workers (no layout of the live ones fits their memory) tries again:
  // called on every join. O(1) when none waits.
  void MaybeResumeWaitingRecovery();
  // Why the job waits for workers (state() kWaitingForWorkers); empty when it does not.
  const std::string& waiting_reason() const { return waiting_reason_; }

  // Where replacement spares go first (ResizeManager::MaybeReplenishSpares, docs/recovery.md
  // "Spares"): the host of each worker lost since the last call (a member or a standby), then, for
  // each standby a recovery gave a rank, the host holding the most other members of its
  // tensor-parallel group. Oldest first, at most 16 of each kind (older ones are dropped). Takes
  // them: the next call returns only what was noted since.
  std::vector<std::string> TakeReplacementHosts();

  // OK when at least `workers` of `ids` have the memory `layout` needs (a resize that names it);
  // else kResourceExhausted with the numbers: LayoutPolicy::CheckMemory's for the worker with the
  // most memory short of it, and how many have enough.
  Status CheckEnoughFit(const Layout& layout, size_t workers,
                        const std::vector<std::string>& ids) const;

  // The smallest memory budget (WorkerInfo::memory_bytes) of `ids` and whose it is; {0, ""} when
  // every one is unlimited.
  std::pair<int64_t, std::string> SmallestBudget(const std::vector<std::string>& ids) const;

 private:
  void FinishPause(int64_t step);
  void FinishRecovery();
  void StartBuild(GenerationPlan plan);
  void Commit();
  void FinishJob();
  void FailJob(const std::string& why);
  // Shutdown{exit_code, reason} to every agent of a host that is not drained (a drained host's
  // agent was told already).
  void ShutdownAgents(const proto::Shutdown& shutdown);
  void EndJob(const std::string& message);
  // The most workers (survivors and standbys) a recovery with `survivors` survivors takes:
  // max_workers; with spares kept, the target size (at least the survivors).
  size_t RecoveryWorkers(size_t survivors) const;
  // For each of `standbys` holding a rank of `members` at `layout`: the host holding the most
  // other members of its tensor-parallel group (the first to reach that count, by rank) is noted
  // for TakeReplacementHosts.
  void NoteGroupHosts(const Layout& layout, const std::vector<std::string>& members,
                      const std::vector<std::string>& standbys);
  // The id of each of `infos` (none null).
  static std::vector<std::string> IdsOf(const std::vector<const WorkerInfo*>& infos);
  // The host of each of `ids` (the id itself for an unknown worker).
  std::vector<std::string> HostNames(const std::vector<std::string>& ids) const;
  // A planned change's layout, into `layout`, and the workers it may take, chosen as a recovery
  // chooses (FitWorkers; a regrow keeps the model parallelism): of `candidates` (the first
  // `staying` the current members, the rest usable standby workers), the current members with
  // enough memory and as many standby workers with enough memory as make `want`. The goal's
  // layout when it has `want` ranks and enough candidates have the memory it needs; the current
  // layout, with every candidate, when no layout fits. The current members left out for their
  // memory go into `short_of_memory` (they stay, standby).
  std::vector<std::string> ChangeWorkers(const std::vector<std::string>& candidates, size_t staying,
                                         size_t want, Layout* layout,
                                         std::unordered_set<std::string>* short_of_memory) const;
  // A worker's memory budget; INT64_MAX for one with no limit (0) or unknown.
  int64_t BudgetOf(const std::string& id) const;
  // A recovery's members when the layout keeps the model parallelism of the committed one: whole
  // replicas stay in place, a lost rank is taken by a survivor that held the same position or a
  // standby (KeepReplicas). Empty when there are not enough workers.
  std::vector<std::string> RecoveryMembers(const Layout& layout, const RecoveryPlan& recovery,
                                           const std::vector<std::string>& standby,
                                           const std::vector<std::string>& usable) const;
  // A layout that fits and the workers of `candidates` it may use: of every candidate at the
  // smallest budget, or, when that leaves fewer ranks, of those with at least a larger budget
  // (workers with less memory than the others then stay out); of each budget's workers, the first
  // `most`. nullopt when none fits.
  struct Fit {
    Layout layout;
    std::vector<std::string> workers;  // the candidates with enough memory, in their order
    int64_t budget = INT64_MAX;        // each of `workers` has at least this (BudgetOf)
  };
  std::optional<Fit> FitWorkers(const std::vector<std::string>& candidates,
                                bool keep_model_parallel, size_t most = SIZE_MAX) const;
  // Before a build in flight is abandoned: adds the workers that reported it ready, and whose
  // part changed in it, to off_layout_.
  void NoteBuiltWorkers();
  // Whether the commits `report` holds are `id`'s part of the committed generation: true when it
  // does not place them (commits_rank -1), or places them at its own rank of layout_, or where
  // every registered tensor's region is the same as in its own part (a data-parallel change of
  // replicated state); false for a place that is not a valid rank of a valid layout.
  bool HoldsCommittedPart(const std::string& id, const proto::PausedReport& report);
  // The wire form of workers `ids` at ranks 0.. of `layout`.
  std::vector<proto::Member> MembersOf(const Layout& layout, const std::vector<std::string>& ids,
                                       const std::vector<bool>& has_state) const;
  // The same with each worker already looked up (infos[r]: Membership::Find(ids[r])).
  static std::vector<proto::Member> MembersOf(const Layout& layout,
                                              const std::vector<std::string>& ids,
                                              const std::vector<const WorkerInfo*>& infos,
                                              const std::vector<bool>& has_state);

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  const HostTable* hosts_;
  HealthMonitor* health_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  const LayoutPolicy* layouts_;
  CheckpointManager* checkpoints_;

  // kForming, kRunning, kFinished or kFailed; state() adds the phase of a change in flight.
  proto::JobState job_state_ = proto::JobState::kForming;
  // The requests of the change in flight, pushed again by OnReachable.
  proto::PauseRequest pause_request_;
  proto::RecoverRequest recover_request_;
  uint64_t generation_ = 0;          // committed
  uint64_t highest_generation_ = 0;  // highest number handed out
  Layout layout_;
  std::vector<std::string> members_;  // committed generation, by rank
  // Workers whose commits hold another part than theirs in the committed generation: they
  // reported ready for a generation that then failed and whose part changed in it
  // (NoteBuiltWorkers), or their PausedReport places their commits so (HoldsCommittedPart, which
  // alone survives a coordinator restart). A recovery counts them as holding no state. Cleared
  // at each commit.
  std::unordered_set<std::string> off_layout_;
  IdIndex members_index_;  // members_ by id, built when first needed (HoldsCommittedPart)
  bool members_index_stale_ = true;
  std::vector<HistoryEntry> history_;
  Reconfiguration reconf_;
  SizeGoal pause_goal_;  // of the pause in flight
  // Not empty while a recovery waits for workers that make a layout fit (FinishRecovery).
  std::string waiting_reason_;
  // TakeReplacementHosts': the hosts of lost workers and of the groups standbys joined, oldest
  // first.
  std::vector<std::string> lost_hosts_;
  std::vector<std::string> group_hosts_;

  std::vector<std::function<void(uint64_t)>> commit_listeners_;
  std::vector<std::function<void(const std::string&)>> job_end_listeners_;
  std::vector<std::function<void()>> recovery_listeners_;
  std::function<JobTargets()> targets_;  // unset: no spares kept
};

}  // namespace elastra::coordinator
