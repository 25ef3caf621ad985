#include "coordinator/membership.h"

#include <algorithm>

#include "common/codec.h"
#include "common/mesh_peers.h"

namespace elastra::coordinator {

void Membership::Index(WorkerInfo& w) {
  by_order_[w.join_order] = &w;
  if (w.state == WorkerState::kStandby) standby_[w.join_order] = &w;
  if (w.state == WorkerState::kMember) members_.emplace(w.rank, &w);
  if (w.state == WorkerState::kFinished) ++finished_;
  by_host_[w.host][w.join_order] = &w;
}

void Membership::Unindex(WorkerInfo& w) {
  by_order_.erase(w.join_order);
  standby_.erase(w.join_order);
  members_.erase({w.rank, &w});
  if (w.state == WorkerState::kFinished) --finished_;
  auto host = by_host_.find(w.host);
  if (host != by_host_.end()) {
    host->second.erase(w.join_order);
    if (host->second.empty()) by_host_.erase(host);
  }
}

void Membership::Restate(WorkerInfo& w, WorkerState state, int rank) {
  if (w.state == WorkerState::kStandby) standby_.erase(w.join_order);
  if (w.state == WorkerState::kMember) members_.erase({w.rank, &w});
  if (w.state == WorkerState::kFinished) --finished_;
  if (state == WorkerState::kFinished) ++finished_;
  w.state = state;
  w.rank = rank;
  if (state == WorkerState::kStandby) standby_[w.join_order] = &w;
  if (state == WorkerState::kMember) members_.emplace(rank, &w);
}

Status Membership::Join(const proto::JoinRequest& request, const std::string& identity,
                        TimePoint now) {
  if (request.worker_id.empty()) return InvalidArgumentError("join without a worker id");
  if (request.worker_id.size() > proto::kMaxNameBytes) {
    return InvalidArgumentError("worker id longer than " + std::to_string(proto::kMaxNameBytes) +
                                " bytes");
  }
  auto it = workers_.find(request.worker_id);
  if (it != workers_.end() && it->second.state == WorkerState::kMember) {
    return InvalidArgumentError("worker id '" + request.worker_id +
                                "' is already a live member of this job");
  }
  WorkerInfo info;
  info.id = request.worker_id;
  info.host = request.host;
  info.device = request.device;
  info.pid = request.pid;
  // A malformed endpoint is no endpoint: the worker's records go through the store then.
  if (request.rendezvous.size() == kRendezvousEndpointBytes) info.rendezvous = request.rendezvous;
  info.identity = identity;
  info.state = WorkerState::kStandby;
  info.last_heartbeat = now;
  // A standby worker joining again (a retried join) keeps its place in the queue.
  if (it != workers_.end() && it->second.state == WorkerState::kStandby) {
    info.join_order = it->second.join_order;
  } else {
    info.join_order = next_join_order_++;
  }
  ever_seen_.insert(info.id);
  if (it != workers_.end()) {
    Unindex(it->second);
    it->second = std::move(info);
  } else {
    it = workers_.emplace(info.id, std::move(info)).first;
  }
  Index(it->second);
  return OkStatus();
}

WorkerInfo* Membership::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerInfo* Membership::Find(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

std::vector<const WorkerInfo*> Membership::FindAll(const std::vector<std::string>& ids) const {
  std::vector<const WorkerInfo*> out;
  out.reserve(ids.size());
  for (const auto& id : ids) out.push_back(Find(id));
  return out;
}

std::vector<std::string> Membership::Members() const {
  std::vector<std::string> out;
  out.reserve(members_.size());
  for (const auto& [rank, w] : members_) out.push_back(w->id);
  return out;
}

std::vector<const WorkerInfo*> Membership::MemberInfos() const {
  std::vector<const WorkerInfo*> out;
  out.reserve(members_.size());
  for (const auto& [rank, w] : members_) out.push_back(w);
  return out;
}

std::vector<std::string> Membership::Standby() const {
  std::vector<std::string> out;
  out.reserve(standby_.size());
  for (const auto& [order, w] : standby_) out.push_back(w->id);
  return out;
}

std::vector<const WorkerInfo*> Membership::All() const {
  std::vector<const WorkerInfo*> all;
  all.reserve(by_order_.size());
  for (const auto& [order, w] : by_order_) all.push_back(w);
  return all;
}

std::vector<const WorkerInfo*> Membership::On(const std::string& host) const {
  std::vector<const WorkerInfo*> out;
  auto it = by_host_.find(host);
  if (it == by_host_.end()) return out;
  for (const auto& [order, w] : it->second) out.push_back(w);
  return out;
}

size_t Membership::CountOn(const std::string& host,
                           std::initializer_list<WorkerState> states) const {
  auto it = by_host_.find(host);
  if (it == by_host_.end()) return 0;
  size_t n = 0;
  for (const auto& [order, w] : it->second) {
    n += std::find(states.begin(), states.end(), w->state) != states.end() ? 1 : 0;
  }
  return n;
}

void Membership::AssignRanks(const std::vector<std::string>& ordered) {
  for (size_t r = 0; r < ordered.size(); ++r) {
    auto it = workers_.find(ordered[r]);
    if (it == workers_.end()) continue;
    WorkerInfo& w = it->second;
    const int rank = static_cast<int>(r);
    if (w.state == WorkerState::kMember && w.rank == rank) continue;  // most of a change's members
    Restate(w, WorkerState::kMember, rank);
  }
}

void Membership::SetState(const std::string& id, WorkerState state) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Restate(it->second, state, state == WorkerState::kMember ? it->second.rank : -1);
}

void Membership::SetFinished(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Restate(it->second, WorkerState::kFinished, it->second.rank);
}

void Membership::SetHost(const std::string& id, const std::string& host) {
  auto it = workers_.find(id);
  if (it == workers_.end() || it->second.host == host) return;
  Unindex(it->second);
  it->second.host = host;
  Index(it->second);
}

void Membership::Remove(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Unindex(it->second);
  workers_.erase(it);
}

std::string Membership::NextWorkerId() {
  for (;;) {
    std::string id = "w" + std::to_string(next_worker_number_++);
    if (ever_seen_.insert(id).second) return id;
  }
}

}  // namespace elastra::coordinator
