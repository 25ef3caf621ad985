#include "coordinator/membership.h"

#include <algorithm>

#include "common/codec.h"

namespace elastra::coordinator {

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
  workers_[info.id] = info;
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

std::vector<std::string> Membership::Members() const {
  std::vector<const WorkerInfo*> m;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kMember) m.push_back(&w);
  }
  std::sort(m.begin(), m.end(), [](auto* a, auto* b) { return a->rank < b->rank; });
  std::vector<std::string> out;
  for (auto* w : m) out.push_back(w->id);
  return out;
}

std::vector<std::string> Membership::Standby() const {
  std::vector<const WorkerInfo*> s;
  for (const auto& [id, w] : workers_) {
    if (w.state == WorkerState::kStandby) s.push_back(&w);
  }
  std::sort(s.begin(), s.end(), [](auto* a, auto* b) { return a->join_order < b->join_order; });
  std::vector<std::string> out;
  for (auto* w : s) out.push_back(w->id);
  return out;
}

std::vector<const WorkerInfo*> Membership::All() const {
  std::vector<const WorkerInfo*> all;
  for (const auto& [id, w] : workers_) all.push_back(&w);
  std::sort(all.begin(), all.end(),
            [](auto* a, auto* b) { return a->join_order < b->join_order; });
  return all;
}

void Membership::AssignRanks(const std::vector<std::string>& ordered) {
  for (size_t r = 0; r < ordered.size(); ++r) {
    auto it = workers_.find(ordered[r]);
    if (it == workers_.end()) continue;
    it->second.rank = static_cast<int>(r);
    it->second.state = WorkerState::kMember;
  }
}

void Membership::SetState(const std::string& id, WorkerState state) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.state = state;
  if (state != WorkerState::kMember) it->second.rank = -1;
}

void Membership::Remove(const std::string& id) { workers_.erase(id); }

std::string Membership::NextWorkerId() {
  for (;;) {
    std::string id = "w" + std::to_string(next_worker_number_++);
    if (!ever_seen_.count(id)) {
      ever_seen_.insert(id);
      return id;
    }
  }
}

}  // namespace elastra::coordinator
