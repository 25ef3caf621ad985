#include "coordinator/coordinator_core.h"

#include "elastra/sharding.h"

#include <algorithm>

#include "common/codec.h"
#include "common/logging.h"

namespace elastra::coordinator {
namespace {


// The options with every default filled in and every bound applied.
CoordinatorOptions Normalized(CoordinatorOptions o) {
  if (o.recover_timeout.count() <= 0) o.recover_timeout = o.heartbeat_timeout;
  if (o.initial_workers < 1) o.initial_workers = 1;
  if (o.max_workers < 1) o.max_workers = 1;
  if (o.clock == nullptr) o.clock = SystemClock::Get();
  if (o.env == nullptr) o.env = checkpoint::Env::Default();
  return o;
}

double MsBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options)
    : options_(Normalized(options)),
      clock_(options_.clock),
      outbox_(options_.job, &membership_, [this] { return generation_; }),
      journal_(&membership_),
      checkpoints_(options_.job, options_.checkpoint_keep, options_.env, &journal_),
      health_(clock_, options.heartbeat_timeout),
      kv_(clock_, &outbox_),
      reconf_(clock_) {
  layout_.dp = 0;
  if (!options_.state_dir.empty()) OpenJournal();
}

// ---------------------------------------------------------------------------------------------
// Journal.

void CoordinatorCore::OpenJournal() {
  auto journal = Journal::Open(options_.state_dir + "/journal.bin", options_.env);
  if (!journal.ok()) {
    journal_status_ = journal.status();
    return;
  }
  journal_.Attach(std::move(journal).value());
  const JournalState& s = journal_.journal()->state();
  if (s.empty()) {
    journal_status_ = journal_.journal()->RecordJob(options_.job, options_.initial_workers,
                                          options_.max_workers);
    return;
  }
  if (s.job != options_.job) {
    journal_status_ = FailedPreconditionError("the journal in " + options_.state_dir +
                                              " belongs to job '" + s.job + "', not '" +
                                              options_.job + "'");
    return;
  }
  Restore(s);
}

void CoordinatorCore::Restore(const JournalState& s) {
  restored_ = true;
  const TimePoint now = clock_->Now();
  highest_generation_ = s.highest_generation;
  checkpoints_.Restore(s.checkpoints);
  for (const auto& id : s.seen_ids) membership_.MarkSeen(id);
  for (const auto& g : s.history) {
    HistoryEntry h;
    h.generation = g.generation;
    h.reason = g.reason;
    h.layout = g.layout;
    for (const auto& m : g.members) h.workers.push_back(m.id);
    h.timings.downtime_ms = g.downtime_ms;
    h.timings.agreement_ms = g.agreement_ms;
    h.timings.rebuild_ms = g.rebuild_ms;
    h.timings.transfer_ms = g.transfer_ms;
    history_.push_back(std::move(h));
  }
  auto restore_worker = [&](const JournalWorker& w) {
    proto::JoinRequest join;
    join.worker_id = w.id;
    join.host = w.host;
    join.device = w.device;
    join.pid = w.pid;
    membership_.Join(join, /*identity=*/"", now).IgnoreError();
  };
  auto state_of = [&](const std::string& id) -> std::optional<JournalWorkerState> {
    auto it = s.worker_states.find(id);
    if (it == s.worker_states.end()) return std::nullopt;
    return it->second;
  };
  // Members: the committed generation's, then (a change in flight) the workers it involved.
  std::vector<std::string> members;
  if (const JournalGeneration* g = s.current()) {
    generation_ = g->generation;
    layout_ = g->layout;
    job_state_ = proto::JobState::kRunning;
    for (const auto& m : g->members) {
      current_members_.push_back(m.id);
      if (state_of(m.id) == JournalWorkerState::kLost) continue;
      restore_worker(m);
      members.push_back(m.id);
    }
  }
  if (s.change_in_flight) {
    for (const auto& w : s.change_workers) {
      if (std::find(members.begin(), members.end(), w.id) != members.end()) continue;
      if (state_of(w.id).has_value()) continue;
      restore_worker(w);
      members.push_back(w.id);
    }
  }
  for (const auto& w : s.standby) {
    if (std::find(members.begin(), members.end(), w.id) != members.end()) continue;
    restore_worker(w);
    health_.Beat(w.id);
  }
  membership_.AssignRanks(members);
  for (const auto& id : members) {
    if (state_of(id) == JournalWorkerState::kFinished) {
      membership_.SetState(id, WorkerState::kFinished);
    } else {
      health_.Beat(id);  // a fresh deadline: its heartbeats resume once it reconnects
    }
  }
  if (s.resize) {
    PendingResize p;
    p.workers = s.resize->workers;
    p.has_layout = s.resize->has_layout;
    p.layout = s.resize->layout;
    p.wait = false;  // the client that asked is gone (docs/journal.md)
    p.received = now;
    resize_ = p;
  }
  if (s.ended == JobOutcome::kFinished) job_state_ = proto::JobState::kFinished;
  if (s.ended == JobOutcome::kFailed) job_state_ = proto::JobState::kFailed;
  restart_pending_ = !JobOver();
  restart_recover_ = s.change_in_flight;
  restart_why_ = "the coordinator restarted while changing to generation " +
                 std::to_string(s.change_target) + " (" + ToString(s.change_kind) + ")";
  restart_deadline_ = now + options_.heartbeat_timeout;
  LOG(WARNING) << "took back job " << options_.job << " from " << journal_.journal()->path() << " ("
               << s.records << " records): generation " << generation_ << ", "
               << membership_.Members().size() << " member(s), " << membership_.Standby().size()
               << " standby"
               << (s.change_in_flight ? "; a change was in flight: recovering once the workers "
                                        "reconnect"
                                      : "")
               << (s.ended ? std::string("; the job is ") + ToString(*s.ended) : std::string());
}

void CoordinatorCore::MaybeFinishRestart() {
  if (!restart_pending_) return;
  if (JobOver()) {
    restart_pending_ = false;
    return;
  }
  bool all_heard = true;
  for (const auto& id : membership_.Members()) {
    const WorkerInfo* w = membership_.Find(id);
    if (w != nullptr && w->identity.empty()) all_heard = false;
  }
  if (!all_heard && clock_->Now() < restart_deadline_) return;
  restart_pending_ = false;
  if (restart_recover_ && reconf_.phase() == Phase::kIdle) {
    restart_recover_ = false;
    StartRecovery({}, restart_why_);
    return;
  }
  restart_recover_ = false;
  if (resize_ && reconf_.phase() == Phase::kIdle) ContinueResize();
}

void CoordinatorCore::JournalLost(const std::string& id) {
  journal_.WorkerState(id, JournalWorkerState::kLost);
}

void CoordinatorCore::EndResize() {
  if (!resize_) return;
  resize_.reset();
  journal_.ResizeEnd();
}

Status CoordinatorCore::RecordCheckpoint(int64_t step, uint64_t generation,
                                         const std::string& dir) {
  return checkpoints_.Record(step, generation, dir);
}

// ---------------------------------------------------------------------------------------------
// Entry points.

std::vector<Outgoing> CoordinatorCore::HandleMalformed(const std::string& identity,
                                                       const Status& error) {
  outbox_.CountMalformed();
  outbox_.SendError(identity, 0, error);
  return outbox_.Take();
}

std::vector<Outgoing> CoordinatorCore::Handle(const std::string& identity, proto::Role role,
                                              const proto::Envelope& e) {
  using T = proto::MessageType;
  const bool admin = role == proto::Role::kAdmin;
  if (!e.job.empty() && e.job != options_.job) {
    outbox_.SendError(identity, e.request_id,
              InvalidArgumentError("this coordinator runs job '" + options_.job + "', not '" +
                                   e.job + "'"));
    return outbox_.Take();
  }
  // The latest message from a worker tells where it is now.
  if (!e.sender.empty() && e.type != T::kJoin) {
    if (WorkerInfo* w = membership_.Find(e.sender)) w->identity = identity;
  }
  switch (e.type) {
    case T::kJoin: OnJoin(identity, e); break;
    case T::kLeave: OnLeave(identity, e); break;
    case T::kHeartbeat: OnHeartbeat(e); break;
    case T::kPaused: OnPaused(e); break;
    case T::kGenerationReady: OnGenerationReady(e); break;
    case T::kFailureReport: OnFailureReport(e); break;
    case T::kCheckpointWritten: OnCheckpointWritten(e); break;
    case T::kKvSet:
    case T::kKvGet:
    case T::kKvWait:
    case T::kKvAdd: kv_.Handle(identity, e); break;
    case T::kStatusRequest: {
      proto::StatusReply reply;
      reply.status = Snapshot();
      outbox_.Send(identity, T::kStatusReply, reply, e.request_id);
      break;
    }
    case T::kResize:
    case T::kAgentRegister:
    case T::kProcessExited:
      if (!admin) {
        outbox_.SendError(identity, e.request_id,
                  UnauthenticatedError(std::string(proto::TypeName(e.type)) +
                                       " needs an admin key; this client holds a worker key"));
        break;
      }
      if (e.type == T::kResize) OnResize(identity, e);
      else if (e.type == T::kAgentRegister) OnAgentRegister(identity, e);
      else OnProcessExited(e);
      break;
    default:
      outbox_.SendError(identity, e.request_id,
                InvalidArgumentError(std::string("the coordinator does not accept ") +
                                     proto::TypeName(e.type) + " messages"));
      break;
  }
  return outbox_.Take();
}

#define ELASTRA_DECODE_OR_REPLY(Type, var)                \
  auto var##_or = outbox_.DecodeOrReply<Type>(identity, e); \
  if (!var##_or) return;                                  \
  const Type& var = *var##_or

// Fire-and-forget messages: a bad payload is counted and answered with request id 0.
#define ELASTRA_DECODE_OR_DROP(Type, var)       \
  auto var##_or = outbox_.DecodeOrDrop<Type>(e); \
  if (!var##_or) return;                         \
  const Type& var = *var##_or

std::vector<Outgoing> CoordinatorCore::Tick() {
  kv_.Tick();
  if (JobOver()) return outbox_.Take();

  std::vector<std::string> lost;
  for (const auto& id : health_.TakeExpired()) {
    WorkerInfo* w = membership_.Find(id);
    if (w == nullptr) continue;
    switch (w->state) {
      case WorkerState::kMember: lost.push_back(id); break;
      case WorkerState::kStandby:
        LOG(WARNING) << "standby worker " << id << " missed its heartbeat deadline";
        membership_.SetState(id, WorkerState::kLost);
        journal_.WorkerState(id, JournalWorkerState::kRemoved);
        break;
      case WorkerState::kLeaving: membership_.Remove(id); break;
      default: break;
    }
  }
  if (!lost.empty()) LoseWorkers(lost, "missed heartbeat deadline");
  MaybeFinishRestart();

  if (reconf_.DeadlinePassed()) {
    auto silent = reconf_.Unanswered();
    if (!silent.empty()) {
      LOG(WARNING) << silent.size() << " survivor(s) did not answer the recover request in time";
      LoseWorkers(silent, "did not answer the recover request");
    }
  }

  if (resize_ && resize_->waiting_for_workers && reconf_.phase() == Phase::kIdle &&
      clock_->Now() >= resize_->spawn_deadline) {
    size_t have = membership_.Members().size() + membership_.Standby().size();
    ReplyResize(proto::ResizePhase::kFailed, "only " + std::to_string(have) + " of " +
                              std::to_string(resize_->workers) +
                              " workers were available within spawn_timeout (" +
                              std::to_string(options_.spawn_timeout.count()) + " ms)");
    EndResize();
    outstanding_spawns_.clear();
  }
  return outbox_.Take();
}

// ---------------------------------------------------------------------------------------------
// Workers.

void CoordinatorCore::OnJoin(const std::string& identity, const proto::Envelope& e) {
  ELASTRA_DECODE_OR_REPLY(proto::JoinRequest, req);
  if (JobOver()) {
    outbox_.SendError(identity, e.request_id, FailedPreconditionError("the job is over; not joining"));
    return;
  }
  const WorkerInfo* existing = membership_.Find(req.worker_id);
  bool known_standby = existing != nullptr && existing->state == WorkerState::kStandby;
  if (!known_standby && membership_.Standby().size() >= static_cast<size_t>(options_.max_workers)) {
    outbox_.SendError(identity, e.request_id,
              ResourceExhaustedError("already " + std::to_string(options_.max_workers) +
                                     " standby workers (max_workers)"));
    return;
  }
  Status s = membership_.Join(req, identity, clock_->Now());
  if (!s.ok()) {
    outbox_.SendError(identity, e.request_id, s);
    return;
  }
  outstanding_spawns_.erase(req.worker_id);
  health_.Beat(req.worker_id);
  journal_.Join(req.worker_id);
  layouts_.Learn(req);
  proto::JoinReply reply;
  reply.worker_id = req.worker_id;
  reply.generation = generation_;
  reply.heartbeat_interval_ms = options_.heartbeat_interval.count();
  reply.heartbeat_timeout_ms = options_.heartbeat_timeout.count();
  outbox_.Send(identity, proto::MessageType::kJoinReply, reply, e.request_id);
  LOG(INFO) << "worker " << req.worker_id << " joined (host " << req.host << ", pid " << req.pid
            << ")";
  MaybeFormFirstGeneration();
  if (resize_ && resize_->waiting_for_workers && reconf_.phase() == Phase::kIdle) {
    ContinueResize();
  }
}

void CoordinatorCore::OnLeave(const std::string& identity, const proto::Envelope& e) {
  ELASTRA_DECODE_OR_REPLY(proto::LeaveRequest, req);
  WorkerInfo* w = membership_.Find(e.sender);
  if (w == nullptr) {
    outbox_.SendError(identity, e.request_id, NotFoundError("no worker '" + e.sender + "' in this job"));
    return;
  }
  outbox_.Send(identity, proto::MessageType::kAck, proto::Ack{}, e.request_id);
  health_.Forget(w->id);
  switch (w->state) {
    case WorkerState::kStandby:
    case WorkerState::kLeaving:
    case WorkerState::kLost:
      membership_.Remove(e.sender);
      journal_.WorkerState(e.sender, JournalWorkerState::kRemoved);
      return;
    case WorkerState::kFinished:
      return;
    case WorkerState::kMember:
      break;
  }
  if (req.reason == proto::LeaveReason::kFinished) {
    journal_.WorkerState(e.sender, JournalWorkerState::kFinished);
    w->state = WorkerState::kFinished;  // keeps its rank for status
    bool all = !current_members_.empty();
    for (const auto& id : current_members_) {
      const WorkerInfo* m = membership_.Find(id);
      if (m != nullptr && m->state != WorkerState::kFinished && m->state != WorkerState::kLost) {
        all = false;
      }
    }
    if (all && reconf_.phase() == Phase::kIdle) FinishJob();
    return;
  }
  // Any other reason: the member is gone from this generation; the others recover without it.
  LoseWorkers({e.sender}, "left (" + req.detail + ")");
}

void CoordinatorCore::OnHeartbeat(const proto::Envelope& e) {
  WorkerInfo* w = membership_.Find(e.sender);
  if (w == nullptr) return;
  auto hb = proto::DecodePayload<proto::Heartbeat>(e.payload);
  if (!hb.ok()) {
    outbox_.CountMalformed();
    return;
  }
  if (w->state == WorkerState::kMember || w->state == WorkerState::kStandby) {
    health_.Beat(w->id);
    w->last_heartbeat = clock_->Now();
  }
  w->step = std::max(w->step, hb->step);
}

void CoordinatorCore::OnPaused(const proto::Envelope& e) {
  ELASTRA_DECODE_OR_DROP(proto::PausedReport, report);
  Status s = reconf_.RecordPaused(e.sender, report);
  if (!s.ok()) {
    outbox_.CountStale();
    return;
  }
  if (WorkerInfo* w = membership_.Find(e.sender)) w->step = std::max(w->step, report.step);
  if (!reconf_.AllPaused()) return;
  if (reconf_.phase() == Phase::kPausing) {
    auto step = reconf_.AgreedStep();
    if (!step.ok()) {
      StartRecovery({}, step.status().message());
      return;
    }
    FinishPause(*step);
  } else {
    FinishRecovery();
  }
}

void CoordinatorCore::OnGenerationReady(const proto::Envelope& e) {
  ELASTRA_DECODE_OR_DROP(proto::GenerationReady, ready);
  Status s = reconf_.RecordReady(e.sender, ready);
  if (!s.ok()) {
    outbox_.CountStale();
    return;
  }
  if (reconf_.AllReady()) Commit();
}

void CoordinatorCore::OnFailureReport(const proto::Envelope& e) {
  ELASTRA_DECODE_OR_DROP(proto::FailureReport, report);
  const WorkerInfo* w = membership_.Find(e.sender);
  // The generation the members run now: the one being built, else the committed one.
  uint64_t live = reconf_.phase() == Phase::kBuilding ? reconf_.target() : generation_;
  if (w == nullptr || w->state != WorkerState::kMember || JobOver() ||
      reconf_.phase() == Phase::kRecovering || report.generation < live) {
    outbox_.CountStale();
    return;
  }
  StartRecovery({}, "a collective failed on " + e.sender + ": " + report.message);
}

void CoordinatorCore::OnProcessExited(const proto::Envelope& e) {
  auto exited = proto::DecodePayload<proto::ProcessExited>(e.payload);
  if (!exited.ok()) {
    outbox_.CountMalformed();
    return;
  }
  outstanding_spawns_.erase(exited->worker_id);
  WorkerInfo* w = membership_.Find(exited->worker_id);
  if (w == nullptr) return;
  health_.Forget(w->id);
  switch (w->state) {
    case WorkerState::kLeaving:
    case WorkerState::kStandby:
      journal_.WorkerState(w->id, JournalWorkerState::kRemoved);
      membership_.Remove(w->id);
      return;
    case WorkerState::kMember:
      LoseWorkers({w->id}, "process exited (code " + std::to_string(exited->exit_code) +
                               ", signal " + std::to_string(exited->signal) + ")");
      return;
    default:
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// Admin and agents.

void CoordinatorCore::OnAgentRegister(const std::string& identity, const proto::Envelope& e) {
  ELASTRA_DECODE_OR_REPLY(proto::AgentRegister, req);
  AgentInfo agent;
  agent.identity = identity;
  agent.sender = e.sender;
  agent.host = req.host;
  agent.max_workers = req.max_workers;
  membership_.RegisterAgent(agent);
  outbox_.Send(identity, proto::MessageType::kAck, proto::Ack{}, e.request_id);
  if (JobOver()) {
    // An agent registering again after a restart may have missed the job's end.
    proto::Shutdown shutdown;
    shutdown.exit_code = job_state_ == proto::JobState::kFinished ? 0 : 1;
    shutdown.reason = job_state_ == proto::JobState::kFinished ? "every member finished" : "the job failed";
    outbox_.Send(identity, proto::MessageType::kShutdown, shutdown, 0);
    return;
  }
  if (resize_ && resize_->waiting_for_workers && reconf_.phase() == Phase::kIdle) {
    ContinueResize();
  }
}

void CoordinatorCore::OnResize(const std::string& identity, const proto::Envelope& e) {
  ELASTRA_DECODE_OR_REPLY(proto::ResizeRequest, req);
  auto refuse = [&](Status s) { outbox_.SendError(identity, e.request_id, s); };
  if (req.workers < 1) {
    return refuse(InvalidArgumentError("a job needs at least 1 worker; asked for " +
                                       std::to_string(req.workers)));
  }
  if (req.workers > options_.max_workers) {
    return refuse(InvalidArgumentError("asked for " + std::to_string(req.workers) +
                                       " workers; this job allows at most " +
                                       std::to_string(options_.max_workers) + " (max_workers)"));
  }
  if (req.has_layout && req.layout.world() != req.workers) {
    return refuse(InvalidArgumentError("layout " + req.layout.ToString() + " has " +
                                       std::to_string(req.layout.world()) + " ranks, not " +
                                       std::to_string(req.workers)));
  }
  if (req.has_layout) {
    Status valid = layouts_.Validate(req.layout);
    if (!valid.ok()) return refuse(valid);
  }
  if (JobOver()) return refuse(FailedPreconditionError(std::string("the job is ") +
                                                        proto::ToString(state())));
  if (generation_ == 0) {
    return refuse(FailedPreconditionError("no generation has formed yet; wait for the job to "
                                          "start before resizing"));
  }
  for (const auto& id : current_members_) {
    const WorkerInfo* w = membership_.Find(id);
    if (w != nullptr && w->state == WorkerState::kFinished) {
      return refuse(FailedPreconditionError("worker " + id +
                                            " has finished training; the job is ending"));
    }
  }
  if (resize_ || reconf_.phase() != Phase::kIdle || restart_pending_) {
    return refuse(FailedPreconditionError(std::string("another reconfiguration is in progress (") +
                                          proto::ToString(state()) + "); retry when it is done"));
  }
  const size_t members = membership_.Members().size();
  if (static_cast<size_t>(req.workers) == members && (!req.has_layout || req.layout == layout_)) {
    proto::ResizeReply reply;
    reply.phase = proto::ResizePhase::kDone;
    reply.generation = generation_;
    reply.workers = req.workers;
    reply.layout = layout_;
    reply.message = "the job already runs with " + std::to_string(members) + " workers";
    outbox_.Send(identity, proto::MessageType::kResizeReply, reply, e.request_id);
    return;
  }
  PendingResize p;
  p.identity = identity;
  p.request_id = e.request_id;
  p.workers = req.workers;
  p.has_layout = req.has_layout;
  p.layout = req.layout;
  p.wait = req.wait;
  p.received = clock_->Now();
  resize_ = p;
  journal_.Resize(p.workers, p.has_layout, p.layout);
  proto::ResizeReply accepted;
  accepted.phase = proto::ResizePhase::kAccepted;
  accepted.generation = generation_;
  accepted.workers = req.workers;
  accepted.layout = req.has_layout ? req.layout : layouts_.Default(req.workers, layout_);
  outbox_.Send(identity, proto::MessageType::kResizeReply, accepted, e.request_id);
  LOG(INFO) << "resize to " << req.workers << " workers accepted (now " << members << ")";
  ContinueResize();
}

void CoordinatorCore::ReplyResize(proto::ResizePhase phase, const std::string& message) {
  if (!resize_) return;
  if (resize_->wait) {
    proto::ResizeReply reply;
    reply.phase = phase;
    reply.generation = generation_;
    reply.workers = static_cast<int32_t>(membership_.Members().size());
    reply.layout = layout_;
    reply.message = message;
    if (phase == proto::ResizePhase::kDone && !history_.empty()) {
      const auto& t = history_.back().timings;
      reply.downtime_ms = t.downtime_ms;
      reply.agreement_ms = t.agreement_ms;
      reply.rebuild_ms = t.rebuild_ms;
      reply.transfer_ms = t.transfer_ms;
    }
    reply.total_ms = MsBetween(resize_->received, clock_->Now());
    outbox_.Send(resize_->identity, proto::MessageType::kResizeReply, reply, resize_->request_id);
  }
  if (phase != proto::ResizePhase::kDone) {
    LOG(WARNING) << "resize " << proto::ToString(phase) << ": " << message;
  }
}

void CoordinatorCore::OnCheckpointWritten(const proto::Envelope& e) {
  auto report = proto::DecodePayload<proto::CheckpointWritten>(e.payload);
  if (!report.ok() || !checkpoints_.OnWritten(*report).ok()) outbox_.CountMalformed();
}

// ---------------------------------------------------------------------------------------------
// The state machine.

void CoordinatorCore::MaybeFormFirstGeneration() {
  if (job_state_ != proto::JobState::kForming || reconf_.phase() != Phase::kIdle) return;
  auto standby = membership_.Standby();
  if (standby.size() < static_cast<size_t>(options_.initial_workers)) return;
  standby.resize(options_.initial_workers);
  GenerationPlan plan;
  plan.generation = ++highest_generation_;
  plan.layout = layouts_.Choose(HostNames(standby), layout_);
  plan.members = standby;
  plan.has_state.assign(standby.size(), false);
  plan.has_state[0] = true;  // rank 0's initial state is broadcast
  plan.restore_step = 0;
  plan.source_rank = 0;
  plan.reason = proto::GenerationReason::kStart;
  plan.prev_layout = Layout{};
  plan.prev_members = {standby[0]};
  plan.prev_has_state = {true};
  if (!options_.resume_from.empty()) {
    // A job restarted from disk: every member loads the newest committed checkpoint (falling
    // back to older ones together when it does not load) for its own place in the new layout.
    auto newest = checkpoints_.ResumeFrom(options_.resume_from);
    if (!newest.ok()) {
      FailJob("cannot resume: " + newest.status().message());
      return;
    }
    plan.has_state.assign(standby.size(), false);
    plan.prev_members.clear();
    plan.prev_has_state.clear();
    plan.restore_step = newest->step;
    plan.reason = proto::GenerationReason::kResume;
    LOG(INFO) << "resuming from " << newest->dir << " (step " << newest->step << ", "
              << newest->layout.ToString() << ") on " << standby.size() << " workers";
  }
  reconf_.Reset();
  StartBuild(std::move(plan));
}

void CoordinatorCore::ContinueResize() {
  if (!resize_ || reconf_.phase() != Phase::kIdle || JobOver()) return;
  const auto members = membership_.Members();
  const size_t want = static_cast<size_t>(resize_->workers);
  if (want == members.size() && (!resize_->has_layout || resize_->layout == layout_)) {
    ReplyResize(proto::ResizePhase::kDone, "");
    EndResize();
    outstanding_spawns_.clear();
    return;
  }
  if (want > members.size()) {
    const size_t have = members.size() + membership_.Standby().size();
    if (have < want) {
      if (!resize_->waiting_for_workers) {
        resize_->waiting_for_workers = true;
        resize_->spawn_deadline = clock_->Now() + options_.spawn_timeout;
      }
      size_t needed = want - have;
      needed = needed > outstanding_spawns_.size() ? needed - outstanding_spawns_.size() : 0;
      if (needed > 0 && !membership_.agents().empty()) {
        proto::SpawnRequest spawn;
        for (size_t i = 0; i < needed; ++i) {
          std::string id;
          do {
            id = membership_.NextWorkerId();
          } while (outstanding_spawns_.count(id));
          outstanding_spawns_.insert(id);
          spawn.worker_ids.push_back(id);
        }
        journal_.Ids(spawn.worker_ids);
        const AgentInfo& agent = membership_.agents().front();
        outbox_.Send(agent.identity, proto::MessageType::kSpawnRequest, spawn, 0);
        LOG(INFO) << "asked agent " << agent.sender << " to start " << needed << " worker(s)";
      }
      return;  // wait for joins
    }
    resize_->waiting_for_workers = false;
  }
  BeginPause();
}

void CoordinatorCore::BeginPause() {
  const auto members = membership_.Members();
  const uint64_t target = ++highest_generation_;
  journal_.ChangeBegun(target, ChangeKind::kPause, members);
  reconf_.BeginPause(target, members);
  proto::PauseRequest pause;
  pause.target_generation = target;
  pause.reason = proto::GenerationReason::kResize;
  for (const auto& id : members) outbox_.Push(id, proto::MessageType::kPauseRequest, pause, generation_);
  LOG(INFO) << "pausing generation " << generation_ << " for generation " << target;
}

void CoordinatorCore::FinishPause(int64_t step) {
  const auto old = reconf_.Answered();  // old members by rank
  const size_t want = resize_ ? static_cast<size_t>(resize_->workers) : old.size();
  GenerationPlan plan;
  plan.generation = reconf_.target();
  // The candidates: every current member, plus standby workers up to the size asked for.
  std::vector<std::string> candidates = old;
  for (const auto& id : membership_.Standby()) {
    if (candidates.size() >= want) break;
    candidates.push_back(id);
  }
  plan.layout = resize_ && resize_->has_layout
                    ? resize_->layout
                    : layouts_.Choose(HostNames(std::vector<std::string>(
                                          candidates.begin(),
                                          candidates.begin() + std::min(want, candidates.size()))),
                                      layout_);
  // Who takes which rank (and, when shrinking, who leaves): the assignment that keeps the most
  // state in place.
  plan.members = layouts_.Assign(plan.layout, candidates, HostNames(candidates), layout_,
                                 current_members_);
  for (const auto& id : plan.members) {
    plan.has_state.push_back(std::find(old.begin(), old.end(), id) != old.end());
  }
  for (const auto& id : old) {
    if (std::find(plan.members.begin(), plan.members.end(), id) == plan.members.end()) {
      plan.leaving.push_back(id);
    }
  }
  plan.restore_step = step;
  plan.source_rank = 0;
  plan.reason = proto::GenerationReason::kResize;
  plan.prev_layout = layout_;
  plan.prev_members = current_members_;
  plan.prev_has_state.assign(current_members_.size(), true);
  StartBuild(std::move(plan));
}

void CoordinatorCore::LoseWorkers(const std::vector<std::string>& ids, const std::string& why) {
  std::vector<std::string> lost;
  for (const auto& id : ids) {
    WorkerInfo* w = membership_.Find(id);
    if (w == nullptr) continue;
    bool was_member = w->state == WorkerState::kMember;
    health_.Forget(id);
    if (w->state == WorkerState::kLost) continue;
    LOG(WARNING) << "worker " << id << " lost: " << why;
    // If the process is in fact alive (stalled, partitioned), it is out of the job: tell it to
    // exit rather than let it wait on communicators its peers have abandoned.
    proto::Shutdown shutdown;
    shutdown.exit_code = 1;
    shutdown.reason = "declared lost: " + why;
    outbox_.Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    membership_.SetState(id, WorkerState::kLost);
    JournalLost(id);
    if (reconf_.phase() == Phase::kRecovering && reconf_.IsParticipant(id)) {
      lost.push_back(id);
    } else if (was_member) {
      lost.push_back(id);
    }
  }
  if (lost.empty()) return;
  StartRecovery(lost, why);
}

void CoordinatorCore::StartRecovery(const std::vector<std::string>& lost, const std::string& why) {
  if (JobOver()) return;
  restart_pending_ = false;  // this recovery is the restart's recovery round too
  restart_recover_ = false;
  for (const auto& id : lost) {
    if (membership_.Find(id) != nullptr && membership_.Find(id)->state != WorkerState::kLost) {
      membership_.SetState(id, WorkerState::kLost);
      JournalLost(id);
    }
    health_.Forget(id);
  }
  if (reconf_.phase() == Phase::kRecovering) {
    // Already recovering: the dead simply stop being awaited.
    for (const auto& id : lost) reconf_.DropParticipant(id);
    if (reconf_.Unanswered().empty()) FinishRecovery();
    return;
  }
  // A change in flight is aborted. Leaving workers of an aborted shrink stay members.
  if (reconf_.phase() == Phase::kBuilding) {
    for (const auto& id : reconf_.plan().leaving) {
      WorkerInfo* w = membership_.Find(id);
      if (w != nullptr && w->state == WorkerState::kLeaving) {
        // It was told to leave and will exit; it holds no rank in what follows.
        membership_.Remove(id);
        JournalLost(id);
      }
    }
  }
  auto survivors = membership_.Members();
  if (survivors.empty()) {
    FailJob("every member is lost (" + why + ")");
    return;
  }
  const uint64_t target = ++highest_generation_;
  journal_.ChangeBegun(target, ChangeKind::kRecover, survivors);
  reconf_.BeginRecover(target, survivors, clock_->Now() + options_.recover_timeout);
  proto::RecoverRequest recover;
  recover.target_generation = target;
  recover.lost = lost;
  for (const auto& id : survivors) {
    outbox_.Push(id, proto::MessageType::kRecoverRequest, recover, generation_);
  }
  LOG(WARNING) << "recovering into generation " << target << ": " << why;
}

void CoordinatorCore::FinishRecovery() {
  auto survivors = reconf_.Answered();
  auto standby = membership_.Standby();
  if (survivors.empty()) {
    FailJob("no member survived");
    return;
  }
  GenerationPlan plan;
  plan.generation = reconf_.target();
  plan.source_rank = 0;
  if (generation_ == 0) {
    // The first generation never committed: start again from rank 0's initial state.
    plan.members = survivors;
    plan.has_state.assign(survivors.size(), false);
    plan.has_state[0] = true;
    plan.restore_step = 0;
    plan.reason = proto::GenerationReason::kStart;
    plan.prev_layout = Layout{};
    plan.prev_members = {survivors[0]};
    plan.prev_has_state = {true};
  } else {
    auto recovery = reconf_.PlanRecovery();
    if (!recovery.ok()) {
      FailJob("cannot recover: " + recovery.status().message());
      return;
    }
    plan.members = recovery->with_state;
    plan.has_state.assign(plan.members.size(), true);
    for (const auto& id : recovery->without_state) {
      plan.members.push_back(id);
      plan.has_state.push_back(false);
    }
    plan.restore_step = recovery->restore_step;
    plan.reason = proto::GenerationReason::kFailure;
    plan.prev_layout = layout_;
    plan.prev_members = current_members_;
    for (const auto& id : current_members_) {
      plan.prev_has_state.push_back(std::find(recovery->with_state.begin(),
                                              recovery->with_state.end(),
                                              id) != recovery->with_state.end());
    }
  }
  for (const auto& id : standby) {
    if (plan.members.size() >= static_cast<size_t>(options_.max_workers)) break;
    plan.members.push_back(id);
    plan.has_state.push_back(false);
  }
  plan.layout = layouts_.Choose(HostNames(plan.members), layout_);
  StartBuild(std::move(plan));
}

std::vector<std::string> CoordinatorCore::HostNames(const std::vector<std::string>& ids) const {
  std::vector<std::string> hosts;
  for (const auto& id : ids) {
    const WorkerInfo* w = membership_.Find(id);
    hosts.push_back(w != nullptr ? w->host : id);
  }
  return hosts;
}

std::vector<proto::Member> CoordinatorCore::MembersOf(const Layout& layout,
                                                      const std::vector<std::string>& ids,
                                                      const std::vector<bool>& has_state) const {
  std::vector<proto::Member> out;
  for (size_t r = 0; r < ids.size(); ++r) {
    proto::Member m;
    m.worker_id = ids[r];
    if (const WorkerInfo* w = membership_.Find(ids[r])) {
      m.host = w->host;
      m.device = w->device;
    }
    m.coords = CoordinatesOf(layout, static_cast<int>(r));
    m.has_state = r < has_state.size() && has_state[r];
    out.push_back(std::move(m));
  }
  return out;
}

void CoordinatorCore::StartBuild(GenerationPlan plan) {
  // Members not in the plan that still hold the member state (aborted survivors that did not
  // answer were marked lost already) are not part of the new generation.
  for (const auto& id : membership_.Members()) {
    if (std::find(plan.members.begin(), plan.members.end(), id) == plan.members.end() &&
        std::find(plan.leaving.begin(), plan.leaving.end(), id) == plan.leaving.end()) {
      membership_.SetState(id, WorkerState::kLost);
      JournalLost(id);
      health_.Forget(id);
    }
  }
  journal_.ChangeBegun(plan.generation, ChangeKind::kBuild, plan.members);
  membership_.AssignRanks(plan.members);
  for (const auto& id : plan.leaving) {
    membership_.SetState(id, WorkerState::kLeaving);
    health_.Forget(id);
  }
  proto::NewGeneration ng;
  ng.generation = plan.generation;
  ng.layout = plan.layout;
  ng.members = MembersOf(plan.layout, plan.members, plan.has_state);
  ng.restore_step = plan.restore_step;
  ng.source_rank = plan.source_rank;
  ng.kv_prefix = "g" + std::to_string(plan.generation) + "/";
  ng.reason = plan.reason;
  ng.prev_layout = plan.prev_layout;
  ng.checkpoint_dir = checkpoints_.latest_dir();
  ng.prev_members = MembersOf(plan.prev_layout, plan.prev_members, plan.prev_has_state);
  for (const auto& id : plan.members) {
    outbox_.Push(id, proto::MessageType::kNewGeneration, ng, plan.generation);
  }
  proto::NewGeneration leave = ng;
  leave.leave = true;
  for (const auto& id : plan.leaving) {
    outbox_.Push(id, proto::MessageType::kNewGeneration, leave, plan.generation);
  }
  LOG(INFO) << "building generation " << plan.generation << " (" << proto::ToString(plan.reason)
            << ", "
            << plan.layout.ToString() << ", restore step " << plan.restore_step << ")";
  reconf_.BeginBuild(std::move(plan));
}

void CoordinatorCore::Commit() {
  const GenerationPlan plan = reconf_.plan();
  HistoryEntry entry;
  entry.generation = plan.generation;
  entry.reason = plan.reason;
  entry.workers = plan.members;
  entry.layout = plan.layout;
  entry.timings = reconf_.Timings();
  journal_.Commit(plan.generation, plan.reason, plan.layout, plan.members, entry.timings);
  history_.push_back(entry);
  generation_ = plan.generation;
  layout_ = plan.layout;
  current_members_ = plan.members;
  job_state_ = proto::JobState::kRunning;
  reconf_.Reset();
  kv_.OnCommitted(generation_);
  LOG(INFO) << "generation " << generation_ << " committed (" << layout_.ToString() << ")";
  if (resize_) ContinueResize();
}

void CoordinatorCore::FinishJob() {
  job_state_ = proto::JobState::kFinished;
  journal_.End(JobOutcome::kFinished, "every member finished");
  proto::Shutdown shutdown;
  shutdown.exit_code = 0;
  shutdown.reason = "every member finished";
  for (const auto& agent : membership_.agents()) {
    outbox_.Send(agent.identity, proto::MessageType::kShutdown, shutdown, 0);
  }
  ReplyResize(proto::ResizePhase::kFailed, "the job finished");
  resize_.reset();  // the end record closes it
  LOG(INFO) << "job " << options_.job << " finished";
}

void CoordinatorCore::FailJob(const std::string& why) {
  job_state_ = proto::JobState::kFailed;
  journal_.End(JobOutcome::kFailed, why);
  reconf_.Reset();
  proto::Shutdown shutdown;
  shutdown.exit_code = 1;
  shutdown.reason = why;
  for (const auto& agent : membership_.agents()) {
    outbox_.Send(agent.identity, proto::MessageType::kShutdown, shutdown, 0);
  }
  for (const WorkerInfo* w : membership_.All()) {
    if (w->state == WorkerState::kMember || w->state == WorkerState::kStandby) {
      outbox_.Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    }
  }
  ReplyResize(proto::ResizePhase::kFailed, "the job failed: " + why);
  resize_.reset();  // the end record closes it
  LOG(ERROR) << "job " << options_.job << " failed: " << why;
}

// ---------------------------------------------------------------------------------------------
// Status.

proto::JobState CoordinatorCore::state() const {
  if (JobOver()) return job_state_;
  switch (reconf_.phase()) {
    case Phase::kPausing: return proto::JobState::kPausing;
    case Phase::kRecovering: return proto::JobState::kRecovering;
    case Phase::kBuilding:
      return generation_ == 0 ? proto::JobState::kForming : proto::JobState::kBuilding;
    case Phase::kIdle: break;
  }
  return job_state_;
}

proto::JobStatus CoordinatorCore::Snapshot() const {
  proto::JobStatus s;
  s.job = options_.job;
  s.state = state();
  s.generation = generation_;
  s.layout = layout_;
  for (const WorkerInfo* w : membership_.All()) {
    if (w->state == WorkerState::kMember || w->state == WorkerState::kFinished) {
      s.step = std::max(s.step, w->step);
    }
    proto::WorkerStatus ws;
    ws.id = w->id;
    ws.host = w->host;
    ws.pid = w->pid;
    ws.device = w->device;
    ws.state = w->state;
    ws.rank = w->rank;
    ws.step = w->step;
    ws.last_heartbeat_ms_ago = health_.MillisSinceLast(w->id);
    s.workers.push_back(std::move(ws));
  }
  for (const auto& h : history_) {
    proto::GenerationRecord r;
    r.generation = h.generation;
    r.reason = h.reason;
    r.workers = h.workers;
    r.layout = h.layout;
    r.downtime_ms = h.timings.downtime_ms;
    r.agreement_ms = h.timings.agreement_ms;
    r.rebuild_ms = h.timings.rebuild_ms;
    r.transfer_ms = h.timings.transfer_ms;
    s.history.push_back(std::move(r));
  }
  for (const auto& a : membership_.agents()) {
    s.agents.push_back(proto::AgentStatus{a.sender, a.host, a.max_workers});
  }
  s.malformed_frames = outbox_.malformed_frames();
  s.stale_messages = outbox_.stale_messages();
  if (resize_) {
    s.resize_pending = true;
    s.resize_workers = resize_->workers;
    s.resize_waiting_for_workers = resize_->waiting_for_workers;
  }
  return s;
}

}  // namespace elastra::coordinator
