#include "coordinator/host_manager.h"

#include <algorithm>

#include "common/logging.h"

namespace elastra::coordinator {
namespace {

template <class D>
int64_t Ms(D d) {
  return std::chrono::duration_cast<Duration>(d).count();
}

}  // namespace

void HostManager::AddHostListener(std::function<void()> listener) {
  listeners_.push_back(std::move(listener));
}

void HostManager::Notify() {
  for (const auto& listener : listeners_) listener();
}

void HostManager::OnAgentRegister(const std::string& identity, const proto::Envelope& e) {
  auto req = outbox_->DecodeOrReply<proto::AgentRegister>(identity, e);
  if (!req) return;
  const HostInfo* before = hosts_->Find(req->host);
  const bool known = before != nullptr && before->agent == e.sender;
  const bool was_lost = before != nullptr && before->state == proto::HostState::kLost;
  // An agent registers again every 2 s. When nothing the other managers decide on changed (the
  // same agent, host up, the same slots and GPUs), they are not told: at 2,048 hosts that is
  // 1,000 registrations a second, and a grow waiting for its workers looked at the whole job on
  // each (docs/scale.md). Time-based changes (a backoff ending) come from Tick.
  const bool unchanged = known && before->state == proto::HostState::kUp &&
                         before->slots == req->max_workers && before->gpus == req->gpus;
  auto host = hosts_->Register(*req, e.sender, identity, clock_->Now(), options_->heartbeat_timeout);
  if (!host.ok()) {
    outbox_->SendError(identity, e.request_id, host.status());
    return;
  }
  outbox_->Send(identity, proto::MessageType::kAck, proto::Ack{}, e.request_id);
  if ((*host)->heartbeats) agent_deadlines_.Beat((*host)->position);  // its deadline moved on
  if (generations_->job_over()) {
    // An agent registering again after a restart may have missed the job's end.
    proto::Shutdown shutdown;
    const bool finished = generations_->state() == proto::JobState::kFinished;
    shutdown.exit_code = finished ? 0 : 1;
    shutdown.reason = finished ? "every member finished" : "the job failed";
    outbox_->Send(identity, proto::MessageType::kShutdown, shutdown, 0);
    return;
  }
  if ((*host)->state == proto::HostState::kDrained) {
    outbox_->Send(identity, proto::MessageType::kShutdown, proto::Shutdown{0, "host drained"}, 0);
    return;
  }
  if (!known || was_lost) {
    LOG(INFO) << (was_lost ? "host " + req->host + " is back" : "host " + req->host + " registered")
              << " (agent " << e.sender << ", " << req->max_workers << " slots, " << req->gpus
              << " GPUs" << (req->address.empty() ? "" : ", address " + req->address) << ")";
  }
  if (!unchanged) Notify();
}

bool HostManager::OnAgentHeartbeat(const std::string& sender) {
  HostInfo* host = hosts_->FindByAgent(sender);
  if (host == nullptr) return false;
  const bool first = !host->heartbeats;
  host->heartbeats = true;
  host->last_heartbeat = clock_->Now();
  agent_deadlines_.Beat(host->position);
  if (first && host->state == proto::HostState::kUp) Notify();
  return true;
}

int HostManager::Spawn(int n, Placement placement, bool watched_only, const std::string& except,
                       const std::vector<std::string>& first) {
  if (n <= 0) return 0;
  const TimePoint now = clock_->Now();
  int asked = 0;
  for (const auto& [host, count] : hosts_->Place(n, placement, now, watched_only, except, first)) {
    proto::SpawnRequest spawn;
    for (int i = 0; i < count; ++i) {
      std::string id = membership_->NextWorkerId();
      hosts_->AddSpawn(host, id, now + options_->spawn_timeout);
      spawn.worker_ids.push_back(std::move(id));
    }
    journal_->Ids(spawn.worker_ids);
    outbox_->Send(host->identity, proto::MessageType::kSpawnRequest, spawn, 0);
    LOG(INFO) << "asked the agent of host " << host->name << " to start " << count
              << " worker(s)";
    asked += count;
  }
  return asked;
}

void HostManager::MaybeStartFirstWorkers() {
  if (generations_->job_over() || generations_->generation() != 0 ||
      generations_->phase() != Phase::kIdle) {
    return;
  }
  const int have =
      static_cast<int>(hosts_->UsableStandby().size()) + hosts_->Outstanding();
  Spawn(options_->initial_workers - have, Placement::kInOrder, /*watched_only=*/true);
}

void HostManager::OnJoined(WorkerInfo* w) {
  HostInfo* host = hosts_->TakeSpawn(w->id);
  if (host == nullptr) return;
  if (w->host != host->name) {
    LOG(WARNING) << "worker " << w->id << " joined with host name '" << w->host
                 << "' but was started by the agent of host " << host->name << "; counting it on "
                 << host->name;
    membership_->SetHost(w->id, host->name);
  }
  host->failed_starts = 0;
}

void HostManager::OnExited(const std::string& id) {
  if (HostInfo* host = hosts_->TakeSpawn(id)) FailedStart(host, id, "exited before joining");
}

void HostManager::FailedStart(HostInfo* host, const std::string& id, const std::string& what) {
  ++host->failed_starts;
  // Back off: a program that cannot start must not be restarted in a tight loop. The pause
  // doubles with each failure in a row, from the heartbeat timeout up to spawn_timeout.
  Duration pause = options_->heartbeat_timeout;
  for (int i = 1; i < host->failed_starts && pause < options_->spawn_timeout; ++i) pause *= 2;
  pause = std::min(pause, std::chrono::duration_cast<Duration>(options_->spawn_timeout));
  host->no_starts_until = clock_->Now() + pause;
  backoff_ends_ = backoff_ends_ ? std::min(*backoff_ends_, host->no_starts_until)
                                : host->no_starts_until;
  LOG(WARNING) << "worker " << id << " on host " << host->name << " " << what << " ("
               << host->failed_starts << " in a row); no new worker starts there for "
               << Ms(pause) << " ms";
}

void HostManager::Tick() {
  const TimePoint now = clock_->Now();
  for (uint32_t position : agent_deadlines_.TakeExpired()) {  // in registration order
    HostInfo& host = hosts_->hosts()[position];
    if (host.state != proto::HostState::kUp && host.state != proto::HostState::kDraining) continue;
    LoseHost(&host, "its agent " + host.agent + " was silent for " +
                        std::to_string(Ms(now - host.last_heartbeat)) + " ms");
    if (generations_->job_over()) return;
  }
  for (const auto& [id, host] : hosts_->TakeExpiredSpawns(now)) {
    FailedStart(host, id,
                "did not join within spawn_timeout (" +
                    std::to_string(options_->spawn_timeout.count()) + " ms)");
  }
  if (backoff_ends_ && now >= *backoff_ends_) {
    backoff_ends_.reset();
    for (const auto& host : hosts_->hosts()) {
      if (host.no_starts_until > now) {
        backoff_ends_ = backoff_ends_ ? std::min(*backoff_ends_, host.no_starts_until)
                                      : host.no_starts_until;
      }
    }
    Notify();
  }
}

std::vector<std::string> HostManager::LoseHostsOf(const std::vector<std::string>& members) {
  const TimePoint now = clock_->Now();
  std::vector<std::string> rest;
  for (const auto& id : members) {
    const WorkerInfo* w = membership_->Find(id);
    HostInfo* host = w != nullptr ? hosts_->Find(w->host) : nullptr;
    const bool silent_agent =
        host != nullptr && host->heartbeats &&
        (host->state == proto::HostState::kUp || host->state == proto::HostState::kDraining) &&
        now - host->last_heartbeat > options_->heartbeat_timeout / 2;
    if (!silent_agent) {
      // Still a member (not taken by a host lost just before in this loop)?
      if (w != nullptr && w->state == WorkerState::kMember) rest.push_back(id);
      continue;
    }
    LoseHost(host, "member " + id + " missed its heartbeat deadline and agent " + host->agent +
                       " has been silent for " + std::to_string(Ms(now - host->last_heartbeat)) +
                       " ms");
  }
  return rest;
}

void HostManager::LoseHost(HostInfo* host, const std::string& why) {
  host->state = proto::HostState::kLost;
  hosts_->ClearSpawns(host);
  std::vector<std::string> lost;
  for (const auto& id : hosts_->WorkersOn(host->name)) {
    const WorkerInfo* w = membership_->Find(id);
    if (w->state == WorkerState::kLeaving) {
      membership_->Remove(id);  // it was handing off and leaving anyway
    } else {
      lost.push_back(id);
    }
  }
  LOG(WARNING) << "host " << host->name << " lost (" << why << "): " << lost.size()
               << " worker(s) leave the job together";
  journal_->HostLost(host->name, why, lost);  // an event; the workers' records follow
  if (!lost.empty()) generations_->LoseWorkers(lost, "host " + host->name + " lost (" + why + ")");
}

void HostManager::FinishDrain(HostInfo* host) {
  if (host == nullptr) return;
  hosts_->ClearSpawns(host);
  const proto::Shutdown shutdown{0, "host drained"};
  for (const auto& id : hosts_->WorkersOn(host->name)) {
    const WorkerInfo* w = membership_->Find(id);
    if (w->state != WorkerState::kStandby) continue;
    outbox_->Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    journal_->WorkerState(id, JournalWorkerState::kRemoved);
    membership_->Remove(id);
  }
  if (host->state == proto::HostState::kLost) return;
  host->state = proto::HostState::kDrained;
  outbox_->Send(host->identity, proto::MessageType::kShutdown, shutdown, 0);
  LOG(INFO) << "host " << host->name << " drained; its agent " << host->agent
            << " was told to exit";
}

}  // namespace elastra::coordinator
