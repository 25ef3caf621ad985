// Reconfiguration: the state of one change of generation in flight. A planned change goes
// pausing -> building; a failure goes recovering -> building. This class keeps who must answer,
// what they answered, and the timings; CoordinatorCore decides what to send. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id_index.h"
#include "protocol/messages.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra::coordinator {

enum class Phase { kIdle, kPausing, kRecovering, kBuilding };
const char* PhaseName(Phase phase);

// The generation to build: pushed as NewGeneration to every member (and leave=true to `leaving`).
struct GenerationPlan {
  uint64_t generation = 0;
  Layout layout;
  std::vector<std::string> members;  // by new rank
  std::vector<bool> has_state;       // parallel to members
  std::vector<std::string> leaving;
  // Those of `leaving` that stay in the job as standbys (NewGeneration::standby): live workers the
  // layout does not use. The others exit.
  std::vector<std::string> standby;
  int64_t restore_step = 0;
  // A recovery: the furthest step a survivor had reached (-1 otherwise or when none said).
  int64_t reached_step = -1;
  int32_t source_rank = 0;
  proto::GenerationReason reason = proto::GenerationReason::kStart;
  // Where the state is now (see proto::NewGeneration): the previous layout and its workers by old
  // rank, with whether each still holds its part of the state at restore_step.
  Layout prev_layout;
  std::vector<std::string> prev_members;
  std::vector<bool> prev_has_state;
  // The communicators the members build and those they keep from the committed generation
  // (group_keeping.h), set when NewGeneration goes out.
  int32_t groups_rebuilt = 0;
  int32_t groups_kept = 0;
};

struct ReconfigurationTimings {
  double downtime_ms = 0;   // first PausedReport (recovery: its start) -> last GenerationReady
  double agreement_ms = 0;  // pause/recover request sent -> last PausedReport
  double rebuild_ms = 0;    // slowest communicator build reported
  double transfer_ms = 0;   // slowest state transfer reported
  int64_t bytes_moved = 0;  // state bytes the members received, in all
  int32_t groups_rebuilt = 0;  // communicators built and kept (GenerationPlan)
  int32_t groups_kept = 0;
};

// What survivors of a failure can continue from.
struct RecoveryPlan {
  int64_t restore_step = 0;
  int64_t reached_step = -1;  // the furthest step a survivor reported (PausedReport::step)
  std::vector<std::string> with_state;     // survivors holding restore_step, by old rank
  std::vector<std::string> without_state;  // survivors with no commit of the committed layout
};

class Reconfiguration {
 public:
  explicit Reconfiguration(Clock* clock) : clock_(clock) {}
  // Not copyable: the indexes point into this object's lists.
  Reconfiguration(const Reconfiguration&) = delete;
  Reconfiguration& operator=(const Reconfiguration&) = delete;

  Phase phase() const { return phase_; }
  uint64_t target() const { return target_; }

  // Planned change: `participants` (old members by rank) were sent PauseRequest{target}.
  void BeginPause(uint64_t target, std::vector<std::string> participants);
  // Failure: `participants` (survivors by old rank) were sent RecoverRequest{target}; those that
  // have not answered by `deadline` are lost.
  void BeginRecover(uint64_t target, std::vector<std::string> participants, TimePoint deadline);
  // NewGeneration was sent for `plan`. Keeps the pause timings of this change.
  void BeginBuild(GenerationPlan plan);
  // Back to idle; timings cleared.
  void Reset();

  // kStaleGeneration when the report is for another target or we are not pausing/recovering,
  // kNotFound when `id` was not asked. `hint`: where `id` probably is among the participants
  // (its rank: a pause's participants are the members by rank), tried before the index.
  Status RecordPaused(const std::string& id, const proto::PausedReport& report,
                      size_t hint = IdIndex::kNone);
  // kStaleGeneration when not building this generation, kNotFound when `id` is not a member.
  // `hint`: where `id` probably is in the plan's members (its new rank).
  Status RecordReady(const std::string& id, const proto::GenerationReady& ready,
                     size_t hint = IdIndex::kNone);

