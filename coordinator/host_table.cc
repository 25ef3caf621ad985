#include "coordinator/host_table.h"

#include <algorithm>

#include "protocol/codec.h"

namespace elastra::coordinator {

StatusOr<HostInfo*> HostTable::Register(const proto::AgentRegister& request,
                                        const std::string& agent, const std::string& identity,
                                        TimePoint now, Duration timeout) {
  if (request.host.empty()) return InvalidArgumentError("an agent registered without a host name");
  if (request.host.size() > proto::kMaxNameBytes) {
    return InvalidArgumentError("host name longer than " + std::to_string(proto::kMaxNameBytes) +
                                " bytes");
  }
  if (request.max_workers < 0 || request.gpus < 0) {
    return InvalidArgumentError("host " + request.host + " registered " +
                                std::to_string(request.max_workers) + " slots and " +
                                std::to_string(request.gpus) + " GPUs");
  }
  HostInfo* host = Find(request.host);
  if (host != nullptr && host->agent != agent && host->state != proto::HostState::kLost &&
      host->state != proto::HostState::kDrained && now - host->last_heartbeat <= timeout) {
    return FailedPreconditionError("host " + request.host + " is already registered by agent " +
                              host->agent + "; give each agent its own host name (--name)");
  }
  if (host == nullptr) {
    by_name_[request.host] = hosts_.size();
    hosts_.emplace_back();
    host = &hosts_.back();
    host->name = request.host;
    host->position = static_cast<uint32_t>(hosts_.size() - 1);
  }
  const size_t position = by_name_.at(request.host);
  if (host->agent != agent) {
    if (auto old = by_agent_.find(host->agent); old != by_agent_.end()) {
      old->second.erase(position);
      if (old->second.empty()) by_agent_.erase(old);
    }
    by_agent_[agent].insert(position);
  }
  host->address = request.address;
  host->slots = request.max_workers;
  host->gpus = request.gpus;
  host->agent = agent;
  host->identity = identity;
  host->last_heartbeat = now;
  if (host->state == proto::HostState::kLost) host->state = proto::HostState::kUp;
  return host;
}

HostInfo* HostTable::Find(const std::string& name) {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &hosts_[it->second];
}

const HostInfo* HostTable::Find(const std::string& name) const {
  return const_cast<HostTable*>(this)->Find(name);
}

HostInfo* HostTable::FindByAgent(const std::string& agent) {
  if (agent.empty()) return nullptr;
  auto it = by_agent_.find(agent);
  if (it == by_agent_.end() || it->second.empty()) return nullptr;
  return &hosts_[*it->second.rbegin()];  // the latest of its hosts in registration order
}

const HostInfo* HostTable::FindByAgent(const std::string& agent) const {
  return const_cast<HostTable*>(this)->FindByAgent(agent);
}

std::vector<std::string> HostTable::WorkersOn(const std::string& host) const {
  std::vector<std::string> out;
  for (const WorkerInfo* w : membership_->On(host)) {
    if (Membership::HoldsSlot(w->state)) out.push_back(w->id);
  }
  return out;
}

int HostTable::FreeSlots(const HostInfo& host) const {
  // Counted, not listed (Membership keeps the count): a resize sums this over every host.
  const int used = static_cast<int>(membership_->SlotsHeldOn(host.name) + host.spawns.size());
  return std::max(0, host.slots - used);
}

bool HostTable::CanStart(const HostInfo& host, TimePoint now, bool watched_only) const {
  if (host.state != proto::HostState::kUp) return false;
  if (watched_only && !host.heartbeats) return false;
  return now >= host.no_starts_until;
}

bool HostTable::Usable(const WorkerInfo& worker) const {
  const HostInfo* host = Find(worker.host);
  return host == nullptr || host->state == proto::HostState::kUp;
}

std::vector<std::string> HostTable::UsableStandby(const std::string& except) const {
  std::vector<std::string> out;
  for (const auto& id : membership_->Standby()) {
    const WorkerInfo* w = membership_->Find(id);
    if (w != nullptr && Usable(*w) && (except.empty() || w->host != except)) out.push_back(id);
  }
  return out;
}

int HostTable::FreeSlotsTotal(TimePoint now, bool watched_only, const std::string& except) const {
  int free = 0;
  for (const auto& h : hosts_) {
    if (h.name == except || !CanStart(h, now, watched_only)) continue;
    free += FreeSlots(h);
  }
  return free;
}

int HostTable::LeavingTotal(TimePoint now, bool watched_only, const std::string& except) const {
  int leaving = 0;
  for (const WorkerInfo* w : membership_->Leaving()) {
    const HostInfo* h = Find(w->host);
    if (h != nullptr && h->name != except && CanStart(*h, now, watched_only)) ++leaving;
  }
  return leaving;
}

std::vector<std::pair<HostInfo*, int>> HostTable::Place(int n, Placement placement, TimePoint now,
                                                        bool watched_only,
                                                        const std::string& except,
                                                        const std::vector<std::string>& first) {
  struct Candidate {
    HostInfo* host;
    int free;
    int workers;
    int take = 0;
  };
  std::vector<Candidate> candidates;
  for (auto& h : hosts_) {
    if (h.name == except || !CanStart(h, now, watched_only)) continue;
    const int free = FreeSlots(h);
    if (free > 0) {
      candidates.push_back(
          {&h, free, static_cast<int>(membership_->SlotsHeldOn(h.name) + h.spawns.size())});
    }
  }
  if (placement == Placement::kFullestFirst) {
    // Stable: among equally full hosts, registration order.
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.workers > b.workers; });
  }
  // The named hosts first, one worker a name, in the order named (a few names: a linear search).
  std::vector<size_t> order;
  for (const auto& name : first) {
    if (n <= 0) break;
    auto c = std::find_if(candidates.begin(), candidates.end(),
                          [&name](const Candidate& x) { return x.host->name == name; });
    if (c == candidates.end() || c->take >= c->free) continue;
    if (c->take == 0) order.push_back(static_cast<size_t>(c - candidates.begin()));
    ++c->take;
    --n;
  }
  for (size_t i = 0; i < candidates.size() && n > 0; ++i) {
    Candidate& c = candidates[i];
    const int take = std::min(n, c.free - c.take);
    if (take <= 0) continue;
    if (c.take == 0) order.push_back(i);
    c.take += take;
    n -= take;
  }
  std::vector<std::pair<HostInfo*, int>> out;
  out.reserve(order.size());
  for (const size_t i : order) out.emplace_back(candidates[i].host, candidates[i].take);
  return out;
}

