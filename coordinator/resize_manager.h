// ResizeManager: the job's planned changes of size, from admission to their outcome
// (docs/protocol.md "Resize", docs/hosts.md "Placement and the target size", "Drain"):
//   - a ResizeRequest (admin key): refused when it cannot be done (beyond the free slots of the
//     live hosts when agents exist), else the new size becomes the target;
//   - a DrainRequest (admin key, or the worker key of the host's own agent): the job moves off one
//     host in one planned generation, replacements starting on other hosts up to the target
//     (which drops when no other host can take the workers); replied to like a resize;
//   - a regrow: below the target with standby workers or free slots (after a failure), new
//     workers start and the job grows back in a generation with reason `regrow`;
//   - hot spares (resize_manager_spares.cc): standby workers kept beyond the layout, replaced
//     when a recovery used one, and left standing by a grow whose workers free slots can start.
// It keeps the one pending change and the target size (both journaled, so a restarted coordinator
// continues), asks the host manager for the workers a change lacks and waits for them up to
// spawn_timeout, has the generation manager pause the job for the new size, and answers a waiting
// caller when the job runs at that size or why it does not. Time comes from the injected Clock.
// Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/context.h"
#include "coordinator/generation_manager.h"
#include "coordinator/host_manager.h"
#include "coordinator/host_table.h"
#include "journal/journal.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/layout_policy.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"

namespace elastra::coordinator {

class ResizeManager {
 public:
  // The change in progress.
  struct Pending {
    proto::GenerationReason reason = proto::GenerationReason::kResize;  // kResize/kDrain/kRegrow
    std::string identity;     // the caller (none for a regrow)
    uint64_t request_id = 0;  // its request, repeated in the replies
    int workers = 0;          // the size to reach
    bool has_layout = false;  // an exact layout was asked for
    Layout layout;
    bool wait = false;  // the caller waits for the outcome
    std::string host;   // kDrain: the host the job leaves
    TimePoint received{};
    bool waiting_for_workers = false;  // it waits for workers to start and join
    TimePoint spawn_deadline{};
    uint64_t paused_at = 0;  // the committed generation when it last paused the job (0: never)
    // The last phase answered: how the change ended once it ends (journaled with resize_end).
    proto::ResizePhase answered = proto::ResizePhase::kAccepted;
  };

  // Every pointer is not owned and must outlive the manager.
  // Calls the host manager (spawns, drains), the layout policy (a resize's target) and the
  // generation manager (the change a resize starts).
  ResizeManager(const CoordinatorContext& context, HostManager* host_manager,
                const LayoutPolicy* layouts, GenerationManager* generations)
      : options_(context.options),
        clock_(context.clock),
        membership_(context.membership),
        hosts_(context.hosts),
        host_manager_(host_manager),
        outbox_(context.outbox),
        journal_(context.journal),
        layouts_(layouts),
        generations_(generations) {}
  ResizeManager(const ResizeManager&) = delete;
  ResizeManager& operator=(const ResizeManager&) = delete;

  // A ResizeRequest from admin client `identity`: refused with an ErrorReply (kInvalidArgument;
  // kResourceExhausted: more workers than the live hosts have slots, when agents exist;
  // kFailedPrecondition: another change in flight, or a restart not settled yet), done at once
  // when the job already has that size, else accepted and started. Its size is the new target.
  // Its spares (when it names them) become spares(); one that names only spares is done at once
  // (refused only once the job is over).
  void OnResize(const std::string& identity, const proto::Envelope& e);
  // A DrainRequest from `identity` holding `role`: refused with an ErrorReply (kUnauthenticated:
  // a worker key draining another host than its agent's; kNotFound: an unknown host;
  // kFailedPrecondition: the host is not up, the job would have no worker left, another change in
  // flight), done at once when no member runs there, else accepted and started.
  void OnDrain(const std::string& identity, proto::Role role, const proto::Envelope& e);
  // Moves the pending change on when no change of generation is in flight: done when the job runs
  // at the size asked (and, for a drain, off its host); else, short of workers, asks agents for
  // them and waits; else pauses the job for the new size.
  void Continue();
  // Continue(), for a pending change waiting for workers (a worker joined, a host may take one).
  void ContinueIfWaitingForWorkers();
  // With no change pending or in flight and the job below its target: when standby workers or
  // free slots on hosts whose agents heartbeat can bring it back, starts a regrow.
  void MaybeRegrow();
  // A change whose workers did not join within spawn_timeout: a resize fails; a regrow or a drain
  // goes on with the workers that came (a drain with nobody to take over fails).
  void Tick();
  // The job ended: a waiting caller hears `message` as the failure; the change is over (the
  // journal's end record closes a resize).
  void OnJobEnd(const std::string& message);
  // A restarted coordinator: the journaled target, spares and pending resize. Nobody waits for
  // the resize's outcome any more.
  void Restore(const std::optional<JournalResize>& resize, int target, int spares);
  // While a restart waits to hear from its workers, resizes and drains are refused and no regrow
  // starts.
  void set_restoring(bool restoring) { restoring_ = restoring; }

