#include "worker/reconfiguration_loop.h"

#include <unistd.h>

#include <algorithm>

#include "common/logging.h"
#include "worker/fencing.h"
#include "state/tensor_collection_access.h"

namespace elastra {

using proto::MessageType;
using std::chrono::milliseconds;

proto::JoinRequest ReconfigurationLoop::MakeJoin() const {
  proto::JoinRequest join;
  join.worker_id = options_.worker_id;
  join.host = options_.host;
  join.device = options_.device;
  join.pid = static_cast<int64_t>(getpid());
  join.state = state_->Spec();
  join.model_json = options_.model_json;
  join.device_memory_bytes = options_.device_memory_bytes;
  if (RecordServer* server = channel_->record_server()) join.rendezvous = server->endpoint();
  return join;
}

void ReconfigurationLoop::SetStep(int64_t s) {
  state_->SetScalar(kStepScalarName, s);
  channel_->client().SetHeartbeatStep(s);
}

Status ReconfigurationLoop::Join() {
  if (left_) return FailedPreconditionError("this worker has left the job");
  proto::JoinRequest join = MakeJoin();
  auto reply =
      channel_->client().Call<proto::JoinReply>(MessageType::kJoin, join, milliseconds(10000));
  if (!reply.ok()) return reply.status().WithContext("joining the job");
  TakeLease(*reply);
  LOG(INFO) << "joined job " << options_.job << " at generation " << reply->generation
            << "; waiting for a layout";
  auto action = AwaitGeneration();
  if (!action.ok()) return action.status();
  if (*action == StepAction::kLeave) {
    // Every way to kLeave is a clean one: the coordinator let this worker go, or the job finished.
    dismissed_ = true;
    return AbortedError("dismissed before holding a rank: " + left_why_);
  }
  return OkStatus();
}

StatusOr<StepAction> ReconfigurationLoop::StepEnd(const Status& step_status) {
  if (left_) return FailedPreconditionError("this worker has left the job");
  if (!step_status.ok()) return Recover(step_status);
  // The step's update is in the state, and the counter says so (a rollback then undoes both);
  // but the step counts (agreed, committed, checkpointed) only under the lease, below.
  SetStep(step() + 1);
  channel_->DrainPushes(parked_);
  PushInbox& inbox = channel_->inbox();
  if (inbox.shutdown()) {
    ELASTRA_RETURN_IF_ERROR(Removed(*inbox.shutdown()));
    return AwaitGeneration();
  }
  if (inbox.recover_pending()) return Recover(PeerLostError("the coordinator started a recovery"));
  // A fenced worker does not enter the agreement: its generation cannot complete a step without
  // it until the coordinator confirmed that generation.
  if (auto fenced = WhileFenced()) return *std::move(fenced);
  // The one small collective per step: agree on whether to pause. Everyone contributes the
  // newest target generation it was asked to pause for, so all stop after this same step.
  int64_t flag = static_cast<int64_t>(inbox.pause_target());
  Status s = groups_->control().Allreduce(&flag, 1, DataType::kInt64, ReduceOp::kMax);
  if (!s.ok()) return Recover(s);
  // The agreement may have completed after the lease ran out: the step counts only once the
  // coordinator confirmed that the generation goes on.
  if (auto fenced = WhileFenced()) return *std::move(fenced);
  if (flag > 0) return Pause(static_cast<uint64_t>(flag));
  if (step() % options_.commit_every == 0) ELASTRA_RETURN_IF_ERROR(commits_->Commit());
  checkpoints_->MaybeSnapshot(*state_, step(), channel_->generation(), builder_->layout(),
                              builder_->coords());
  return StepAction::kContinue;
}

void ReconfigurationLoop::Finish() {
  if (left_) return;
  // The last checkpoint write finishes and its report goes out before the Leave, on the same
  // socket: the coordinator, which ends the job at the last member's Leave, has every rank's
  // report of it by then and commits it first (docs/checkpoints.md, "How a job ends").
  checkpoints_->Finish(*state_, step(), channel_->generation(), builder_->layout(),
                       builder_->coords());
  proto::LeaveRequest req{proto::LeaveReason::kFinished, "finished training"};
  auto reply = channel_->client().Call<proto::Ack>(MessageType::kLeave, req, milliseconds(4000),
                                                   channel_->generation());
  // A coordinator that is being restarted (docs/journal.md) may have lost the request: ask
  // again (a finished worker's Leave is acknowledged again).
  for (int attempt = 1; attempt < 4 && !reply.ok() &&
                        (reply.status().code() == StatusCode::kTimedOut ||
                         reply.status().code() == StatusCode::kUnavailable);
       ++attempt) {
    reply = channel_->client().Call<proto::Ack>(MessageType::kLeave, req, milliseconds(4000),
                                                channel_->generation());
  }
  if (!reply.ok()) LOG(WARNING) << "finish not acknowledged: " << reply.status();
  left_ = true;
  Shutdown();
}

void ReconfigurationLoop::Shutdown() {
  checkpoints_->Stop();  // lets a checkpoint write in flight finish and report
  // NCCL communicators are aborted, not finalized: the peers finish and exit at their own
  // pace, and a finalize may wait for them (up to the timeout per communicator).
  groups_->Release();
  channel_->Close();
}

void ReconfigurationLoop::Quit(const std::string& why) {
  if (left_) return;
  // The coordinator goes on without this worker at once, rather than after its heartbeats stop.
  LOG(INFO) << "leaving the job: " << why;
  SayLeaving(why);
  parked_ = false;
  left_ = true;
  Shutdown();
}

StatusOr<StepAction> ReconfigurationLoop::Pause(uint64_t target) {
  channel_->inbox().RaisePauseTarget(target);
  // The copy runs while the PausedReport travels and the next generation is built; the builder
  // waits for it before the state moves (CommitStore::CommitInBackground).
  ELASTRA_RETURN_IF_ERROR(commits_->CommitInBackground());
  LOG(INFO) << "pausing after step " << step() << " for generation " << target;
  proto::PausedReport report{target,           step(), commits_->steps(), false,
                             commits_->place_layout(), commits_->place_rank()};
  report.groups = groups_->Health();  // all stopped between two steps: kept where unchanged
  answered_target_ = std::max(answered_target_, target);
  Status s = channel_->client().Send(MessageType::kPaused, proto::EncodePayload(report),
                                     channel_->generation());
  if (!s.ok()) {
    commits_->Settle();
    return s;
  }
  auto action = AwaitGeneration();
  commits_->Settle();  // never back in the program's hands with the copy still reading the state
  return action;
}

StatusOr<StepAction> ReconfigurationLoop::Recover(const Status& cause) {
  LOG(WARNING) << "step " << step() << " failed in generation " << channel_->generation() << ": "
               << cause << "; recovering";
  groups_->Interrupt();
  proto::FailureReport report{channel_->generation(), static_cast<int32_t>(cause.code()),
                              cause.message()};
  channel_->client()
      .Send(MessageType::kFailureReport, proto::EncodePayload(report), channel_->generation())
      .IgnoreError();
  return AwaitGeneration();
}

void ReconfigurationLoop::TakeLease(const proto::JoinReply& reply) {
  const Duration lease =
      LeaseFor(milliseconds(reply.heartbeat_timeout_ms), milliseconds(reply.heartbeat_interval_ms),
               options_.heartbeat_interval);
  channel_->client().SetLease(lease);
  // A large job's coordinator asks for a longer period than this worker's own (docs/scale.md).
  channel_->client().SetHeartbeatInterval(
      std::max(milliseconds(reply.heartbeat_interval_ms), options_.heartbeat_interval));
  LOG(DEBUG) << "lease " << lease.count() << " ms (heartbeat timeout " << reply.heartbeat_timeout_ms
             << " ms, interval " << reply.heartbeat_interval_ms << " ms)";
}

std::optional<StatusOr<StepAction>> ReconfigurationLoop::WhileFenced() {
  ControlClient& client = channel_->client();
  if (!client.Fenced()) return std::nullopt;
  const LeaseStatus lease = client.lease();
  const uint64_t generation = channel_->generation();
  LOG(WARNING) << "fenced in generation " << generation
               << ": nothing heard from the coordinator for " << lease.silence.count()
               << " ms (lease " << lease.duration.count() << " ms); step " << step()
               << " does not count until the coordinator says where this worker stands";
  checkpoints_->SetReporting(false);
  PushInbox& inbox = channel_->inbox();
  const auto deadline = std::chrono::steady_clock::now() + options_.decision_timeout;
  // Asked again every two heartbeats (so that a healed link is noticed soon), at most once per
  // lease period, at least once per 100 ms.
  const milliseconds ask_every = std::clamp(2 * options_.heartbeat_interval, milliseconds(100),
                                            std::max(lease.duration, milliseconds(100)));
  while (std::chrono::steady_clock::now() < deadline) {
    // What the coordinator pushed decides first: it was sent before the answer below.
    channel_->DrainPushes(parked_);
    if (inbox.shutdown()) {
      Status removed = Removed(*inbox.shutdown());
      if (!removed.ok()) return StatusOr<StepAction>(removed);
      return AwaitGeneration();
    }
    if (inbox.recover_pending()) {
      return Recover(PeerLostError("fenced, and the coordinator started a recovery"));
    }
    auto answer = client.Call<proto::StatusReply>(MessageType::kStatusRequest,
                                                  proto::StatusRequest{}, ask_every);
    if (!answer.ok()) {
      // Unanswered (the partition goes on) or refused: ask again, without spinning on an error
      // that comes back at once.
      if (answer.status().code() != StatusCode::kTimedOut) channel_->Poll(ask_every, parked_);
      continue;
    }
    channel_->DrainPushes(parked_);
    if (inbox.shutdown() || inbox.recover_pending()) continue;  // decided above
    const FenceOutcome outcome = DecideAfterFence(answer->status, options_.worker_id, generation);
    LOG(INFO) << "the coordinator answered the fenced worker: job "
              << proto::ToString(answer->status.state) << " at generation "
              << answer->status.generation << " -> " << ToString(outcome);
    switch (outcome) {
      case FenceOutcome::kResume:
        client.Unfence();
        checkpoints_->SetReporting(true);
        LOG(INFO) << "fence lifted: generation " << generation << " goes on from step " << step();
        return std::nullopt;
      case FenceOutcome::kRecover:
        return Recover(AbortedError(std::string("fenced while the job was ") +
                                    proto::ToString(answer->status.state)));
      case FenceOutcome::kRemoved: {
        Status removed = Removed(AbortedError(
            "the coordinator went on without this worker while it was fenced (declared lost "
            "after a partition of " +
            std::to_string(lease.silence.count()) + " ms or more)"));
        if (!removed.ok()) return StatusOr<StepAction>(removed);
        return AwaitGeneration();
      }
      case FenceOutcome::kJobFinished:
        if (options_.park_when_removed) return LeaveParked("the job finished");
        return StatusOr<StepAction>(AbortedError("the job finished while this worker was fenced"));
      case FenceOutcome::kJobFailed:
        return StatusOr<StepAction>(AbortedError("the job failed while this worker was fenced"));
    }
  }
  return StatusOr<StepAction>(UnavailableError(
      "fenced, and no answer from the coordinator within " +
      std::to_string(options_.decision_timeout.count()) + " ms (ELASTRA_DECISION_TIMEOUT_MS)"));
}

Status ReconfigurationLoop::Removed(const Status& why) {
  groups_->Interrupt();
  if (!options_.park_when_removed) {
    // Nothing of this worker's generation is committed any more: a write in flight is not
    // published (its temporary file goes), so none is left for the job's end to clean up.
    checkpoints_->SetReporting(false);
    LOG(ERROR) << why.message() << "; this worker stops (its agent may start a fresh one)";
    return why;
  }
  LOG(WARNING) << why.message() << "; parking as standby (park_when_removed)";
  Status parked = Park(channel_->generation());
  if (!parked.ok()) return Status(why.code(), why.message() + "; " + parked.ToString());
  channel_->inbox().ClearShutdown();
  return OkStatus();
}

StatusOr<StepAction> ReconfigurationLoop::AwaitGeneration() {
  auto deadline = std::chrono::steady_clock::now() + options_.decision_timeout;
  PushInbox& inbox = channel_->inbox();
  while (parked_ || std::chrono::steady_clock::now() < deadline) {
    if (inbox.shutdown()) {
      // Nothing of the job's is this standby's to hand off or park for (even under mpirun).
      if (!held_rank_ && inbox.shutdown_clean()) return LeaveUnused(inbox.shutdown_reason());
      ELASTRA_RETURN_IF_ERROR(Removed(*inbox.shutdown()));
      continue;  // parked: wait to be brought back
    }
    if (inbox.empty()) {
      const bool polled = channel_->Poll(milliseconds(100), parked_);
      if (!polled && parked_) {
        auto over = CheckJobWhileParked();
        if (!over.ok()) return over.status();
        if (*over) return LeaveParked("the job finished");
      }
      if (!polled) continue;
      if (inbox.empty()) continue;  // a pause request; nothing else to do while waiting
    }
    proto::Envelope e = inbox.Pop();
    if (e.type == MessageType::kRecoverRequest) {
      ELASTRA_RETURN_IF_ERROR(AnswerRecovery(e));
      continue;
    }
    if (parked_ && e.type == MessageType::kShutdown) return EndParked(e);
    if (e.type != MessageType::kNewGeneration) {
      LOG(DEBUG) << "ignoring " << proto::TypeName(e.type) << " while waiting for a layout";
      continue;
    }
    auto gen = proto::DecodePayload<proto::NewGeneration>(e.payload);
    if (!gen.ok()) {
      LOG(ERROR) << "undecodable NewGeneration: " << gen.status();
      continue;
    }
    if (gen->generation <= channel_->generation() || gen->generation < answered_target_) {
      LOG(DEBUG) << "dropping stale generation " << gen->generation;
      continue;
    }
    if (auto done = Enter(*gen)) return *std::move(done);
  }
  return UnavailableError("no decision from the coordinator within " +
                          std::to_string(options_.decision_timeout.count()) + " ms");
}

Status ReconfigurationLoop::AnswerRecovery(const proto::Envelope& e) {
  auto req = proto::DecodePayload<proto::RecoverRequest>(e.payload);
  if (!req.ok() || req->target_generation <= channel_->generation()) return OkStatus();
  groups_->Interrupt();
  answered_target_ = std::max(answered_target_, req->target_generation);
  LOG(INFO) << "recovery for generation " << req->target_generation << ": holding commits "
            << commits_->steps().size() << " (newest step "
            << (commits_->empty() ? -1 : commits_->newest()->step) << ")";
  if (channel_->AnsweredByIo(req->target_generation)) return OkStatus();  // answered already
  proto::PausedReport report{req->target_generation,  step(), commits_->steps(), true,
                             commits_->place_layout(), commits_->place_rank()};
  report.groups = groups_->Health();
  return channel_->client().Send(MessageType::kPaused, proto::EncodePayload(report),
                                 channel_->generation());
}

std::optional<StatusOr<StepAction>> ReconfigurationLoop::Enter(const proto::NewGeneration& gen) {
  if (gen.leave) {
    // Shards that only this worker holds go to their new owners before it leaves.
    Status handed = builder_->HandOff(gen);
    if (!handed.ok()) LOG(WARNING) << "hand-off before leaving failed: " << handed;
    if (gen.standby || options_.park_when_removed) {
      Status parked = Park(gen.generation);
      if (!parked.ok()) return StatusOr<StepAction>(parked);
      return std::nullopt;
    }
    LOG(INFO) << "leaving the job at generation " << gen.generation << " after step " << step();
    left_ = true;
    left_why_ = "removed by generation " + std::to_string(gen.generation);
    Shutdown();
    return StatusOr<StepAction>(StepAction::kLeave);
  }
  Status s = builder_->Apply(gen);
  if (s.ok()) {
    parked_ = false;
    held_rank_ = true;
    return StatusOr<StepAction>(StepAction::kReconfigured);
  }
  LOG(WARNING) << "generation " << gen.generation << " failed to build: " << s;
  groups_->Interrupt();
  proto::FailureReport report{gen.generation, static_cast<int32_t>(s.code()), s.message()};
  channel_->client()
      .Send(MessageType::kFailureReport, proto::EncodePayload(report), gen.generation)
      .IgnoreError();
  if (s.code() == StatusCode::kFailedPrecondition || s.code() == StatusCode::kInvalidArgument) {
    return StatusOr<StepAction>(s);  // this worker cannot take part: nothing to wait for
  }
  return std::nullopt;
}

// Out of the job's generations but still in the job: the communicators and commits go (the
// state comes back from the members at a later grow), and the worker joins again as standby
// under its own id, so the coordinator uses it first when the job grows.
Status ReconfigurationLoop::Park(uint64_t generation) {
  groups_->Release();
  commits_->Release();
  TensorCollectionAccess::ReleaseShards(*state_);  // host and GPU memory go back while parked
  checkpoints_->Stop();     // and the checkpoint writer's (page-locked) image
  proto::JoinRequest join = MakeJoin();
  auto reply =
      channel_->client().Call<proto::JoinReply>(MessageType::kJoin, join, milliseconds(10000));
  if (!reply.ok()) return reply.status().WithContext("parking as standby");
  TakeLease(*reply);
  builder_->WarmUp();  // the slow parts of its next build, before it is needed
  parked_ = true;
  parked_since_check_ = std::chrono::steady_clock::now();
  status_failures_ = 0;
  logging::SetTag("worker " + options_.worker_id + " parked");
  LOG(INFO) << "parked after step " << step() << " (removed by generation " << generation
            << "); waiting to be brought back";
  if (options_.on_park) options_.on_park();  // the program's own memory goes back too
  return OkStatus();
}

// While parked, about once a second: true when the job finished (nothing to come back to),
// kAborted when it failed, kUnavailable when the coordinator stopped answering.
StatusOr<bool> ReconfigurationLoop::CheckJobWhileParked() {
  auto now = std::chrono::steady_clock::now();
  if (now - parked_since_check_ < milliseconds(1000)) return false;
  parked_since_check_ = now;
  proto::StatusRequest brief;
  brief.brief = true;  // only whether the job is over: a full status grows with the job
  auto st = channel_->client().Call<proto::StatusReply>(MessageType::kStatusRequest, brief,
                                                        milliseconds(2000));
  if (!st.ok()) {
    if (++status_failures_ >= 5) {
      return UnavailableError("the coordinator stopped answering while this worker was parked: " +
                              st.status().ToString());
    }
    return false;
  }
  status_failures_ = 0;
  if (st->status.state == proto::JobState::kFailed) {
    SayLeaving("parked: job failed");
    return AbortedError("the job failed while this worker was parked");
  }
  return st->status.state == proto::JobState::kFinished;
}

// Tells the coordinator this worker is gone, so that it need not wait out its heartbeats (nor a
// host waiting for the job's workers to leave, MPI rank 0 keeping its coordinator up, its
// deadline).
void ReconfigurationLoop::SayLeaving(const std::string& detail) {
  proto::LeaveRequest req{proto::LeaveReason::kQuit, detail};
  channel_->client()
      .Call<proto::Ack>(MessageType::kLeave, req, milliseconds(1000), channel_->generation())
      .status()
      .IgnoreError();
}

StatusOr<StepAction> ReconfigurationLoop::LeaveParked(const std::string& why) {
  LOG(INFO) << why << " while this worker was parked; leaving";
  SayLeaving("parked: " + why);
  parked_ = false;
  left_ = true;
  left_why_ = why;
  Shutdown();
  return StepAction::kLeave;
}

StatusOr<StepAction> ReconfigurationLoop::LeaveUnused(const std::string& why) {
  LOG(INFO) << "dismissed before holding a rank: " << why << "; leaving";
  SayLeaving("standby: " + why);
  left_ = true;
  left_why_ = why;
  Shutdown();
  return StepAction::kLeave;
}

StatusOr<StepAction> ReconfigurationLoop::EndParked(const proto::Envelope& e) {
  auto req = proto::DecodePayload<proto::Shutdown>(e.payload);
  // Code 0: the job finished, or it keeps fewer spares and this standby is not needed.
  if (req.ok() && req->exit_code == 0) return LeaveParked(req->reason);
  SayLeaving("parked: job ended");
  return AbortedError("the job ended while this worker was parked: " +
                      (req.ok() ? req->reason : std::string("shutdown")));
}

}  // namespace elastra
