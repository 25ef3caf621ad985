#include "coordinator/resize_manager.h"

#include "common/logging.h"

namespace elastra::coordinator {
namespace {

double MsBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

void ResizeManager::OnResize(const std::string& identity, const proto::Envelope& e,
                             bool restarting) {
  auto decoded = outbox_->DecodeOrReply<proto::ResizeRequest>(identity, e);
  if (!decoded) return;
  const proto::ResizeRequest& req = *decoded;
  auto refuse = [&](Status s) { outbox_->SendError(identity, e.request_id, s); };
  if (req.workers < 1) {
    return refuse(InvalidArgumentError("a job needs at least 1 worker; asked for " +
                                       std::to_string(req.workers)));
  }
  if (req.workers > options_->max_workers) {
    return refuse(InvalidArgumentError("asked for " + std::to_string(req.workers) +
                                       " workers; this job allows at most " +
                                       std::to_string(options_->max_workers) + " (max_workers)"));
  }
  if (req.has_layout && !IsValidLayout(req.layout)) {
    return refuse(InvalidArgumentError("layout " + req.layout.ToString() +
                                       " has a degree below 1 or more than " +
                                       std::to_string(kMaxWorld) + " ranks"));
  }
  if (req.has_layout && req.layout.world() != req.workers) {
    return refuse(InvalidArgumentError("layout " + req.layout.ToString() + " has " +
                                       std::to_string(req.layout.world()) + " ranks, not " +
                                       std::to_string(req.workers)));
  }
  if (req.has_layout) {
    Status valid = layouts_->Validate(req.layout);
    if (!valid.ok()) return refuse(valid);
  }
  if (generations_->job_over())
    return refuse(FailedPreconditionError(std::string("the job is ") +
                                          proto::ToString(generations_->state())));
  if (generations_->generation() == 0) {
    return refuse(
        FailedPreconditionError("no generation has formed yet; wait for the job to "
                                "start before resizing"));
  }
  for (const auto& id : generations_->members()) {
    const WorkerInfo* w = membership_->Find(id);
    if (w != nullptr && w->state == WorkerState::kFinished) {
      return refuse(
          FailedPreconditionError("worker " + id + " has finished training; the job is ending"));
    }
  }
  if (pending_ || generations_->phase() != Phase::kIdle || restarting) {
    return refuse(FailedPreconditionError(std::string("another reconfiguration is in progress (") +
                                          proto::ToString(generations_->state()) +
                                          "); retry when it is done"));
  }
  const size_t members = membership_->Members().size();
  if (static_cast<size_t>(req.workers) == members &&
      (!req.has_layout || req.layout == generations_->layout())) {
    proto::ResizeReply reply;
    reply.phase = proto::ResizePhase::kDone;
    reply.generation = generations_->generation();
    reply.workers = req.workers;
    reply.layout = generations_->layout();
    reply.message = "the job already runs with " + std::to_string(members) + " workers";
    outbox_->Send(identity, proto::MessageType::kResizeReply, reply, e.request_id);
    return;
  }
  Pending p;
  p.identity = identity;
  p.request_id = e.request_id;
  p.workers = req.workers;
  p.has_layout = req.has_layout;
  p.layout = req.layout;
  p.wait = req.wait;
  p.received = clock_->Now();
  pending_ = p;
  journal_->Resize(p.workers, p.has_layout, p.layout);
  proto::ResizeReply accepted;
  accepted.phase = proto::ResizePhase::kAccepted;
  accepted.generation = generations_->generation();
  accepted.workers = req.workers;
  accepted.layout =
      req.has_layout ? req.layout : layouts_->Default(req.workers, generations_->layout());
  outbox_->Send(identity, proto::MessageType::kResizeReply, accepted, e.request_id);
  LOG(INFO) << "resize to " << req.workers << " workers accepted (now " << members << ")";
  Continue();
}

void ResizeManager::Reply(proto::ResizePhase phase, const std::string& message) {
  if (!pending_) return;
  if (pending_->wait) {
    proto::ResizeReply reply;
    reply.phase = phase;
    reply.generation = generations_->generation();
    reply.workers = static_cast<int32_t>(membership_->Members().size());
    reply.layout = generations_->layout();
    reply.message = message;
    if (phase == proto::ResizePhase::kDone && !generations_->history().empty()) {
      const auto& t = generations_->history().back().timings;
      reply.downtime_ms = t.downtime_ms;
      reply.agreement_ms = t.agreement_ms;
      reply.rebuild_ms = t.rebuild_ms;
      reply.transfer_ms = t.transfer_ms;
    }
    reply.total_ms = MsBetween(pending_->received, clock_->Now());
    outbox_->Send(pending_->identity, proto::MessageType::kResizeReply, reply,
                  pending_->request_id);
  }
  if (phase != proto::ResizePhase::kDone) {
    LOG(WARNING) << "resize " << proto::ToString(phase) << ": " << message;
  }
}

void ResizeManager::Continue() {
  if (!pending_ || generations_->phase() != Phase::kIdle || generations_->job_over()) return;
  const auto members = membership_->Members();
  const size_t want = static_cast<size_t>(pending_->workers);
  if (want == members.size() &&
      (!pending_->has_layout || pending_->layout == generations_->layout())) {
    Reply(proto::ResizePhase::kDone, "");
    End();
    outstanding_spawns_.clear();
    return;
  }
  if (want > members.size()) {
    const size_t have = members.size() + membership_->Standby().size();
    if (have < want) {
      if (!pending_->waiting_for_workers) {
        pending_->waiting_for_workers = true;
        pending_->spawn_deadline = clock_->Now() + options_->spawn_timeout;
      }
      size_t needed = want - have;
      needed = needed > outstanding_spawns_.size() ? needed - outstanding_spawns_.size() : 0;
      if (needed > 0 && !membership_->agents().empty()) {
        proto::SpawnRequest spawn;
        for (size_t i = 0; i < needed; ++i) {
          std::string id;
          do {
            id = membership_->NextWorkerId();
          } while (outstanding_spawns_.count(id));
          outstanding_spawns_.insert(id);
          spawn.worker_ids.push_back(id);
        }
        journal_->Ids(spawn.worker_ids);
        const AgentInfo& agent = membership_->agents().front();
        outbox_->Send(agent.identity, proto::MessageType::kSpawnRequest, spawn, 0);
        LOG(INFO) << "asked agent " << agent.sender << " to start " << needed << " worker(s)";
      }
      return;  // wait for joins
    }
    pending_->waiting_for_workers = false;
  }
  generations_->BeginPause(SizeGoal{want, pending_->has_layout, pending_->layout});
}

void ResizeManager::ContinueIfWaitingForWorkers() {
  if (pending_ && pending_->waiting_for_workers && generations_->phase() == Phase::kIdle) {
    Continue();
  }
}

void ResizeManager::Tick() {
  if (pending_ && pending_->waiting_for_workers && generations_->phase() == Phase::kIdle &&
      clock_->Now() >= pending_->spawn_deadline) {
    size_t have = membership_->Members().size() + membership_->Standby().size();
    Reply(proto::ResizePhase::kFailed,
          "only " + std::to_string(have) + " of " + std::to_string(pending_->workers) +
              " workers were available within spawn_timeout (" +
              std::to_string(options_->spawn_timeout.count()) + " ms)");
    End();
    outstanding_spawns_.clear();
  }
}

void ResizeManager::OnJobEnd(const std::string& message) {
  Reply(proto::ResizePhase::kFailed, message);
  pending_.reset();  // the end record closes it
}

void ResizeManager::Restore(const JournalResize& resize) {
  Pending p;
  p.workers = resize.workers;
  p.has_layout = resize.has_layout;
  p.layout = resize.layout;
  p.wait = false;  // the client that asked is gone (docs/journal.md)
  p.received = clock_->Now();
  pending_ = p;
}

void ResizeManager::End() {
  if (!pending_) return;
  pending_.reset();
  journal_->ResizeEnd();
}

}  // namespace elastra::coordinator
