#include "coordinator/membership.h"

#include <algorithm>

#include "protocol/codec.h"
#include "common/mesh_peers.h"

namespace elastra::coordinator {

void Membership::Index(WorkerInfo& w) {
  by_order_[w.join_order] = &w;
  if (w.state == WorkerState::kStandby) standby_[w.join_order] = &w;
  if (w.state == WorkerState::kLeaving) leaving_[w.join_order] = &w;
  if (w.state == WorkerState::kMember) members_.emplace(w.rank, &w);
  if (w.state == WorkerState::kFinished) ++finished_;
  OnHost& host = by_host_[w.host];
  host.by_order[w.join_order] = &w;
  if (HoldsSlot(w.state)) ++host.slots_held;
}

void Membership::Unindex(WorkerInfo& w) {
  by_order_.erase(w.join_order);
  standby_.erase(w.join_order);
  leaving_.erase(w.join_order);
  members_.erase({w.rank, &w});
  if (w.state == WorkerState::kFinished) --finished_;
  auto host = by_host_.find(w.host);
  if (host != by_host_.end()) {
    if (host->second.by_order.erase(w.join_order) != 0 && HoldsSlot(w.state)) {
      --host->second.slots_held;
    }
    if (host->second.by_order.empty()) by_host_.erase(host);
  }
}

void Membership::Restate(WorkerInfo& w, WorkerState state, int rank) {
  if (HoldsSlot(w.state) != HoldsSlot(state)) {
    // Only a worker leaving its slot (lost, finished) or taking one again looks its host up.
    auto host = by_host_.find(w.host);
    if (host != by_host_.end()) {
      if (HoldsSlot(state)) {
        ++host->second.slots_held;
      } else {
        --host->second.slots_held;
      }
    }
  }
  if (w.state == WorkerState::kStandby) standby_.erase(w.join_order);
  if (w.state == WorkerState::kLeaving) leaving_.erase(w.join_order);
  if (w.state == WorkerState::kMember) members_.erase({w.rank, &w});
  if (w.state == WorkerState::kFinished) --finished_;
  if (state == WorkerState::kFinished) ++finished_;
  w.state = state;
  w.rank = rank;
  if (state == WorkerState::kStandby) standby_[w.join_order] = &w;
  if (state == WorkerState::kLeaving) leaving_[w.join_order] = &w;
  if (state == WorkerState::kMember) members_.emplace(rank, &w);
}

Status Membership::Join(const proto::JoinRequest& request, const std::string& identity) {
  if (request.worker_id.empty()) return InvalidArgumentError("join without a worker id");
  if (request.worker_id.size() > proto::kMaxNameBytes) {
    return InvalidArgumentError("worker id longer than " + std::to_string(proto::kMaxNameBytes) +
                                " bytes");
  }
  WorkerInfo* old = workers_.Find(request.worker_id);
  if (old != nullptr && old->state == WorkerState::kMember) {
    return InvalidArgumentError("worker id '" + request.worker_id +
                                "' is already a live member of this job");
  }
  WorkerInfo info;
  info.id = request.worker_id;
  info.host = request.host;
  info.device = request.device;
  info.memory_bytes = std::max<int64_t>(0, request.device_memory_bytes);
  info.pid = request.pid;
  // A malformed endpoint is no endpoint: the worker's records go through the store then.
  if (request.rendezvous.size() == kRendezvousEndpointBytes) info.rendezvous = request.rendezvous;
  info.identity = identity;
  info.state = WorkerState::kStandby;
  // A standby worker joining again (a retried join) keeps its place in the queue.
  if (old != nullptr && old->state == WorkerState::kStandby) {
    info.join_order = old->join_order;
  } else {
    info.join_order = next_join_order_++;
  }
  NoteSeen(info.id);
  if (old != nullptr) Unindex(*old);
  uint32_t slot = 0;
  WorkerInfo& w = *workers_.Emplace(std::move(info), &slot).first;  // in place of the old entry
  w.slot = slot;
  Index(w);
  return OkStatus();
}

WorkerInfo* Membership::Find(const std::string& id) { return workers_.Find(id); }

const WorkerInfo* Membership::Find(const std::string& id) const { return workers_.Find(id); }

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

std::vector<const WorkerInfo*> Membership::Leaving() const {
  std::vector<const WorkerInfo*> out;
  out.reserve(leaving_.size());
  for (const auto& [order, w] : leaving_) out.push_back(w);
  return out;
}

std::vector<const WorkerInfo*> Membership::On(const std::string& host) const {
  std::vector<const WorkerInfo*> out;
  auto it = by_host_.find(host);
  if (it == by_host_.end()) return out;
  for (const auto& [order, w] : it->second.by_order) out.push_back(w);
  return out;
}

size_t Membership::SlotsHeldOn(const std::string& host) const {
  auto it = by_host_.find(host);
  return it == by_host_.end() ? 0 : it->second.slots_held;
}

size_t Membership::CountOn(const std::string& host,
                           std::initializer_list<WorkerState> states) const {
  auto it = by_host_.find(host);
  if (it == by_host_.end()) return 0;
  size_t n = 0;
  for (const auto& [order, w] : it->second.by_order) {
    n += std::find(states.begin(), states.end(), w->state) != states.end() ? 1 : 0;
  }
  return n;
}

void Membership::AssignRanks(const std::vector<std::string>& ordered) {
  for (size_t r = 0; r < ordered.size(); ++r) {
    WorkerInfo* found = workers_.Find(ordered[r]);
    if (found == nullptr) continue;
    WorkerInfo& w = *found;
    const int rank = static_cast<int>(r);
    if (w.state == WorkerState::kMember && w.rank == rank) continue;  // most of a change's members
    Restate(w, WorkerState::kMember, rank);
  }
}

void Membership::SetState(const std::string& id, WorkerState state) {
  WorkerInfo* w = workers_.Find(id);
  if (w == nullptr) return;
  Restate(*w, state, state == WorkerState::kMember ? w->rank : -1);
}

void Membership::SetFinished(const std::string& id) {
  WorkerInfo* w = workers_.Find(id);
  if (w == nullptr) return;
  Restate(*w, WorkerState::kFinished, w->rank);
}

void Membership::SetHost(const std::string& id, const std::string& host) {
  WorkerInfo* w = workers_.Find(id);
  if (w == nullptr || w->host == host) return;
  Unindex(*w);
  w->host = host;
  Index(*w);
}

void Membership::Remove(const std::string& id) {
  WorkerInfo* w = workers_.Find(id);
  if (w == nullptr) return;
  Unindex(*w);
  workers_.Erase(id);
}

namespace {

// k when `id` is "w<k>" written as std::to_string writes k (no sign, no leading zero), else -1.
int64_t WorkerNumber(const std::string& id, uint64_t limit) {
  if (id.size() < 2 || id.size() > 20 || id[0] != 'w' || (id[1] == '0' && id.size() > 2)) {
    return -1;
  }
  uint64_t k = 0;
  for (size_t i = 1; i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9') return -1;
    k = k * 10 + static_cast<uint64_t>(id[i] - '0');
    if (k >= limit) return -1;
  }
  return static_cast<int64_t>(k);
}

}  // namespace

void Membership::NoteSeen(const std::string& id) {
  ever_seen_.insert(id);
  const int64_t k = WorkerNumber(id, kTrackedNumbers);
  if (k >= 0) NoteNumber(static_cast<uint64_t>(k));
}

void Membership::NoteNumber(uint64_t k) {
  const size_t word = static_cast<size_t>(k) / 64;
  if (word >= numbers_seen_.size()) numbers_seen_.resize(word + 1, 0);
  numbers_seen_[word] |= uint64_t{1} << (k % 64);
}

void Membership::MarkSeen(const std::string& id) { NoteSeen(id); }

std::string Membership::NextWorkerId() {
  for (;;) {
    // The numbers already seen are skipped a word of 64 at a time where every one is taken.
    while (next_worker_number_ < kTrackedNumbers) {
      const size_t word = next_worker_number_ / 64;
      if (word >= numbers_seen_.size()) break;
      if (numbers_seen_[word] == ~uint64_t{0}) {
        next_worker_number_ = (word + 1) * 64;
        continue;
      }
      if ((numbers_seen_[word] >> (next_worker_number_ % 64) & 1) == 0) break;
      ++next_worker_number_;
    }
    const uint64_t k = next_worker_number_++;
    std::string id = "w" + std::to_string(k);
    if (ever_seen_.insert(id).second) {
      if (k < kTrackedNumbers) NoteNumber(k);
      return id;
    }
  }
}

}  // namespace elastra::coordinator