  // O(1): counted as the reports come.
  bool AllPaused() const;
  bool AllReady() const;
  // Whether plan member `id` reported the generation being built ready. O(1).
  bool IsReady(const std::string& id) const;
  // Starts loading what a report from the participant at `hint` (its rank, as RecordPaused and
  // RecordReady take it) will read in this phase (CoordinatorCore::PrefetchAhead).
  void Prefetch(size_t hint) const;
  // Whether participant `id` answered. O(1).
  bool HasAnswered(const std::string& id) const;
  // Participants that answered / did not answer, by old rank.
  std::vector<std::string> Answered() const;
  // Every participant, by old rank, dropped ones included: Answered() without a copy when
  // answered() == participants().size() (none dropped, all answered: the usual pause).
  const std::vector<std::string>& participants() const { return participants_; }
  size_t answered() const { return answered_; }
  std::vector<std::string> Unanswered() const;
  bool IsParticipant(const std::string& id) const;
  // Forgets a participant that died (recovering).
  void DropParticipant(const std::string& id);
  bool DeadlinePassed() const { return phase_ == Phase::kRecovering && clock_->Now() >= deadline_; }

  // Pausing: the step every participant stopped after. kAborted when the steps differ or one of
  // them reported a failure.
  StatusOr<int64_t> AgreedStep() const;
  // Recovering: the largest step every state-holding survivor has a commit of. kAborted when there
  // is none. Survivors in `off_layout` hold no state of the committed layout whatever commits they
  // report (GenerationManager: they built a generation that then failed).
  StatusOr<RecoveryPlan> PlanRecovery(
      const std::unordered_set<std::string>& off_layout = {}) const;

  // What participant `id` (at `hint`, its old rank) reported of its group of `kind` at this
  // change's pause (proto::GroupHealth); nullptr when it reported none or did not answer.
  const proto::GroupHealth* GroupHealthOf(const std::string& id, size_t hint, uint8_t kind) const;

  const GenerationPlan& plan() const { return plan_; }
  // Moves the plan out (a commit keeps its lists); IsReady and RecordReady know no member after.
  GenerationPlan TakePlan();
  ReconfigurationTimings Timings() const;

 private:
  // What a participant did: nothing yet, answered (paused_[i] holds its report), or died.
  enum Answer : uint8_t { kAwaited, kAnswered, kDropped };
  // The participant's position in participants_, kNone when `id` is not one (or was dropped).
  // `hint` is tried first (IdIndex::Find), for each of 16,384 reports (docs/scale.md).
  size_t ParticipantIndex(const std::string& id, size_t hint = IdIndex::kNone) const;

  Clock* clock_;
  Phase phase_ = Phase::kIdle;
  uint64_t target_ = 0;
  // One change's workers are indexed by position (IdIndex), their answers kept in vectors
  // parallel to the lists: no hash node per worker to build and free (docs/scale.md).
  std::vector<std::string> participants_;  // by old rank; dropped ones stay, marked kDropped
  IdIndex participant_index_;              // over participants_
  std::vector<Answer> answers_;            // parallel to participants_
  // What a kAnswered participant reported, its commit steps a span of commit_steps_: no vector
  // kept per report (at 16,384 reports their allocations and frees cost more than the rest).
  struct Report {
    int64_t step = -1;
    uint32_t commits_at = 0;  // in commit_steps_
    uint32_t commits = 0;
    uint32_t groups_at = 0;  // in groups_
    uint8_t groups = 0;
    bool failed = false;
  };
  std::vector<Report> paused_;          // parallel to participants_
  std::vector<int64_t> commit_steps_;   // the reports' commit steps, one span each
  std::vector<proto::GroupHealth> groups_;  // the reports' groups, one span each
  size_t answered_ = 0;                    // participants kAnswered
  size_t live_ = 0;                        // participants not kDropped
  GenerationPlan plan_;
  IdIndex member_index_;  // over plan_.members
  // Parallel to plan_.members: whether it reported ready, and its report's rebuild and transfer
  // times.
  std::vector<bool> ready_;
  std::vector<std::pair<double, double>> ready_ms_;
  std::vector<int64_t> ready_bytes_;  // GenerationReady::bytes_received, by member
  size_t ready_count_ = 0;
  TimePoint deadline_{};
  TimePoint requested_{};
  TimePoint first_paused_{};
  TimePoint last_paused_{};
  TimePoint last_ready_{};
  bool any_paused_ = false;
  bool recovering_ = false;  // this change started as a recovery from a failure
};

}  // namespace elastra::coordinator
