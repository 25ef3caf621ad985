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

}  // namespace

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options)
    : options_(Normalized(options)),
      clock_(options_.clock),
      outbox_(options_.job, &membership_, [this] { return generations_.generation(); }),
      journal_(&membership_),
      checkpoints_(options_.job, options_.checkpoint_keep, options_.env, &journal_),
      health_(clock_, options.heartbeat_timeout),
      kv_(clock_, &outbox_),
      generations_(&options_, clock_, &membership_, &health_, &outbox_, &journal_, &layouts_,
                   &checkpoints_),
      resizes_(&options_, clock_, &membership_, &outbox_, &journal_, &layouts_, &generations_),
      workers_(&options_, clock_, &membership_, &health_, &outbox_, &journal_, &layouts_,
               &generations_, &resizes_) {
  generations_.AddCommitListener([this](uint64_t g) { kv_.OnCommitted(g); });
  generations_.AddCommitListener([this](uint64_t) { resizes_.Continue(); });
  generations_.AddJobEndListener([this](const std::string& m) { resizes_.OnJobEnd(m); });
  generations_.AddRecoveryListener([this] {
    restart_pending_ = false;  // this recovery is the restart's recovery round too
    restart_recover_ = false;
  });
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
  CommittedJob job;
  job.highest_generation = s.highest_generation;
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
    job.history.push_back(std::move(h));
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
    job.generation = g->generation;
    job.layout = g->layout;
    job.state = proto::JobState::kRunning;
    for (const auto& m : g->members) {
      job.members.push_back(m.id);
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
  if (s.resize) resizes_.Restore(*s.resize);
  if (s.ended == JobOutcome::kFinished) job.state = proto::JobState::kFinished;
  if (s.ended == JobOutcome::kFailed) job.state = proto::JobState::kFailed;
  generations_.Restore(std::move(job));
  restart_pending_ = !generations_.job_over();
  restart_recover_ = s.change_in_flight;
  restart_why_ = "the coordinator restarted while changing to generation " +
                 std::to_string(s.change_target) + " (" + ToString(s.change_kind) + ")";
  restart_deadline_ = now + options_.heartbeat_timeout;
  LOG(WARNING) << "took back job " << options_.job << " from " << journal_.journal()->path() << " ("
               << s.records << " records): generation " << generations_.generation() << ", "
               << membership_.Members().size() << " member(s), " << membership_.Standby().size()
               << " standby"
               << (s.change_in_flight ? "; a change was in flight: recovering once the workers "
                                        "reconnect"
                                      : "")
               << (s.ended ? std::string("; the job is ") + ToString(*s.ended) : std::string());
}

void CoordinatorCore::MaybeFinishRestart() {
  if (!restart_pending_) return;
  if (generations_.job_over()) {
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
  if (restart_recover_ && generations_.phase() == Phase::kIdle) {
    restart_recover_ = false;
    generations_.StartRecovery({}, restart_why_);
    return;
  }
  restart_recover_ = false;
  resizes_.Continue();
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
    case T::kJoin: workers_.OnJoin(identity, e); break;
    case T::kLeave: workers_.OnLeave(identity, e); break;
    case T::kHeartbeat: workers_.OnHeartbeat(e); break;
    case T::kPaused: workers_.OnPaused(e); break;
    case T::kGenerationReady: workers_.OnGenerationReady(e); break;
    case T::kFailureReport: workers_.OnFailureReport(e); break;
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
      if (e.type == T::kResize) resizes_.OnResize(identity, e, restart_pending_);
      else if (e.type == T::kAgentRegister) workers_.OnAgentRegister(identity, e);
      else workers_.OnProcessExited(e);
      break;
    default:
      outbox_.SendError(identity, e.request_id,
                InvalidArgumentError(std::string("the coordinator does not accept ") +
                                     proto::TypeName(e.type) + " messages"));
      break;
  }
  return outbox_.Take();
}

std::vector<Outgoing> CoordinatorCore::Tick() {
  kv_.Tick();
  if (generations_.job_over()) return outbox_.Take();

  workers_.ExpireHeartbeats();
  MaybeFinishRestart();
  generations_.Tick();

  resizes_.Tick();
  return outbox_.Take();
}

void CoordinatorCore::OnCheckpointWritten(const proto::Envelope& e) {
  auto report = proto::DecodePayload<proto::CheckpointWritten>(e.payload);
  if (!report.ok() || !checkpoints_.OnWritten(*report).ok()) outbox_.CountMalformed();
}

// ---------------------------------------------------------------------------------------------
// Status.

proto::JobStatus CoordinatorCore::Snapshot() const {
  proto::JobStatus s;
  s.job = options_.job;
  s.state = state();
  s.generation = generations_.generation();
  s.layout = generations_.layout();
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
  for (const auto& h : generations_.history()) {
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
  if (const auto& resize = resizes_.pending()) {
    s.resize_pending = true;
    s.resize_workers = resize->workers;
    s.resize_waiting_for_workers = resize->waiting_for_workers;
  }
  return s;
}

}  // namespace elastra::coordinator
