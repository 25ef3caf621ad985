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
  if (const HostInfo* host = hosts_->Find(req->host);
      host != nullptr && host->state == proto::HostState::kDrained &&
      hosts_->SpawnHost(req->worker_id) == nullptr) {
    outbox_->SendError(
        identity, e.request_id,
        FailedPreconditionError("host " + req->host + " was drained; no worker joins from it"));
    return;
  }
  const WorkerInfo* existing = membership_->Find(req->worker_id);
  bool known_standby = existing != nullptr && existing->state == WorkerState::kStandby;
  if (!known_standby && membership_->StandbyCount() >= static_cast<size_t>(options_->max_workers)) {
    outbox_->SendError(identity, e.request_id,
                       ResourceExhaustedError("already " + std::to_string(options_->max_workers) +
                                              " standby workers (max_workers)"));
    return;
  }
  Status s = membership_->Join(*req, identity);
  if (!s.ok()) {
    outbox_->SendError(identity, e.request_id, s);
    return;
  }
  WorkerInfo* joined = membership_->Find(req->worker_id);  // it joined: not null
  host_manager_->OnJoined(joined);
  health_->Beat(joined->slot);
  journal_->Join(req->worker_id);
  if (layouts_->Learn(*req)) journal_->State(layouts_->state());
  proto::JoinReply reply;
  reply.worker_id = req->worker_id;
  reply.generation = generations_->generation();
  reply.heartbeat_interval_ms = options_->heartbeat_interval.count();
  reply.heartbeat_timeout_ms = options_->heartbeat_timeout.count();
  outbox_->Send(identity, proto::MessageType::kJoinReply, reply, e.request_id);
  LOG(INFO) << "worker " << req->worker_id << " joined (host " << req->host << ", pid " << req->pid
            << ")";
  generations_->MaybeFormFirstGeneration();
  generations_->MaybeResumeWaitingRecovery();
  resizes_->ContinueIfWaitingForWorkers();
  resizes_->MaybeRegrow();
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
  health_->Forget(w->slot);
  switch (w->state) {
    case WorkerState::kStandby:
    case WorkerState::kLeaving:
    case WorkerState::kLost:
      membership_->Remove(e.sender);
      journal_->WorkerState(e.sender, JournalWorkerState::kRemoved);
      resizes_->ContinueIfWaitingForWorkers();  // a grow may wait for this worker's slot
      return;
    case WorkerState::kFinished:
      return;
    case WorkerState::kMember:
      break;
  }
  if (req->reason == proto::LeaveReason::kFinished) {
    journal_->WorkerState(e.sender, JournalWorkerState::kFinished);
    membership_->SetFinished(e.sender);  // keeps its rank for status
    generations_->MaybeFinishJob();
    return;
  }
  // Any other reason: the member is gone from this generation; the others recover without it.
  generations_->LoseWorkers({e.sender}, "left (" + req->detail + ")");
}

void WorkerService::OnHeartbeat(const std::string& identity, const proto::Envelope& e,
                                WorkerInfo* w) {
  if (w == nullptr) {
    if (host_manager_->OnAgentHeartbeat(e.sender)) outbox_->SendHeartbeatAck(identity);
    return;
  }
  auto hb = proto::DecodePayload<proto::Heartbeat>(e.payload);
  if (!hb.ok()) {
    outbox_->CountMalformed();
    return;
  }
  if (w->state == WorkerState::kLost) {
    // The job went on without it (a partition healed, a stall ended): no lease, but the order to
    // stop, which the Shutdown sent when it was declared lost may not have reached.
    if (clock_->Now() - w->last_shutdown >= options_->heartbeat_timeout) {
      w->last_shutdown = clock_->Now();
      outbox_->Send(identity, proto::MessageType::kShutdown,
                    proto::Shutdown{1, "declared lost: the job went on without this worker"}, 0);
    }
    return;
  }
  if (w->state == WorkerState::kMember || w->state == WorkerState::kStandby) {
    health_->Beat(w->slot);
    if (heartbeat_listener_) heartbeat_listener_(*w, *hb);
  }
  w->step = std::max(w->step, hb->step);
  outbox_->SendHeartbeatAck(identity);
}

