// ReconfigurationLoop: the worker's life in the job between the training program's steps
// (docs/protocol.md, docs/design-notes.md). StepEnd() agrees with the peers on whether to pause
// (one small allreduce per step), commits every commit_every steps and starts disk checkpoints;
// a pause request makes every worker stop after the same step, commit and report Paused; a failed
// step or a recovery request interrupts the communicators and reports the failure. Either way the
// worker then waits for the coordinator's decision (AwaitGeneration): it answers recovery
// requests, builds the next generation (GenerationBuilder), hands its shards off and leaves, or
// parks as standby when a shrink takes it out and park_when_removed is set.
//
// Fencing (docs/hosts.md, "Partitions and fencing"): a step counts (commit, checkpoint, the
// step's return) only while the worker holds its lease on the coordinator. StepEnd asks before
// and after the step agreement; a fenced worker completes nothing and asks the coordinator where
// it stands (WhileFenced, decided by DecideAfterFence): it goes on when nothing changed, recovers
// through the normal path when the job is changing, and stops (or parks) when it was left behind.
//
// Thread-safety: the training thread's; the Worker's public calls reach it from there. While it
// waits, the I/O thread may answer a RecoverRequest and interrupt the communicators on its own
// (ControlChannel, GroupManager).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "protocol/messages.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"
#include "elastra/worker.h"
#include "worker/commit_store.h"
#include "worker/control_channel.h"
#include "worker/disk_checkpoints.h"
#include "worker/generation_builder.h"
#include "worker/group_manager.h"

namespace elastra {

class ReconfigurationLoop {
 public:
  // The parts it drives; all outlive it.
  ReconfigurationLoop(const WorkerOptions& options, TensorCollection* state,
                      ControlChannel* channel, GroupManager* groups, CommitStore* commits,
                      DiskCheckpoints* checkpoints, GenerationBuilder* builder)
      : options_(options),
        state_(state),
        channel_(channel),
        groups_(groups),
        commits_(commits),
        checkpoints_(checkpoints),
        builder_(builder) {}
  ReconfigurationLoop(const ReconfigurationLoop&) = delete;
  ReconfigurationLoop& operator=(const ReconfigurationLoop&) = delete;

  // Joins the job and waits for its first generation (Worker::Start()). The join's error,
  // kAborted when the coordinator ends this worker's part before it held a rank (dismissed() when
  // it did so cleanly), kFailedPrecondition after Quit(), the errors of AwaitGeneration().
  Status Join();
  // Whether Join ended because the coordinator let this worker go cleanly before it ever held a
  // rank (Worker::dismissed()).
  bool dismissed() const { return dismissed_; }

  // Worker::StepEnd(): see include/elastra/worker.h.
  StatusOr<StepAction> StepEnd(const Status& step_status);

  // Tells the coordinator this worker finished training (asking again while a restarted
  // coordinator may have lost the request), then shuts down.
  void Finish();

  // Stops the worker's traffic: the checkpoint writer finishes, the communicators are released
  // and the control channel closes.
  void Shutdown();

  // Worker::Leave(): tells the coordinator this worker quits (`why` goes to its log), then shuts
  // down. Nothing when it left or finished already.
  void Quit(const std::string& why);

 private:
  int64_t step() const { return state_->GetScalar(kStepScalarName); }
  void SetStep(int64_t s);
  proto::JoinRequest MakeJoin() const;

  StatusOr<StepAction> Pause(uint64_t target);
  StatusOr<StepAction> Recover(const Status& cause);

  // Takes the lease of a JoinReply (LeaseFor its heartbeat settings and ours).
  void TakeLease(const proto::JoinReply& reply);
  // nullopt when this worker is not fenced, or when the coordinator, once it answers, confirms
  // that nothing changed (the fence is lifted and the step goes on). Otherwise what StepEnd
  // returns: the recovery path's result, the removal's, the job's end, or kUnavailable after
  // decision_timeout without an answer.
  std::optional<StatusOr<StepAction>> WhileFenced();
  // The coordinator stopped this worker (declared lost, or the job ended): `why`, after breaking
  // its communicators; or, with park_when_removed, OK once it parked as standby (the caller then
  // waits for the coordinator as a parked worker does). `why` with the reason when parking fails
  // (the job is over).
  Status Removed(const Status& why);

  // Waits for the coordinator's decision: answers recovery requests, builds the next
  // generation, or leaves. kUnavailable after decision_timeout (never while parked).
  StatusOr<StepAction> AwaitGeneration();
  // Interrupts the communicators for a RecoverRequest and answers it, unless it is stale or the
  // I/O thread answered it already. The error of the answer.
  Status AnswerRecovery(const proto::Envelope& e);
  // Enters generation `gen`, hands off and leaves, or parks. nullopt: keep waiting (parked, or
  // the build failed in a way the coordinator will decide on again).
  std::optional<StatusOr<StepAction>> Enter(const proto::NewGeneration& gen);

  Status Park(uint64_t generation);
  StatusOr<bool> CheckJobWhileParked();
  // A Leave that quits (`detail` goes to the coordinator's log), waited for a second at most.
  void SayLeaving(const std::string& detail);
  // Leaves the job from standby (`why` goes to the log and the coordinator): kLeave.
  StatusOr<StepAction> LeaveParked(const std::string& why);
  // A standby that never held a rank, let go cleanly (a Shutdown of code 0: a spare no longer
  // needed, its host drained, the job finished): it says so and leaves. kLeave.
  StatusOr<StepAction> LeaveUnused(const std::string& why);
  // A Shutdown read while parked: the job ended (kLeave when it finished, else kAborted).
  StatusOr<StepAction> EndParked(const proto::Envelope& e);

  const WorkerOptions& options_;
  TensorCollection* state_;
  ControlChannel* channel_;
  GroupManager* groups_;
  CommitStore* commits_;
  DiskCheckpoints* checkpoints_;
  GenerationBuilder* builder_;

  uint64_t answered_target_ = 0;  // newest target we reported Paused for
  bool left_ = false;
  std::string left_why_;    // why this worker left the job with a kLeave
  bool held_rank_ = false;  // it entered a generation of the job once
  bool dismissed_ = false;  // Join ended with a clean kLeave: nothing to train
  bool parked_ = false;     // removed by a shrink, standing by (park_when_removed)
  std::chrono::steady_clock::time_point parked_since_check_;
  int status_failures_ = 0;  // status requests in a row that got no answer while parked
};

}  // namespace elastra
