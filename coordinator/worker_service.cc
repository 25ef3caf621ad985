#include "coordinator/worker_service.h"

#include <algorithm>
#include <vector>

#include "common/logging.h"

namespace elastra::coordinator {

void WorkerService::OnJoin(const std::string& identity, const proto::Envelope& e) {
  auto req = outbox_->DecodeOrReply<proto::JoinRequest>(identity, e);
  if (!req) return;
  if (generations_->job_over()) {
    outbox_->SendError(identity, e.request_id,
                       FailedPreconditionError("the job is over; not joining"));
    return;
  }
  // The state it registers is what layouts are checked and ranks assigned against: its sizes
  // must keep that arithmetic in range (found by the coordinator_core fuzz target).
  if (Status state = CheckState(req->state); !state.ok()) {
    outbox_->SendError(identity, e.request_id, state.WithContext("join refused"));
    return;
  }
  const WorkerInfo* existing = membership_->Find(req->worker_id);
  bool known_standby = existing != nullptr && existing->state == WorkerState::kStandby;
  if (!known_standby &&
      membership_->Standby().size() >= static_cast<size_t>(options_->max_workers)) {
    outbox_->SendError(identity, e.request_id,
                       ResourceExhaustedError("already " + std::to_string(options_->max_workers) +
                                              " standby workers (max_workers)"));
    return;
  }
  Status s = membership_->Join(*req, identity, clock_->Now());
  if (!s.ok()) {
    outbox_->SendError(identity, e.request_id, s);
    return;
  }
  resizes_->StopAwaiting(req->worker_id);
  health_->Beat(req->worker_id);
  journal_->Join(req->worker_id);
  layouts_->Learn(*req);
  proto::JoinReply reply;
  reply.worker_id = req->worker_id;
  reply.generation = generations_->generation();
  reply.heartbeat_interval_ms = options_->heartbeat_interval.count();
  reply.heartbeat_timeout_ms = options_->heartbeat_timeout.count();
  outbox_->Send(identity, proto::MessageType::kJoinReply, reply, e.request_id);
  LOG(INFO) << "worker " << req->worker_id << " joined (host " << req->host << ", pid " << req->pid
            << ")";
  generations_->MaybeFormFirstGeneration();
  resizes_->ContinueIfWaitingForWorkers();
}

void WorkerService::OnLeave(const std::string& identity, const proto::Envelope& e) {
  auto req = outbox_->DecodeOrReply<proto::LeaveRequest>(identity, e);
  if (!req) return;
  WorkerInfo* w = membership_->Find(e.sender);
  if (w == nullptr) {
    outbox_->SendError(identity, e.request_id,
                       NotFoundError("no worker '" + e.sender + "' in this job"));
    return;
  }
  outbox_->Send(identity, proto::MessageType::kAck, proto::Ack{}, e.request_id);
  health_->Forget(w->id);
  switch (w->state) {
    case WorkerState::kStandby:
    case WorkerState::kLeaving:
    case WorkerState::kLost:
      membership_->Remove(e.sender);
      journal_->WorkerState(e.sender, JournalWorkerState::kRemoved);
      return;
    case WorkerState::kFinished:
      return;
    case WorkerState::kMember:
      break;
  }
  if (req->reason == proto::LeaveReason::kFinished) {
    journal_->WorkerState(e.sender, JournalWorkerState::kFinished);
    w->state = WorkerState::kFinished;  // keeps its rank for status
    generations_->MaybeFinishJob();
    return;
  }
  // Any other reason: the member is gone from this generation; the others recover without it.
  generations_->LoseWorkers({e.sender}, "left (" + req->detail + ")");
}

void WorkerService::OnHeartbeat(const proto::Envelope& e) {
  WorkerInfo* w = membership_->Find(e.sender);
  if (w == nullptr) return;
  auto hb = proto::DecodePayload<proto::Heartbeat>(e.payload);
  if (!hb.ok()) {
    outbox_->CountMalformed();
    return;
  }
  if (w->state == WorkerState::kMember || w->state == WorkerState::kStandby) {
    health_->Beat(w->id);
    w->last_heartbeat = clock_->Now();
  }
  w->step = std::max(w->step, hb->step);
}

void WorkerService::OnPaused(const proto::Envelope& e) {
  auto report = outbox_->DecodeOrDrop<proto::PausedReport>(e);
  if (!report) return;
  if (!generations_->OnPaused(e.sender, *report).ok()) {
    outbox_->CountStale();
    return;
  }
  if (WorkerInfo* w = membership_->Find(e.sender)) w->step = std::max(w->step, report->step);
}

void WorkerService::OnGenerationReady(const proto::Envelope& e) {
  auto ready = outbox_->DecodeOrDrop<proto::GenerationReady>(e);
  if (!ready) return;
  if (!generations_->OnReady(e.sender, *ready).ok()) outbox_->CountStale();
}

void WorkerService::OnFailureReport(const proto::Envelope& e) {
  auto report = outbox_->DecodeOrDrop<proto::FailureReport>(e);
  if (!report) return;
  const WorkerInfo* w = membership_->Find(e.sender);
  if (w == nullptr || w->state != WorkerState::kMember ||
      !generations_->FailureIsCurrent(report->generation)) {
    outbox_->CountStale();
    return;
  }
  generations_->StartRecovery({}, "a collective failed on " + e.sender + ": " + report->message);
}

void WorkerService::OnProcessExited(const proto::Envelope& e) {
  auto exited = proto::DecodePayload<proto::ProcessExited>(e.payload);
  if (!exited.ok()) {
    outbox_->CountMalformed();
    return;
  }
  resizes_->StopAwaiting(exited->worker_id);
  WorkerInfo* w = membership_->Find(exited->worker_id);
  if (w == nullptr) return;
  health_->Forget(w->id);
  switch (w->state) {
    case WorkerState::kLeaving:
    case WorkerState::kStandby:
      journal_->WorkerState(w->id, JournalWorkerState::kRemoved);
      membership_->Remove(w->id);
      return;
    case WorkerState::kMember:
      generations_->LoseWorkers({w->id}, "process exited (code " +
                                             std::to_string(exited->exit_code) + ", signal " +
                                             std::to_string(exited->signal) + ")");
      return;
    default:
      return;
  }
}

void WorkerService::OnAgentRegister(const std::string& identity, const proto::Envelope& e) {
  auto req = outbox_->DecodeOrReply<proto::AgentRegister>(identity, e);
  if (!req) return;
  AgentInfo agent;
  agent.identity = identity;
  agent.sender = e.sender;
  agent.host = req->host;
  agent.max_workers = req->max_workers;
  membership_->RegisterAgent(agent);
  outbox_->Send(identity, proto::MessageType::kAck, proto::Ack{}, e.request_id);
  if (generations_->job_over()) {
    // An agent registering again after a restart may have missed the job's end.
    proto::Shutdown shutdown;
    const bool finished = generations_->state() == proto::JobState::kFinished;
    shutdown.exit_code = finished ? 0 : 1;
    shutdown.reason = finished ? "every member finished" : "the job failed";
    outbox_->Send(identity, proto::MessageType::kShutdown, shutdown, 0);
    return;
  }
  resizes_->ContinueIfWaitingForWorkers();
}

void WorkerService::ExpireHeartbeats() {
  std::vector<std::string> lost;
  for (const auto& id : health_->TakeExpired()) {
    WorkerInfo* w = membership_->Find(id);
    if (w == nullptr) continue;
    switch (w->state) {
      case WorkerState::kMember:
        lost.push_back(id);
        break;
      case WorkerState::kStandby:
        LOG(WARNING) << "standby worker " << id << " missed its heartbeat deadline";
        membership_->SetState(id, WorkerState::kLost);
        journal_->WorkerState(id, JournalWorkerState::kRemoved);
        break;
      case WorkerState::kLeaving:
        membership_->Remove(id);
        break;
      default:
        break;
    }
  }
  if (!lost.empty()) generations_->LoseWorkers(lost, "missed heartbeat deadline");
}

}  // namespace elastra::coordinator
