// RestoreManager: taking a job back after the coordinator restarted (docs/journal.md). It opens
// the job's journal, the state directory's file or etcd's keys (docs/ha.md); a new journal first
// records the job, a journal of another job is refused. It hands what the journal holds to each
// manager (committed generations, the workers, checkpoints, a pending resize, every worker id
// used), and, once every restored member was heard from or a heartbeat timeout passed, runs the
// recovery round of a change that was in flight and resumes the pending resize. Resizes are
// refused until then. Time comes from the injected Clock. Thread-compatible: the core's loop owns
// it, like every manager.
#pragma once

#include <string>

#include "common/clock.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/context.h"
#include "coordinator/generation_manager.h"
#include "coordinator/health.h"
#include "journal/journal.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/resize_manager.h"
#include "elastra/status.h"

namespace elastra::coordinator {

class RestoreManager {
 public:
  // Every pointer is not owned and must outlive the manager.
  // Calls the checkpoint, generation and resize managers: each takes back its part of the job.
  RestoreManager(const CoordinatorContext& context, CheckpointManager* checkpoints,
                 GenerationManager* generations, ResizeManager* resizes)
      : options_(context.options),
        clock_(context.clock),
        membership_(context.membership),
        health_(context.health),
        journal_(context.journal),
        checkpoints_(checkpoints),
        generations_(generations),
        resizes_(resizes) {}
  RestoreManager(const RestoreManager&) = delete;
  RestoreManager& operator=(const RestoreManager&) = delete;

  // Opens the journal the options choose (coordinator/journal_location.h: <state_dir>/journal.bin
  // through options.env, or the job's keys on options.etcd) and, when it holds the job, takes it
  // back.
  // The journal's error when it cannot be opened or the job cannot be recorded;
  // kFailedPrecondition when it belongs to another job. The server refuses to start then.
  Status Open();

  // True when a job was taken back from the journal.
  bool restored() const { return restored_; }
  // True while a restart waits to hear from its workers (resizes are refused).
  bool pending() const { return pending_; }

  // Once every restored member was heard from (or a heartbeat timeout passed): the recovery round
  // of a change that was in flight, else the pending resize resumes.
  void MaybeFinish();
  // A recovery round started: it is the restart's recovery round too.
  void OnRecoveryStarted() {
    pending_ = false;
    recover_ = false;
    resizes_->set_restoring(false);
  }

 private:
  void Restore(const JournalState& s);

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  HealthMonitor* health_;
  JournalRecorder* journal_;
  CheckpointManager* checkpoints_;
  GenerationManager* generations_;
  ResizeManager* resizes_;

  bool restored_ = false;
  bool pending_ = false;  // waiting to hear from the restored workers
  bool recover_ = false;  // a change was in flight: recover once they are heard from
  std::string why_;       // the recovery's reason
  TimePoint deadline_{};
};

}  // namespace elastra::coordinator
