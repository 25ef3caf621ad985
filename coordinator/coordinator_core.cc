#include "coordinator/coordinator_core.h"

#include <algorithm>
#include <cmath>

#include "protocol/codec.h"
#include "protocol/keys.h"
#include "common/logging.h"
#include "protocol/status_json.h"

namespace elastra::coordinator {
namespace {

// The options with every default filled in and every bound applied.
CoordinatorOptions Normalized(CoordinatorOptions o) {
  if (o.initial_workers < 1) o.initial_workers = 1;
  if (o.max_workers < 1) o.max_workers = 1;
  o.spares = std::clamp(o.spares, 0, o.max_workers);
  o = ScaledHeartbeats(o);
  if (o.recover_timeout.count() <= 0) o.recover_timeout = o.heartbeat_timeout;
  if (o.clock == nullptr) o.clock = SystemClock::Get();
  if (o.env == nullptr) o.env = Env::Default();
  return o;
}

}  // namespace

CoordinatorOptions ScaledHeartbeats(CoordinatorOptions o) {
  const int64_t most = std::max(o.initial_workers, o.max_workers);
  if (o.max_heartbeats_per_second <= 0 || o.heartbeat_interval.count() <= 0) return o;
  // The period at which `most` workers send max_heartbeats_per_second, rounded up to 10 ms.
  const int64_t needed_ms = (most * 1000 / o.max_heartbeats_per_second + 9) / 10 * 10;
  if (needed_ms <= o.heartbeat_interval.count()) return o;
  const double factor = static_cast<double>(needed_ms) / o.heartbeat_interval.count();
  auto scale = [factor](std::chrono::milliseconds d) {
    return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(d.count() * factor)));
  };
  o.heartbeat_interval = std::chrono::milliseconds(needed_ms);
  o.heartbeat_timeout = scale(o.heartbeat_timeout);
  if (o.recover_timeout.count() > 0) o.recover_timeout = scale(o.recover_timeout);
  return o;
}