void WorkerService::OnPaused(const proto::Envelope& e, WorkerInfo* sender) {
  auto report = outbox_->DecodeOrDrop<proto::PausedReport>(e);
  if (!report) return;
  if (sender == nullptr || !generations_->OnPaused(e.sender, *report, sender->rank).ok()) {
    outbox_->CountStale();
    return;
  }
  // The sender is still known: a report never removes a worker (a recovery marks the lost ones).
  sender->step = std::max(sender->step, report->step);
}

void WorkerService::OnGenerationReady(const proto::Envelope& e, const WorkerInfo* sender) {
  auto ready = outbox_->DecodeOrDrop<proto::GenerationReady>(e);
  if (!ready) return;
  if (sender == nullptr || !generations_->OnReady(e.sender, *ready, sender->rank).ok()) {
    outbox_->CountStale();
  }
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

void WorkerService::OnProcessExited(const std::string& identity, proto::Role role,
                                    const proto::Envelope& e) {
  auto exited = proto::DecodePayload<proto::ProcessExited>(e.payload);
  if (!exited.ok()) {
    outbox_->CountMalformed();
    return;
  }
  WorkerInfo* w = membership_->Find(exited->worker_id);
  if (role != proto::Role::kAdmin) {
    // A worker key speaks for one agent: it reports the workers of its own host only.
    const HostInfo* own = hosts_->FindByAgent(e.sender);
    if (own == nullptr) {
      outbox_->SendError(identity, e.request_id,
                         UnauthenticatedError("ProcessExited needs an admin key or a registered "
                                              "agent's worker key; '" +
                                              e.sender + "' registered no host"));
      return;
    }
    const HostInfo* asked = hosts_->SpawnHost(exited->worker_id);
    const std::string where = w != nullptr ? w->host : asked != nullptr ? asked->name : own->name;
    if (where != own->name) {
      outbox_->SendError(identity, e.request_id,
                         UnauthenticatedError("worker " + exited->worker_id + " runs on host " +
                                              where + "; the agent of host " + own->name +
                                              " reports only its own workers"));
      return;
    }
  }
  host_manager_->OnExited(exited->worker_id);
  if (w == nullptr) return;
  if (w->state == WorkerState::kMember && exited->exit_code == 0 && exited->signal == 0) {
    // A member that exited 0 has finished: its Leave comes over its own socket and may arrive
    // after this report from its agent. It stays watched: without a Leave it is lost when its
    // heartbeat deadline passes, as a silent member is.
    LOG(INFO) << "worker " << w->id << " exited with code 0; waiting for its Leave";
    return;
  }
  health_->Forget(w->slot);
  switch (w->state) {
    case WorkerState::kLeaving:
    case WorkerState::kStandby:
      journal_->WorkerState(w->id, JournalWorkerState::kRemoved);
      membership_->Remove(w->id);
      host_manager_->MaybeStartFirstWorkers();  // a standby worker of the first generation
      resizes_->ContinueIfWaitingForWorkers();  // a grow may wait for this worker's slot
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

std::vector<std::string> WorkerService::ExpiredIds() {
  std::vector<std::string> ids;
  for (uint32_t slot : health_->TakeExpired()) {
    if (const WorkerInfo* w = membership_->AtSlot(slot)) ids.push_back(w->id);
  }
  std::sort(ids.begin(), ids.end());  // the order they are handled and logged in
  return ids;
}

void WorkerService::ExpireHeartbeats() {
  std::vector<std::string> lost;
  const auto expired = ExpiredIds();
  for (const auto& id : expired) {
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
  // A member on a host whose agent is silent too takes the host with it (one event).
  if (!lost.empty()) lost = host_manager_->LoseHostsOf(lost);
  if (!lost.empty()) generations_->LoseWorkers(lost, "missed heartbeat deadline");
  if (!expired.empty()) {
    host_manager_->MaybeStartFirstWorkers();
    resizes_->ContinueIfWaitingForWorkers();  // a grow may wait for a leaver's slot
  }
}

}  // namespace elastra::coordinator
