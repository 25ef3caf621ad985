// Membership: every worker the coordinator knows, its host, state and rank, and the mapping from
// worker id to the ROUTER identity of its latest message (the hosts and their agents are in
// HostTable). Thread-compatible (owned by the coordinator's loop).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/messages.h"
#include "elastra/status.h"

namespace elastra::coordinator {

using proto::WorkerState;  // standby, member, leaving, lost, finished (common/messages.h)

struct WorkerInfo {
  std::string id;
  std::string host;
  int32_t device = -1;
  int64_t pid = 0;
  std::string identity;  // ROUTER identity of the latest message
  WorkerState state = WorkerState::kStandby;
  int rank = -1;
  int64_t step = -1;
  uint64_t join_order = 0;
  TimePoint last_heartbeat{};
  TimePoint last_shutdown{};  // declared lost: when its heartbeat was last answered with Shutdown
};

class Membership {
 public:
  // Registers a worker as standby. kInvalidArgument when the id is empty, too long, or belongs to
  // a live member (standby or leaving/lost/finished entries are replaced).
  Status Join(const proto::JoinRequest& request, const std::string& identity, TimePoint now);

  // nullptr when unknown.
  WorkerInfo* Find(const std::string& id);
  const WorkerInfo* Find(const std::string& id) const;

  // Members ordered by rank; standby workers ordered by join order.
  std::vector<std::string> Members() const;
  std::vector<std::string> Standby() const;
  // Every known worker, ordered by join order (for status).
  std::vector<const WorkerInfo*> All() const;

  // Makes `ordered` the members with ranks 0..n-1. Members not listed keep their state; callers
  // move them with SetState.
  void AssignRanks(const std::vector<std::string>& ordered);
  void SetState(const std::string& id, WorkerState state);
  void Remove(const std::string& id);

  // A fresh worker id "w<k>", k counting up over the job's life and skipping every id this job has
  // seen (removed ones included), so an id never names two processes.
  std::string NextWorkerId();
  // Marks `id` as used, so NextWorkerId never hands it out (a restarted coordinator).
  void MarkSeen(const std::string& id) { ever_seen_.insert(id); }

 private:
  std::map<std::string, WorkerInfo> workers_;
  std::set<std::string> ever_seen_;
  uint64_t next_join_order_ = 0;
  uint64_t next_worker_number_ = 0;
};

}  // namespace elastra::coordinator
