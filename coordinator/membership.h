// Membership: every worker the coordinator knows, its host, state and rank, and the mapping from
// worker id to the ROUTER identity of its latest message (the hosts and their agents are in
// HostTable). Indexed so that what a single message needs costs O(1) or O(log N) (docs/scale.md):
// a worker by id (a flat hash table, common/id_map.h), the standby and the leaving workers by join
// order, the members by rank, the workers of a host and how many of them hold a slot there; a list
// of N workers costs O(N), never a sort. A worker's state, rank and host change only
// through the methods below (they keep the indexes); the other fields of the WorkerInfo that Find
// returns are the caller's to change. Thread-compatible (owned by the coordinator's loop).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/id_map.h"
#include "protocol/messages.h"
#include "elastra/status.h"

namespace elastra::coordinator {

using proto::WorkerState;  // standby, member, leaving, lost, finished (protocol/messages.h)

// The fields every message from the worker reads or writes come first: the first cache line of
// the record (it starts on a line) holds what a lookup compares and a heartbeat reads (id, state,
// rank, slot, step, join order), the second the identity. At 16,384 workers the records outgrow
// the caches, and each line a message touches is a miss (docs/scale.md).
struct alignas(64) WorkerInfo {
  std::string id;
  WorkerState state = WorkerState::kStandby;  // changed by Membership only (SetState, ...)
  int rank = -1;                              // changed by Membership only (AssignRanks, ...)
  // Its place in Membership's table (set by Membership): a dense number, fixed while the worker
  // is known and reused after it is removed. Other managers keep their per-worker entries in flat
  // arrays by slot (HealthMonitor, TrainingMetrics) instead of tables by id; AtSlot goes back.
  uint32_t slot = 0;
  int64_t step = -1;
  uint64_t join_order = 0;    // unique to each join of a new worker (a retried join keeps it)
  std::string identity;       // ROUTER identity of the latest message
  TimePoint last_shutdown{};  // declared lost: when its heartbeat was last answered with Shutdown
  std::string host;           // changed by Membership::SetHost only
  int32_t device = -1;
  int64_t pid = 0;
  std::string rendezvous;  // where it serves its rendezvous records (6 bytes), or empty
  // The memory it may use for the job's state (JoinRequest::device_memory_bytes); 0: unlimited.
  int64_t memory_bytes = 0;
};

class Membership {
 public:
  // Registers a worker as standby. kInvalidArgument when the id is empty, too long, or belongs to
  // a live member (standby or leaving/lost/finished entries are replaced).
  Status Join(const proto::JoinRequest& request, const std::string& identity);

  // nullptr when unknown.
  WorkerInfo* Find(const std::string& id);
  const WorkerInfo* Find(const std::string& id) const;
  // The worker in `slot` (WorkerInfo::slot), nullptr when none is. O(1).
  WorkerInfo* AtSlot(uint32_t slot) { return workers_.AtSlot(slot); }
  const WorkerInfo* AtSlot(uint32_t slot) const { return workers_.AtSlot(slot); }
  // For a batch of messages (CoordinatorCore::PrefetchAhead): start loading the probe line of
  // `id`, then (once it has arrived) its record, whose slot PrefetchRecord and GuessSlot return;
  // a guess, unchecked, kNoSlot when none (IdMap::PrefetchValue). Change nothing.
  void PrefetchProbe(const std::string& id) const { workers_.PrefetchProbe(id); }
  uint32_t PrefetchRecord(const std::string& id) const { return workers_.PrefetchValue(id); }
  uint32_t GuessSlot(const std::string& id) const { return workers_.GuessSlot(id); }
  static constexpr uint32_t kNoSlot = IdMap<WorkerInfo>::kNoSlot;

  // Find for each of `ids`, in order (nullptr where unknown): one lookup each for callers that
  // need several fields of a list of workers.
  std::vector<const WorkerInfo*> FindAll(const std::vector<std::string>& ids) const;