CoordinatorCore::CoordinatorCore(const CoordinatorOptions& options)
    : options_(Normalized(options)),
      clock_(options_.clock),
      hosts_(&membership_),
      outbox_(options_.job, &membership_, [this] { return generations_.generation(); }),
      journal_(&membership_),
      checkpoints_(options_.job, options_.checkpoint_keep, options_.env, &journal_),
      health_(clock_, options_.heartbeat_timeout),
      kv_(clock_, &outbox_),
      context_{&options_, clock_, &membership_, &hosts_, &health_, &outbox_, &journal_},
      generations_(context_, &layouts_, &checkpoints_),
      host_manager_(context_, &generations_),
      resizes_(context_, &host_manager_, &layouts_, &generations_),
      workers_(context_, &layouts_, &generations_, &host_manager_, &resizes_),
      restore_(context_, &checkpoints_, &generations_, &resizes_),
      training_(clock_, &membership_) {
  journal_.set_on_fenced(options_.on_fenced);
  workers_.SetHeartbeatListener([this](const WorkerInfo& worker, const proto::Heartbeat& hb) {
    training_.OnHeartbeat(worker, hb, generations_.layout());
  });
  // What a commit, a recovery or the job's end means to the other managers.
  generations_.AddCommitListener([this](uint64_t g) { kv_.OnCommitted(g); });
  // A change ended: a pending one goes on, else the job grows back towards its target.
  generations_.AddCommitListener([this](uint64_t) {
    resizes_.Continue();
    resizes_.MaybeRegrow();
    resizes_.MaybeReplenishSpares();  // a recovery may have used one
  });
  // A recovery takes standby workers up to the target size; the spares beyond it stay standing.
  generations_.SetTargets([this] { return JobTargets{resizes_.target(), resizes_.spares()}; });
  generations_.AddJobEndListener([this](const std::string& m) { resizes_.OnJobEnd(m); });
  generations_.AddRecoveryListener([this] { restore_.OnRecoveryStarted(); });
  // A host may take new workers: the first generation's, a waiting change's, a regrow's.
  host_manager_.AddHostListener([this] {
    host_manager_.MaybeStartFirstWorkers();
    resizes_.ContinueIfWaitingForWorkers();
    resizes_.MaybeRegrow();
    resizes_.MaybeReplenishSpares();
  });
  if (!options_.state_dir.empty()) journal_status_ = restore_.Open();
  // The state the workers registered, for planning state moves: they do not join again.
  if (journal_.journal() != nullptr) layouts_.RestoreState(journal_.journal()->state().state);
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
                      InvalidArgumentError("this coordinator runs job '" + options_.job +
                                           "', not '" + e.job + "'"));
    return outbox_.Take();
  }
  // The latest message from a worker or an agent tells where it is now, unless it names a
  // generation older than the committed one: such a message is stale (a replay, a worker woken
  // after its eviction) and must not take the pushes of the worker it names away from it.
  const bool stale = e.generation != 0 && e.generation < generations_.generation();
  // The worker the message names, looked up once for the handlers below.
  WorkerInfo* sender =
      e.sender.empty() || e.type == T::kJoin ? nullptr : membership_.Find(e.sender);
  if (!e.sender.empty() && e.type != T::kJoin && !stale) {
    if (sender != nullptr) {
      const bool unreachable = sender->identity.empty();
      sender->identity = identity;
      if (unreachable) generations_.OnReachable(sender->id);
    } else if (HostInfo* h = hosts_.FindByAgent(e.sender)) {
      h->identity = identity;
    }
  }
  switch (e.type) {
    case T::kJoin:
      workers_.OnJoin(identity, e);
      break;
    case T::kLeave:
      workers_.OnLeave(identity, e);
      break;
    case T::kHeartbeat:
      workers_.OnHeartbeat(identity, e, sender);
      break;
    case T::kPaused:
      workers_.OnPaused(e, sender);
      break;
    case T::kGenerationReady:
      workers_.OnGenerationReady(e, sender);
      break;
    case T::kFailureReport:
      workers_.OnFailureReport(e);
      break;
    case T::kCheckpointWritten:
      OnCheckpointWritten(e);
      break;
    case T::kKvSet:
    case T::kKvGet:
    case T::kKvWait:
    case T::kKvAdd:
    case T::kKvSetAndGet:
      kv_.Handle(identity, e);
      break;
    case T::kStatusRequest: {
      auto req = outbox_.DecodeOrReply<proto::StatusRequest>(identity, e);
      if (!req) break;
      proto::StatusReply reply;
      reply.status = req->brief ? BriefSnapshot() : Snapshot();
      outbox_.Send(identity, T::kStatusReply, reply, e.request_id);
      break;
    }
    case T::kResize:
      if (!admin) {
        outbox_.SendError(identity, e.request_id,
                          UnauthenticatedError("Resize needs an admin key; this client holds a "
                                               "worker key"));
        break;
      }
      resizes_.OnResize(identity, e);
      break;
    // The worker key may do these for its own host (docs/hosts.md, "Keys and the join file"); the
    // managers check which host that is.
    case T::kAgentRegister:
      host_manager_.OnAgentRegister(identity, e);
      break;
    case T::kProcessExited:
      workers_.OnProcessExited(identity, role, e);
      break;
    case T::kDrain:
      resizes_.OnDrain(identity, role, e);
      break;
    default:
      outbox_.SendError(identity, e.request_id,
                        InvalidArgumentError(std::string("the coordinator does not accept ") +
                                             proto::TypeName(e.type) + " messages"));
      break;
  }
  training_.ObserveState(state());
  MaybeWriteFinalStatus();
  return outbox_.Take();
}

void CoordinatorCore::PrefetchAhead(std::span<const proto::Envelope* const> next) const {
  using T = proto::MessageType;
  // next[i] when it names a worker the core would look up (any message but a join).
  auto named = [next](size_t i) -> const proto::Envelope* {
    if (i >= next.size() || next[i] == nullptr) return nullptr;
    const proto::Envelope* e = next[i];
    return e->sender.empty() || e->type == T::kJoin ? nullptr : e;
  };
  // The message handled next: what its record points to (the record arrived over the last two).
  if (const proto::Envelope* e = named(0);
      e != nullptr && (e->type == T::kPaused || e->type == T::kGenerationReady)) {
    if (const WorkerInfo* w = membership_.AtSlot(membership_.GuessSlot(e->sender))) {
      generations_.Prefetch(w->rank);
    }
  }
  // The one after: its record (its probe line arrived over the last handling), and for a
  // heartbeat its deadline and tally.
  if (const proto::Envelope* e = named(1)) {
    const uint32_t slot = membership_.PrefetchRecord(e->sender);
    if (slot != Membership::kNoSlot && e->type == T::kHeartbeat) {
      health_.Prefetch(slot);
      training_.Prefetch(slot);
    }
  }
  // The third: its probe line.
  if (const proto::Envelope* e = named(2)) membership_.PrefetchProbe(e->sender);
}