void HostTable::AddSpawn(HostInfo* host, const std::string& id, TimePoint deadline) {
  TakeSpawn(id);  // asked again: only the latest request counts
  host->spawns[id] = deadline;
  spawn_host_[id] = host;
  spawn_deadlines_.emplace(deadline, id);
}

HostInfo* HostTable::TakeSpawn(const std::string& id) {
  auto it = spawn_host_.find(id);
  if (it == spawn_host_.end()) return nullptr;
  HostInfo* host = it->second;
  spawn_host_.erase(it);
  auto spawn = host->spawns.find(id);
  if (spawn != host->spawns.end()) {
    spawn_deadlines_.erase({spawn->second, id});
    host->spawns.erase(spawn);
  }
  return host;
}

const HostInfo* HostTable::SpawnHost(const std::string& id) const {
  auto it = spawn_host_.find(id);
  return it == spawn_host_.end() ? nullptr : it->second;
}

void HostTable::ClearSpawns(HostInfo* host) {
  for (const auto& [id, deadline] : host->spawns) {
    spawn_host_.erase(id);
    spawn_deadlines_.erase({deadline, id});
  }
  host->spawns.clear();
}

std::vector<std::pair<std::string, HostInfo*>> HostTable::TakeExpiredSpawns(TimePoint now) {
  std::vector<std::pair<std::string, HostInfo*>> out;
  while (!spawn_deadlines_.empty() && now >= spawn_deadlines_.begin()->first) {
    const std::string id = spawn_deadlines_.begin()->second;
    HostInfo* host = TakeSpawn(id);
    if (host == nullptr) {
      spawn_deadlines_.erase(spawn_deadlines_.begin());  // not reached: indexes agree
      continue;
    }
    out.emplace_back(id, host);
  }
  return out;
}

}  // namespace elastra::coordinator