  // Members ordered by rank; standby workers ordered by join order. O(result).
  std::vector<std::string> Members() const;
  // The members ordered by rank, as Find returns them: no lookup by id. O(result).
  std::vector<const WorkerInfo*> MemberInfos() const;
  std::vector<std::string> Standby() const;
  size_t MemberCount() const { return members_.size(); }
  size_t StandbyCount() const { return standby_.size(); }
  // Workers in state kFinished. O(1).
  size_t FinishedCount() const { return finished_; }
  // Every known worker, ordered by join order (for status). O(N).
  std::vector<const WorkerInfo*> All() const;
  // The workers (any state) that joined with host name `host` or were moved there, by join order.
  // O(workers of that host).
  std::vector<const WorkerInfo*> On(const std::string& host) const;
  // How many of them are in one of `states`, without a list. O(workers of that host).
  size_t CountOn(const std::string& host, std::initializer_list<WorkerState> states) const;
  // How many of them hold one of the host's slots (member, standby or leaving: HoldsSlot). O(1)
  // after the host's lookup: a resize sums it over every host.
  size_t SlotsHeldOn(const std::string& host) const;
  static bool HoldsSlot(WorkerState s) {
    return s == WorkerState::kMember || s == WorkerState::kStandby || s == WorkerState::kLeaving;
  }
  // The workers in state kLeaving, by join order. O(result).
  std::vector<const WorkerInfo*> Leaving() const;

  // Makes `ordered` the members with ranks 0..n-1. Members not listed keep their state; callers
  // move them with SetState.
  void AssignRanks(const std::vector<std::string>& ordered);
  // A state other than kMember takes the rank away.
  void SetState(const std::string& id, WorkerState state);
  // A member finished training: kFinished, keeping its rank for status.
  void SetFinished(const std::string& id);
  // The worker runs on `host` (its agent's host, whatever name it joined with).
  void SetHost(const std::string& id, const std::string& host);
  void Remove(const std::string& id);

  // A fresh worker id "w<k>", k counting up over the job's life and skipping every id this job has
  // seen (removed ones included), so an id never names two processes.
  std::string NextWorkerId();
  // Marks `id` as used, so NextWorkerId never hands it out (a restarted coordinator).
  void MarkSeen(const std::string& id);

 private:
  // The indexes of `w` (added after, removed before any change of its state, rank or host).
  void Index(WorkerInfo& w);
  void Unindex(WorkerInfo& w);
  // A change of state and rank only: the indexes by state and rank (the join order and host
  // indexes do not depend on them).
  void Restate(WorkerInfo& w, WorkerState state, int rank);

  // The indexes hold pointers into workers_ (its values never move: they stay valid until
  // Remove), so that a list of N workers costs no lookup by id.
  struct ByRank {
    bool operator()(const std::pair<int, WorkerInfo*>& a,
                    const std::pair<int, WorkerInfo*>& b) const {
      return a.first != b.first ? a.first < b.first : a.second->id < b.second->id;
    }
  };
  struct OnHost {
    std::map<uint64_t, WorkerInfo*> by_order;
    size_t slots_held = 0;  // of them in a state that HoldsSlot
  };
  IdMap<WorkerInfo> workers_;  // a flat index: Find is two cache misses at 16,384 workers
  std::map<uint64_t, WorkerInfo*> by_order_;              // every worker, by join order
  std::map<uint64_t, WorkerInfo*> standby_;               // standby workers, by join order
  std::map<uint64_t, WorkerInfo*> leaving_;               // leaving workers, by join order
  std::set<std::pair<int, WorkerInfo*>, ByRank> members_;  // members, by rank (then id)
  std::unordered_map<std::string, OnHost> by_host_;
  std::unordered_set<std::string> ever_seen_;
  // The numbers k of the ids "w<k>" seen, a bit each, so NextWorkerId skips the ids a launcher
  // gave (16,384 "w0".."w16383" from mpirun) without a lookup per id. Up to kTrackedNumbers;
  // ids above are skipped through ever_seen_.
  static constexpr uint64_t kTrackedNumbers = uint64_t{1} << 22;
  std::vector<uint64_t> numbers_seen_;
  void NoteSeen(const std::string& id);  // into ever_seen_, and its number when it has one
  void NoteNumber(uint64_t k);            // k < kTrackedNumbers
  size_t finished_ = 0;  // workers in state kFinished
  uint64_t next_join_order_ = 0;
  uint64_t next_worker_number_ = 0;
};

}  // namespace elastra::coordinator