  // The size the job returns to: the start size, then each accepted resize's size, lowered by a
  // drain no other host could take.
  int target() const { return target_.value_or(options_->initial_workers); }
  // The standby workers the job keeps beyond its layout: CoordinatorOptions::spares, then each
  // accepted resize that named them (journaled: a restarted coordinator keeps them).
  int spares() const { return spares_.value_or(options_->spares); }
  // Keeps spares() standing: with the job running and no change pending or in flight, when the
  // usable standby workers and the workers on their way are fewer, asks agents for the rest on
  // any up host with free slots (an agent that does not heartbeat too: spares were asked for, as
  // a resize's workers are): first on the hosts of the workers lost, then on those of the groups
  // the used standbys joined (GenerationManager::TakeReplacementHosts), then fullest host first;
  // they join as standbys. O(1) while enough stand or are on their way. Stops the standby workers
  // a lowered spares() no longer keeps first (StopSparesBeyond).
  void MaybeReplenishSpares();
  const std::optional<Pending>& pending() const { return pending_; }

 private:
  // Why no resize or drain may start now; OK when one may.
  Status CheckCanChange() const;
  // A committed member that finished training (the job is ending); empty when none.
  std::string FinishedMember() const;
  // A pending regrow that still waits for workers gives way to a resize or a drain.
  bool PendingGivesWay() const;
  // How many members stay: those not on host `except` (every one when it is empty). Counted
  // from the host's workers, not by a lookup per member.
  size_t Staying(const std::string& except) const;
  // The host a pending drain leaves; empty for any other change.
  std::string DrainedHost() const;
  void BeginPause();
  void FinishDrain();
  void SetTarget(int workers, bool journal);
  // Sets spares(); when it is lowered by d, up to d standby workers beyond the new number stop
  // at the next moment with no change pending or in flight (StopSparesBeyond).
  void SetSpares(int spares);
  // Stops the standby workers owed by a lowered spares(), newest first, leaving at least
  // spares() standing: each is told to leave (Shutdown with code 0) and counts as leaving until
  // its Leave or its exit arrives. Only the number lowered goes: survivors that a layout leaves
  // out are the next grow's (docs/recovery.md, "Spares"). Returns how many it stopped now.
  int StopSparesBeyond();
  // Workers asked of the agents of hosts other than `except` that have not joined yet.
  int OnTheirWay(const std::string& except) const;
  // Of `standby` usable standby workers, how many a grow from `staying` members to `want` leaves
  // standing as spares: up to spares(), fewer only when the workers it lacks cannot all start
  // in `startable` free slots and spawns on their way (the target comes first).
  size_t SparesKept(size_t want, size_t staying, size_t standby, size_t startable) const;
  // A resize or regrow whose own generation committed short of its size while the standby
  // workers it needed stand (their memory fits no layout with them, docs/recovery.md): answered
  // (done at the size that fits; failed for a layout asked for), over, and no regrow starts again
  // until the members, the standby workers or the generation change. False otherwise, and when
  // a standby declared no memory (then memory is not why it was left out).
  bool EndShortOfMemory(size_t members, const std::vector<std::string>& standbys);
  // Answers a waiting caller; logs any outcome but done.
  void Reply(proto::ResizePhase phase, const std::string& message);
  // The change is over: forgets it and journals that (a resize).
  void End();

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  HostTable* hosts_;
  HostManager* host_manager_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  const LayoutPolicy* layouts_;
  GenerationManager* generations_;

  std::optional<Pending> pending_;
  std::optional<int> target_;  // unset: options.initial_workers
  std::optional<int> spares_;  // unset: options.spares
  int spares_to_stop_ = 0;     // standby workers a lowered spares() still owes (StopSparesBeyond)
  // (members, usable standby workers, generation) when a change ended short of its size for the
  // standby workers' memory: MaybeRegrow starts none while they are the same.
  std::optional<std::tuple<size_t, size_t, uint64_t>> short_of_memory_;
  bool restoring_ = false;
};

}  // namespace elastra::coordinator
