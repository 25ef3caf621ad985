// ResizeManager: an admin's ResizeRequest from admission to its outcome (docs/protocol.md,
// "Resize"). It refuses what cannot be done, keeps the one pending resize (journaled, so a
// restarted coordinator continues it), asks the first registered agent to start the workers a
// grow lacks under ids never used before, waits for them up to spawn_timeout, has the generation
// manager pause the job for the new size, and answers a waiting caller when the job runs at that
// size or why it does not. Time comes from the injected Clock. Thread-compatible: the core's loop
// owns it, like every manager.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "common/clock.h"
#include "common/messages.h"
#include "coordinator/generation_manager.h"
#include "coordinator/journal.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/layout_policy.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"

namespace elastra::coordinator {

class ResizeManager {
 public:
  // The resize in progress.
  struct Pending {
    std::string identity;     // the caller
    uint64_t request_id = 0;  // its request, repeated in the replies
    int workers = 0;
    bool has_layout = false;  // an exact layout was asked for
    Layout layout;
    bool wait = false;  // the caller waits for the outcome
    TimePoint received{};
    bool waiting_for_workers = false;  // a grow waits for workers to join
    TimePoint spawn_deadline{};
  };

  // Every pointer is not owned and must outlive the manager.
  ResizeManager(const CoordinatorOptions* options, Clock* clock, Membership* membership,
                Outbox* outbox, JournalRecorder* journal, const LayoutPolicy* layouts,
                GenerationManager* generations)
      : options_(options),
        clock_(clock),
        membership_(membership),
        outbox_(outbox),
        journal_(journal),
        layouts_(layouts),
        generations_(generations) {}
  ResizeManager(const ResizeManager&) = delete;
  ResizeManager& operator=(const ResizeManager&) = delete;

  // A ResizeRequest from admin client `identity`: refused with an ErrorReply (kInvalidArgument,
  // kFailedPrecondition: another change in flight, or `restarting`, a restart not settled yet),
  // done at once when the job already has that size, else accepted and started.
  void OnResize(const std::string& identity, const proto::Envelope& e, bool restarting);
  // Moves the pending resize on when no change is in flight: done when the job runs at the size
  // asked; else, for a grow short of workers, asks an agent for them and waits; else pauses the
  // job for the new size.
  void Continue();
  // Continue(), for a pending grow waiting for workers (a worker joined, an agent registered).
  void ContinueIfWaitingForWorkers();
  // Worker `id` joined, or its process exited: no agent owes it any more.
  void StopAwaiting(const std::string& id) { outstanding_spawns_.erase(id); }
  // Fails a grow whose workers did not join within spawn_timeout.
  void Tick();
  // The job ended: a waiting caller hears `message` as the failure; the resize is over (the
  // journal's end record closes it).
  void OnJobEnd(const std::string& message);
  // A restarted coordinator: the journaled pending resize. Nobody waits for its outcome any more.
  void Restore(const JournalResize& resize);

  const std::optional<Pending>& pending() const { return pending_; }

 private:
  // Answers a waiting caller; logs any outcome but done.
  void Reply(proto::ResizePhase phase, const std::string& message);
  // The resize is over: forgets it and journals that.
  void End();

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  const LayoutPolicy* layouts_;
  GenerationManager* generations_;

  std::optional<Pending> pending_;
  std::set<std::string> outstanding_spawns_;  // ids asked of agents, not joined yet
};

}  // namespace elastra::coordinator
