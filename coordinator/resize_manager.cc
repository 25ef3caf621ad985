#include "coordinator/resize_manager.h"

#include <algorithm>

#include "common/logging.h"

namespace elastra::coordinator {
namespace {

double MsBetween(TimePoint from, TimePoint to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

using proto::GenerationReason;

}  // namespace

Status ResizeManager::CheckCanChange() const {
  if (generations_->job_over()) {
    return FailedPreconditionError(std::string("the job is ") +
                                   proto::ToString(generations_->state()));
  }
  if (const std::string id = FinishedMember(); !id.empty()) {
    return FailedPreconditionError("worker " + id + " has finished training; the job is ending");
  }
  if ((pending_ && !PendingGivesWay()) || generations_->phase() != Phase::kIdle || restoring_) {
    return BusyError(std::string("another reconfiguration is in progress (") +
                                   (pending_ ? proto::ToString(pending_->reason)
                                             : proto::ToString(generations_->state())) +
                                   "); retry when it is done");
  }
  return OkStatus();
}

std::string ResizeManager::FinishedMember() const {
  // O(1) while no worker has finished: the committed members are looked up only then.
  if (membership_->FinishedCount() == 0) return "";
  for (const auto& id : generations_->members()) {
    const WorkerInfo* w = membership_->Find(id);
    if (w != nullptr && w->state == WorkerState::kFinished) return id;
  }
  return "";
}

bool ResizeManager::PendingGivesWay() const {
  return pending_ && pending_->reason == GenerationReason::kRegrow &&
         generations_->phase() == Phase::kIdle;
}

void ResizeManager::OnResize(const std::string& identity, const proto::Envelope& e) {
  auto decoded = outbox_->DecodeOrReply<proto::ResizeRequest>(identity, e);
  if (!decoded) return;
  const proto::ResizeRequest& req = *decoded;
  // Only an admin key reaches here (CoordinatorCore): a refusal is journaled, an event.
  auto refuse = [&](Status s) {
    journal_->ResizeRefused(req.workers, req.has_layout ? &req.layout : nullptr, "", s);
    outbox_->SendError(identity, e.request_id, s);
  };
  if (req.spares < -1) {
    return refuse(
        InvalidArgumentError("spares must be 0 or more; asked for " + std::to_string(req.spares)));
  }
  if (req.spares > options_->max_workers) {
    return refuse(InvalidArgumentError(
        "asked for " + std::to_string(req.spares) + " spares; this job allows at most " +
        std::to_string(options_->max_workers) + " workers (max_workers)"));
  }
  if (req.workers == 0 && req.spares >= 0) {
    // Only the spares change: no generation changes for it, so it is done at once, whatever
    // runs now (a change in flight uses the new number from its next step on).
    if (generations_->job_over()) return refuse(CheckCanChange());
    SetSpares(req.spares);
    const int stopped = spares_to_stop_ > 0 ? StopSparesBeyond() : 0;
    proto::ResizeReply reply;
    reply.phase = proto::ResizePhase::kDone;
    reply.generation = generations_->generation();
    reply.workers = static_cast<int32_t>(membership_->MemberCount());
    reply.layout = generations_->layout();
    reply.message = "the job keeps " + std::to_string(spares()) + " spare(s)";
    if (stopped > 0) {
      reply.message += "; " + std::to_string(stopped) + " standby worker(s) beyond them stop";
    } else if (spares_to_stop_ > 0) {
      reply.message += "; the standby workers beyond them stop once the change in flight ends";
    }
    outbox_->Send(identity, proto::MessageType::kResizeReply, reply, e.request_id);
    MaybeReplenishSpares();
    return;
  }
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
    // Enough live workers must hold their share of it; those with less memory stay standby
    // (docs/recovery.md).
    std::vector<std::string> live = membership_->Members();
    for (auto& id : membership_->Standby()) live.push_back(std::move(id));
    Status fits = generations_->CheckEnoughFit(req.layout, static_cast<size_t>(req.workers), live);
    if (!fits.ok()) return refuse(fits);
  }
  if (generations_->job_over()) return refuse(CheckCanChange());
  if (generations_->generation() == 0) {
    return refuse(
        FailedPreconditionError("no generation has formed yet; wait for the job to "
                                "start before resizing"));
  }
  if (Status can = CheckCanChange(); !can.ok()) return refuse(can);
  const size_t members = membership_->MemberCount();
  if (!hosts_->empty() && static_cast<size_t>(req.workers) > members) {
    // With agents, new workers start only in free slots: a size beyond them cannot be reached.
    // The slots of workers still leaving after a shrink count: they are free once those exit,
    // and the new workers are asked for then (WorkerService calls ContinueIfWaitingForWorkers).
    const size_t room = members + hosts_->UsableStandby().size() +
                        hosts_->FreeSlotsTotal(clock_->Now(), /*watched_only=*/false) +
                        hosts_->LeavingTotal(clock_->Now(), /*watched_only=*/false) +
                        hosts_->Outstanding();
    if (static_cast<size_t>(req.workers) > room) {
      int slots = 0;
      std::string each;
      for (const auto& h : hosts_->hosts()) {
        if (h.state != proto::HostState::kUp) continue;
        slots += h.slots;
        each += (each.empty() ? "" : ", ") + h.name + ": " + std::to_string(h.slots);
      }
      return refuse(ResourceExhaustedError(
          "asked for " + std::to_string(req.workers) + " workers; the live hosts have " +
          std::to_string(slots) + " slots (" + each + "), room for at most " +
          std::to_string(room) + " workers"));
    }
  }
  if (pending_) {
    LOG(INFO) << "a resize replaces the regrow that was waiting for workers";
    pending_.reset();
  }
  if (req.spares >= 0) SetSpares(req.spares);  // before the grow counts the spares it keeps
  if (static_cast<size_t>(req.workers) == members &&
      (!req.has_layout || req.layout == generations_->layout())) {
    SetTarget(req.workers, /*journal=*/true);
    proto::ResizeReply reply;
    reply.phase = proto::ResizePhase::kDone;
    reply.generation = generations_->generation();
    reply.workers = req.workers;
    reply.layout = generations_->layout();
    reply.message = "the job already runs with " + std::to_string(members) + " workers";
    outbox_->Send(identity, proto::MessageType::kResizeReply, reply, e.request_id);
    MaybeReplenishSpares();
    return;
  }
  Pending p;
  p.reason = GenerationReason::kResize;
  p.identity = identity;
  p.request_id = e.request_id;
  p.workers = req.workers;
  p.has_layout = req.has_layout;
  p.layout = req.layout;
  p.wait = req.wait;
  p.received = clock_->Now();
  pending_ = p;
  journal_->Resize(p.workers, p.has_layout, p.layout);  // the target too (docs/journal.md)
  SetTarget(req.workers, /*journal=*/false);
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

void ResizeManager::OnDrain(const std::string& identity, proto::Role role,
                            const proto::Envelope& e) {
  auto decoded = outbox_->DecodeOrReply<proto::DrainRequest>(identity, e);
  if (!decoded) return;
  const proto::DrainRequest& req = *decoded;
  // A refusal is journaled (an event) unless the sender holds no right to ask at all: a worker
  // key must not be able to fill the journal.
  auto refuse = [&](Status s) {
    if (s.code() != StatusCode::kUnauthenticated) journal_->ResizeRefused(0, nullptr, req.host, s);
    outbox_->SendError(identity, e.request_id, s);
  };
  if (role != proto::Role::kAdmin) {
    const HostInfo* own = hosts_->FindByAgent(e.sender);
    if (own == nullptr || own->name != req.host) {
      return refuse(UnauthenticatedError(
          "draining host " + req.host + " needs an admin key; a worker key may drain only the " +
          (own == nullptr ? std::string("host its agent registered, and '") + e.sender +
                                "' registered none"
                          : "host of its own agent (" + own->name + ")")));
    }
  }
  HostInfo* host = hosts_->Find(req.host);
  if (host == nullptr) return refuse(NotFoundError("no host '" + req.host + "' in this job"));
  if (host->state != proto::HostState::kUp) {
    return refuse(FailedPreconditionError("host " + req.host + " is " +
                                          proto::ToString(host->state) + ", not up"));
  }
  if (Status can = CheckCanChange(); !can.ok()) return refuse(can);
  const size_t members = membership_->MemberCount();
  const size_t staying = Staying(req.host);
  auto done_at_once = [&](const std::string& message) {
    proto::ResizeReply reply;
    reply.phase = proto::ResizePhase::kDone;
    reply.generation = generations_->generation();
    reply.workers = static_cast<int32_t>(members);
    reply.layout = generations_->layout();
    reply.message = message;
    outbox_->Send(identity, proto::MessageType::kResizeReply, reply, e.request_id);
  };
  if (staying == members) {
    // No member runs there (only standby workers, or nothing): nothing to hand off.
    host_manager_->FinishDrain(host);
    done_at_once("host " + req.host + " ran no member; drained at once");
    return;
  }
  // Where the job can go: the members elsewhere, standby workers elsewhere, free slots elsewhere.
  int on_their_way = 0;
  for (const auto& h : hosts_->hosts()) {
    if (h.name != req.host) on_their_way += static_cast<int>(h.spawns.size());
  }
  const int room = static_cast<int>(staying + hosts_->UsableStandby(req.host).size()) +
                   hosts_->FreeSlotsTotal(clock_->Now(), /*watched_only=*/false, req.host) +
                   on_their_way;
  if (room == 0) {
    return refuse(FailedPreconditionError(
        "draining host " + req.host +
        " would leave the job with no worker: no other host has a member, a standby worker or "
        "a free slot"));
  }
  if (pending_) {
    LOG(INFO) << "a drain replaces the regrow that was waiting for workers";
    pending_.reset();
  }
  const int want = std::min(target(), room);
  if (want < target()) {
    LOG(WARNING) << "draining host " << req.host << ": the other hosts hold " << room
                 << " workers; the target drops from " << target() << " to " << want;
    SetTarget(want, /*journal=*/true);
  }
  host->state = proto::HostState::kDraining;
  Pending p;
  p.reason = GenerationReason::kDrain;
  p.identity = identity;
  p.request_id = e.request_id;
  p.workers = want;
  p.wait = req.wait;
  p.host = req.host;
  p.received = clock_->Now();
  pending_ = p;
  proto::ResizeReply accepted;
  accepted.phase = proto::ResizePhase::kAccepted;
  accepted.generation = generations_->generation();
  accepted.workers = want;
  accepted.layout = layouts_->Default(want, generations_->layout());
  outbox_->Send(identity, proto::MessageType::kResizeReply, accepted, e.request_id);
  LOG(INFO) << "drain of host " << req.host << " accepted: " << members - staying
            << " member(s) leave it; the job goes on with " << want << " workers";
  Continue();
}

size_t ResizeManager::Staying(const std::string& except) const {
  const size_t members = membership_->MemberCount();
  if (except.empty()) return members;
  return members - membership_->CountOn(except, {WorkerState::kMember});
}

std::string ResizeManager::DrainedHost() const {
  return pending_ && pending_->reason == GenerationReason::kDrain ? pending_->host : "";
}

void ResizeManager::Continue() {
  if (!pending_ || generations_->phase() != Phase::kIdle || generations_->job_over()) return;
  Pending& p = *pending_;
  const std::string except = DrainedHost();
  const size_t members = membership_->MemberCount();
  const size_t staying = Staying(except);
  const size_t want = static_cast<size_t>(p.workers);
  if (p.reason == GenerationReason::kDrain) {
    if (staying == members) {
      FinishDrain();
      return;
    }
  } else if (want == members &&
             (!p.has_layout || p.layout == generations_->layout())) {
    Reply(proto::ResizePhase::kDone, "");
    End();
    return;
  } else if (p.reason == GenerationReason::kRegrow && members >= want) {
    End();  // something else brought the job there
    return;
  }
  if (want > staying && EndShortOfMemory(members, hosts_->UsableStandby(except))) return;
  if (want > staying) {
    // A regrow starts workers only where agents heartbeat (see HostInfo::heartbeats); a resize
    // or a drain was asked for and uses any live host. No agent: wait for workers started
    // elsewhere.
    const bool watched_only = p.reason == GenerationReason::kRegrow;
    const size_t standby = hosts_->UsableStandby(except).size();
    const int on_their_way = OnTheirWay(except);
    // The spares stay standing when free slots can start the workers the change lacks.
    const size_t startable = static_cast<size_t>(
        hosts_->FreeSlotsTotal(clock_->Now(), watched_only, except) + on_their_way);
    const size_t kept = SparesKept(want, staying, standby, startable);
    const size_t have = staying + standby - kept;
    if (have < want) {
      if (!p.waiting_for_workers) {
        p.waiting_for_workers = true;
        p.spawn_deadline = clock_->Now() + options_->spawn_timeout;
      }
      const int needed = static_cast<int>(want - have) - on_their_way;
      host_manager_->Spawn(needed, Placement::kFullestFirst, watched_only, except);
      return;  // wait for joins
    }
    p.waiting_for_workers = false;
    if (const size_t used = std::min<size_t>(spares(), standby) - kept; used > 0) {
      LOG(WARNING) << proto::ToString(p.reason) << " to " << want << " workers uses " << used
                   << " of the " << spares() << " spare(s): no free slot starts its workers";
    }
  }
  BeginPause();
}

int ResizeManager::OnTheirWay(const std::string& except) const {
  int on_their_way = 0;
  for (const auto& h : hosts_->hosts()) {
    if (h.name != except) on_their_way += static_cast<int>(h.spawns.size());
  }
  return on_their_way;
}

bool ResizeManager::EndShortOfMemory(size_t members, const std::vector<std::string>& standbys) {
  Pending& p = *pending_;
  const size_t want = static_cast<size_t>(p.workers);
  const size_t standby = standbys.size();
  // Memory can leave out only a standby that declared how much it has.
  for (const auto& id : standbys) {
    const WorkerInfo* w = membership_->Find(id);
    if (w == nullptr || w->memory_bytes <= 0) return false;
  }
  if (p.reason == GenerationReason::kDrain || p.paused_at == 0 ||
      generations_->generation() <= p.paused_at || generations_->history().empty() ||
      generations_->history().back().reason != p.reason || members + standby < want) {
    return false;
  }
  const std::string why = "the job runs " + std::to_string(members) + " workers at " +
                          generations_->layout().ToString() + ": the memory of the " +
                          std::to_string(standby) + " standby worker(s) fits no larger layout";
  LOG(WARNING) << proto::ToString(p.reason) << " to " << want << " workers: " << why;
  if (p.reason == GenerationReason::kResize) {
    Reply(p.has_layout ? proto::ResizePhase::kFailed : proto::ResizePhase::kDone, why);
  }
  short_of_memory_.emplace(members, standby, generations_->generation());
  End();
  return true;
}

void ResizeManager::BeginPause() {
  pending_->paused_at = generations_->generation();
  const Pending& p = *pending_;
  SizeGoal goal;
  goal.workers = static_cast<size_t>(p.workers);
  goal.has_layout = p.has_layout;
  goal.layout = p.layout;
  goal.reason = p.reason;
  if (p.reason == GenerationReason::kDrain) goal.except_host = p.host;
  generations_->BeginPause(goal);
}

void ResizeManager::ContinueIfWaitingForWorkers() {
  if (pending_ && pending_->waiting_for_workers && generations_->phase() == Phase::kIdle) {
    Continue();
  }
}

void ResizeManager::MaybeRegrow() {
  if (restoring_ || pending_ || generations_->phase() != Phase::kIdle ||
      generations_->job_over() || generations_->generation() == 0) {
    return;
  }
  // Called on every agent registration (each agent every 2 s) and commit: O(1) while the job is
  // at its target, O(hosts) while it is below and nothing can join (a host lost for good), and
  // O(workers) only when a regrow starts.
  const int members = static_cast<int>(membership_->MemberCount());
  if (members >= target()) return;
  const int standby = static_cast<int>(hosts_->UsableStandby().size());
  // The last change left these standby workers out for their memory: they would again.
  const auto workers = std::make_tuple(static_cast<size_t>(members), static_cast<size_t>(standby),
                                       generations_->generation());
  if (short_of_memory_ == workers) return;
  const int free = hosts_->FreeSlotsTotal(clock_->Now(), /*watched_only=*/true);
  const int room = members + standby + free + hosts_->Outstanding();
  const int want = std::min(target(), room);
  if (want <= members) return;
  // A regrow keeps the model parallelism (docs/recovery.md): it starts only when the workers
  // make at least one more whole replica.
  const Layout& current = generations_->layout();
  const int replica = current.pp * current.tp;
  if (replica > 1 && want / replica * replica <= members) return;
  if (!FinishedMember().empty()) return;  // the job is ending
  Pending p;
  p.reason = GenerationReason::kRegrow;
  p.workers = want;
  p.received = clock_->Now();
  pending_ = p;
  LOG(INFO) << "regrowing from " << members << " to " << want << " workers (target "
            << target() << "; " << standby << " standby, " << free << " free slots)";
  Continue();
}

void ResizeManager::Tick() {
  if (!pending_ || !pending_->waiting_for_workers || generations_->phase() != Phase::kIdle ||
      clock_->Now() < pending_->spawn_deadline) {
    return;
  }
  Pending& p = *pending_;
  const std::string except = DrainedHost();
  const size_t members = membership_->MemberCount();
  const size_t staying = Staying(except);
  // The spares count here: past the deadline, the change uses them rather than fail.
  const size_t have = staying + hosts_->UsableStandby(except).size();
  const std::string timeout =
      "within spawn_timeout (" + std::to_string(options_->spawn_timeout.count()) + " ms)";
  if (have >= static_cast<size_t>(p.workers)) {
    LOG(WARNING) << proto::ToString(p.reason) << ": its new workers did not join " << timeout
                 << "; it uses spares";
    p.waiting_for_workers = false;
    BeginPause();
    return;
  }
  switch (p.reason) {
    case GenerationReason::kRegrow:
      if (have > members) break;  // grow back as far as the workers that came allow
      LOG(WARNING) << "regrow: no new worker joined " << timeout << "; staying at "
                   << members << " workers until a host or a change makes room";
      End();
      return;
    case GenerationReason::kDrain:
      if (have > 0) break;  // leave the host with the workers that came
      if (HostInfo* host = hosts_->Find(p.host);
          host != nullptr && host->state == proto::HostState::kDraining) {
        host->state = proto::HostState::kUp;
      }
      Reply(proto::ResizePhase::kFailed,
            "no worker could take over from host " + p.host + " " + timeout);
      End();
      return;
    default:
      Reply(proto::ResizePhase::kFailed, "only " + std::to_string(have) + " of " +
                                             std::to_string(p.workers) +
                                             " workers were available " + timeout);
      End();
      return;
  }
  LOG(WARNING) << proto::ToString(p.reason) << ": " << have << " of " << p.workers
               << " workers joined " << timeout << "; going on with " << have;
  p.workers = static_cast<int>(have);
  p.waiting_for_workers = false;
  BeginPause();
}

void ResizeManager::FinishDrain() {
  HostInfo* host = hosts_->Find(pending_->host);
  const bool lost = host != nullptr && host->state == proto::HostState::kLost;
  host_manager_->FinishDrain(host);
  Reply(proto::ResizePhase::kDone, lost ? "host " + pending_->host + " was lost while draining"
                                        : "host " + pending_->host + " drained");
  End();
}

void ResizeManager::SetSpares(int spares) {
  if (spares == this->spares()) return;
  LOG(INFO) << "the job keeps " << spares << " spare(s) (was " << this->spares() << ")";
  spares_to_stop_ = std::max(0, this->spares() - spares);
  spares_ = spares;
  journal_->Target(target(), spares);
}

void ResizeManager::SetTarget(int workers, bool journal) {
  if (workers == target()) return;
  target_ = workers;
  if (journal) journal_->Target(workers);
}

void ResizeManager::Reply(proto::ResizePhase phase, const std::string& message) {
  if (pending_) pending_->answered = phase;
  if (!pending_) return;
  if (pending_->wait) {
    proto::ResizeReply reply;
    reply.phase = phase;
    reply.generation = generations_->generation();
    reply.workers = static_cast<int32_t>(membership_->MemberCount());
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
    LOG(WARNING) << proto::ToString(pending_->reason) << " " << proto::ToString(phase) << ": "
                 << message;
  }
}

void ResizeManager::OnJobEnd(const std::string& message) {
  Reply(proto::ResizePhase::kFailed, message);
  pending_.reset();  // the end record closes a resize
}

void ResizeManager::Restore(const std::optional<JournalResize>& resize, int target, int spares) {
  target_ = target;
  spares_ = spares;
  if (!resize) return;
  Pending p;
  p.reason = GenerationReason::kResize;
  p.workers = resize->workers;
  p.has_layout = resize->has_layout;
  p.layout = resize->layout;
  p.wait = false;  // the client that asked is gone (docs/journal.md)
  p.received = clock_->Now();
  pending_ = p;
}

void ResizeManager::End() {
  if (!pending_) return;
  const bool resize = pending_->reason == GenerationReason::kResize;
  const bool done = pending_->answered == proto::ResizePhase::kDone;
  pending_.reset();
  if (resize) journal_->ResizeEnd(done, generations_->generation());
}

}  // namespace elastra::coordinator