std::vector<Outgoing> CoordinatorCore::Tick() {
  checkpoints_.CommitReady();
  kv_.Tick();
  if (!generations_.job_over()) {
    host_manager_.Tick();
    if (!generations_.job_over()) workers_.ExpireHeartbeats();
    restore_.MaybeFinish();
    generations_.Tick();
    resizes_.Tick();
    // A spare lost or used, a spawn that never came: replacements (O(1) while enough stand).
    resizes_.MaybeReplenishSpares();
  }
  training_.ObserveState(state());
  MaybeWriteFinalStatus();
  return outbox_.Take();
}

void CoordinatorCore::MaybeWriteFinalStatus() {
  if (final_status_written_ || !generations_.job_over()) return;
  final_status_written_ = true;
  if (options_.state_dir.empty()) return;
  const std::string path = options_.state_dir + "/status.json";
  Status s = WriteFileAtomically(path, proto::StatusJson(Snapshot()) + "\n", 0600);
  if (!s.ok()) LOG(ERROR) << "writing the final status to " << path << ": " << s;
}

void CoordinatorCore::OnCheckpointWritten(const proto::Envelope& e) {
  auto report = proto::DecodePayload<proto::CheckpointWritten>(e.payload);
  if (!report.ok()) {
    outbox_.CountMalformed();
    return;
  }
  // Only a member reports a shard of its committed generation's checkpoint. A report of an older
  // generation (a worker stopped mid-write and woken after its eviction, a replayed message) or
  // from a worker that is no member is stale: it never counts toward a commit.
  const WorkerInfo* w = membership_.Find(e.sender);
  if (w == nullptr || w->state != WorkerState::kMember ||
      report->generation != generations_.generation()) {
    outbox_.CountStale();
    return;
  }
  if (!checkpoints_.OnWritten(*report, more_queued_).ok()) outbox_.CountMalformed();
}

// ---------------------------------------------------------------------------------------------
// Status.

proto::JobStatus CoordinatorCore::BriefSnapshot() const {
  proto::JobStatus s;
  s.job = options_.job;
  s.state = state();
  s.generation = generations_.generation();
  s.layout = generations_.layout();
  s.target_workers = resizes_.target();
  return s;
}

proto::JobStatus CoordinatorCore::Snapshot() const {
  proto::JobStatus s = BriefSnapshot();
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
    ws.last_heartbeat_ms_ago = health_.MillisSinceLast(w->slot);
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
    r.bytes_moved = h.timings.bytes_moved;
    r.groups_rebuilt = h.timings.groups_rebuilt;
    r.groups_kept = h.timings.groups_kept;
    s.history.push_back(std::move(r));
  }
  for (const HostInfo& h : hosts_.hosts()) {
    s.agents.push_back(proto::AgentStatus{h.agent, h.name, h.slots});
    proto::HostStatus hs;
    hs.name = h.name;
    hs.address = h.address;
    hs.slots = h.slots;
    hs.gpus = h.gpus;
    hs.workers = static_cast<int32_t>(hosts_.WorkersOn(h.name).size());
    hs.state = h.state;
    if (h.heartbeats && (h.state == proto::HostState::kUp ||
                         h.state == proto::HostState::kDraining)) {
      hs.last_heartbeat_ms_ago =
          std::chrono::duration_cast<Duration>(clock_->Now() - h.last_heartbeat).count();
    }
    s.hosts.push_back(std::move(hs));
  }
  s.spares_target = resizes_.spares();
  s.malformed_frames = outbox_.malformed_frames();
  s.stale_messages = outbox_.stale_messages();
  s.checkpoint_step = checkpoints_.latest_step();
  s.checkpoint_dir = checkpoints_.latest_dir();
  s.checkpoint_error_step = checkpoints_.last_error_step();
  s.checkpoint_error = checkpoints_.last_error();
  s.waiting_reason = generations_.waiting_reason();
  if (const auto& resize = resizes_.pending();
      resize && resize->reason != proto::GenerationReason::kRegrow) {
    s.resize_pending = true;
    s.resize_workers = resize->workers;
    s.resize_waiting_for_workers = resize->waiting_for_workers;
  }
  s.training = training_.Snapshot();
  return s;
}

}  // namespace elastra::coordinator
