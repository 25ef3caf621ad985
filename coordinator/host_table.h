// HostTable: the hosts that agents registered (docs/hosts.md): each host's name, address, slots
// and GPUs, its agent (sender id and ROUTER identity), its state (up, draining, drained, lost), the
// agent's heartbeats, the workers asked of the agent that have not joined yet, and the starts that
// failed there. It answers where new workers may start. Shared state, like Membership: the
// managers read and change it; it sends nothing. Time is passed in (the core's injected Clock).
// A host is found by name, by agent and by the worker asked of it in O(1); what concerns one host
// costs O(its workers) (docs/scale.md). Thread-compatible (owned by the coordinator's loop).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/membership.h"
#include "elastra/status.h"

namespace elastra::coordinator {

struct HostInfo {
  std::string name;
  uint32_t position = 0;  // its place in HostTable::hosts(), fixed: hosts are never removed
  std::string address;  // where its workers bind their collectives
  int32_t slots = 0;    // workers its agent may run at once
  int32_t gpus = 0;
  std::string agent;     // the agent's sender id
  std::string identity;  // ROUTER identity of the agent's latest message
  proto::HostState state = proto::HostState::kUp;
  // The agent heartbeats. From its first heartbeat its silence is watched (a silent agent means a
  // lost host), and the coordinator starts workers there on its own (the first generation, a
  // regrow). An agent that never heartbeats (an `elastra run` older than agents' heartbeats,
  // which starts its first workers itself) is asked for workers only when a resize or a drain
  // needs them.
  bool heartbeats = false;
  TimePoint last_heartbeat{};  // of its agent: its last heartbeat or registration
  // Worker ids asked of the agent -> deadline to join. Changed by HostTable only (AddSpawn, ...).
  std::map<std::string, TimePoint> spawns;
  int failed_starts = 0;        // workers in a row that exited (or never came) before joining
  TimePoint no_starts_until{};  // after a failed start, no new worker starts here before this
};

// How new workers are spread over the hosts with free slots.
enum class Placement {
  kInOrder,       // registration order, each host filled before the next (the first generation)
  kFullestFirst,  // the host with the most workers of the job first (grows keep groups together)
};

class HostTable {
 public:
  // `membership` (the workers on each host) is not owned and must outlive the table.
  explicit HostTable(const Membership* membership) : membership_(membership) {}
  HostTable(const HostTable&) = delete;
  HostTable& operator=(const HostTable&) = delete;

  // Registers host `request.host` for agent `agent` at ROUTER identity `identity`, or updates it
  // (address, slots, GPUs, identity) when that agent registers it again. A lost host whose agent
  // registers again is up again; a drained host stays drained. kInvalidArgument for an empty or
  // overlong host name or negative slots or GPUs; kFailedPrecondition when another agent holds the name
  // and was heard from within `timeout` (two agents must not share one host name).
  StatusOr<HostInfo*> Register(const proto::AgentRegister& request, const std::string& agent,
                               const std::string& identity, TimePoint now, Duration timeout);

  // nullptr when unknown.
  HostInfo* Find(const std::string& name);
  const HostInfo* Find(const std::string& name) const;
  // The host agent `agent` (sender id) registered last; nullptr when none.
  HostInfo* FindByAgent(const std::string& agent);
  const HostInfo* FindByAgent(const std::string& agent) const;
  // By registration order.
  const std::deque<HostInfo>& hosts() const { return hosts_; }
  std::deque<HostInfo>& hosts() { return hosts_; }
  bool empty() const { return hosts_.empty(); }

  // The workers of the job on `host` now: members, standby and leaving workers that joined with
  // that host name (by join order).
  std::vector<std::string> WorkersOn(const std::string& host) const;
  // slots - workers on it - outstanding spawns there; never below 0.
  int FreeSlots(const HostInfo& host) const;
  // Whether a new worker may start on `host` at `now`: it is up, not backing off after a failed
  // start, and (with `watched_only`) its agent heartbeats.
  bool CanStart(const HostInfo& host, TimePoint now, bool watched_only) const;
  // Whether a standby worker may take a rank: its host is not draining, drained or lost (a worker
  // on no registered host may).
  bool Usable(const WorkerInfo& worker) const;
  // Standby workers that may take a rank (Usable), not on host `except`, by join order.
  std::vector<std::string> UsableStandby(const std::string& except = "") const;
  // The sum of FreeSlots over the hosts where a worker may start, less `except`.
  int FreeSlotsTotal(TimePoint now, bool watched_only, const std::string& except = "") const;
  // Leaving workers on the hosts where a worker may start, less `except`: the slots a shrink
  // handed back but whose workers have not exited yet.
  int LeavingTotal(TimePoint now, bool watched_only, const std::string& except = "") const;

  // Where `n` new workers go: hosts with counts, in the order of `placement`, over the hosts where
  // a worker may start (less `except`), at most their free slots each. Fewer than `n` in all when
  // the slots run out. Each name in `first` (a host may be named more than once) takes one worker
  // before `placement` places the rest, when it is such a host with a slot still free; those hosts
  // come first in the answer, in the order named.
  std::vector<std::pair<HostInfo*, int>> Place(int n, Placement placement, TimePoint now,
                                               bool watched_only, const std::string& except = "",
                                               const std::vector<std::string>& first = {});

  // Worker `id` was asked of `host`'s agent; it has until `deadline` to join.
  void AddSpawn(HostInfo* host, const std::string& id, TimePoint deadline);
  // Worker `id` joined or exited: it is no longer on its way. The host it was asked of, or nullptr.
  HostInfo* TakeSpawn(const std::string& id);
  // The host worker `id` was asked of and has not joined yet, or nullptr.
  const HostInfo* SpawnHost(const std::string& id) const;
  // Spawns on their way, on every host. O(1).
  int Outstanding() const { return static_cast<int>(spawn_host_.size()); }
  // Forgets every spawn on its way to `host` (lost, drained).
  void ClearSpawns(HostInfo* host);
  // Spawns past their deadline: forgotten (their slots are free again), with their hosts.
  std::vector<std::pair<std::string, HostInfo*>> TakeExpiredSpawns(TimePoint now);

 private:
  const Membership* membership_;
  std::deque<HostInfo> hosts_;  // a deque: registering a host keeps pointers to the others
  std::unordered_map<std::string, size_t> by_name_;            // index in hosts_
  std::unordered_map<std::string, std::set<size_t>> by_agent_;  // the hosts each agent holds
  std::unordered_map<std::string, HostInfo*> spawn_host_;       // spawn id -> its host
  std::set<std::pair<TimePoint, std::string>> spawn_deadlines_;  // (deadline, spawn id)
};

}  // namespace elastra::coordinator
