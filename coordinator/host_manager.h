// HostManager: the coordinator's side of the agents (docs/hosts.md). It registers hosts and
// watches their agents' heartbeats, asks agents to start workers (SpawnRequest) where the host
// table has room, starts the first generation's workers, backs off from a host whose workers exit
// before joining, and declares a host lost as one event: its agent silent past the heartbeat
// timeout, or a member's deadline passing while its agent has been silent for half of it. All of a
// lost host's workers then leave the job in one recovery round. It finishes a drain (the host
// drained, its agent and standby workers told to exit 0). Its listeners hear when a host may take
// new workers (a waiting resize, a regrow and the first generation go on then). Time comes from
// the injected Clock. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/context.h"
#include "coordinator/generation_manager.h"
#include "coordinator/health.h"
#include "coordinator/host_table.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"

namespace elastra::coordinator {

class HostManager {
 public:
  // Every pointer is not owned and must outlive the manager.
  // Calls the generation manager (a host lost, the first generation's workers).
  HostManager(const CoordinatorContext& context, GenerationManager* generations)
      : options_(context.options),
        clock_(context.clock),
        membership_(context.membership),
        hosts_(context.hosts),
        outbox_(context.outbox),
        journal_(context.journal),
        generations_(generations),
        agent_deadlines_(context.clock, context.options->heartbeat_timeout) {}
  HostManager(const HostManager&) = delete;
  HostManager& operator=(const HostManager&) = delete;

  // Called when a host may take new workers: it registered or came back, its agent heartbeated
  // for the first time, a start failed and the host's backoff ended, a spawn never came.
  void AddHostListener(std::function<void()> listener);

  // An AgentRegister from `identity` (an admin or a worker key): Ack, or an ErrorReply
  // (kInvalidArgument, kFailedPrecondition: HostTable::Register). An agent registering after the
  // job ended, or on a drained host, is told to exit (Shutdown).
  void OnAgentRegister(const std::string& identity, const proto::Envelope& e);
  // A Heartbeat from `sender`: false when it is no registered agent. From an agent's first
  // heartbeat on, its silence is watched.
  bool OnAgentHeartbeat(const std::string& sender);

  // Asks agents for `n` new workers under fresh ids (journaled), placed by `placement` on the
  // hosts where a worker may start (with `watched_only`, only hosts whose agents heartbeat), less
  // host `except`, the hosts named in `first` first (HostTable::Place); each SpawnRequest goes to
  // its host's agent only. Returns how many were asked for: fewer than `n` when the slots run out.
  int Spawn(int n, Placement placement, bool watched_only, const std::string& except = "",
            const std::vector<std::string>& first = {});
  // While the first generation forms: asks the agents that heartbeat for workers in their free
  // slots, hosts in registration order, until initial_workers are joined or on their way.
  void MaybeStartFirstWorkers();

  // Worker `w` joined: when an agent was asked for it, it runs on that agent's host (whatever
  // host name it gave), and the host's failed starts are forgotten.
  void OnJoined(WorkerInfo* w);
  // Worker `id`'s process exited (its agent said so): when it never joined, a failed start on the
  // host it was asked of (that host backs off).
  void OnExited(const std::string& id);

  // Agents silent past the heartbeat timeout: their hosts are lost. Spawns not joined within
  // spawn_timeout: failed starts. A host whose backoff ended: the listeners hear of it.
  void Tick();
  // `members` missed their heartbeat deadline. Those on a host whose agent heartbeats and has been
  // silent for more than half the heartbeat timeout are lost with their host (LoseHost); the
  // others are returned (each an ordinary worker loss).
  std::vector<std::string> LoseHostsOf(const std::vector<std::string>& members);
  // Host `host` is lost: its state becomes kLost, and its members and standby workers leave the
  // job together (one recovery round when members were among them).
  void LoseHost(HostInfo* host, const std::string& why);
  // The job left the draining host `host`: it is drained (unless it was lost meanwhile), and its
  // agent and its standby workers are told to exit 0 (Shutdown "host drained").
  void FinishDrain(HostInfo* host);

 private:
  void Notify();
  // A worker asked of `host` exited or never came before joining: `host` backs off.
  void FailedStart(HostInfo* host, const std::string& id, const std::string& what);

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  HostTable* hosts_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  GenerationManager* generations_;

  // The agents' heartbeat deadlines, by host position: a tick looks at the hosts whose deadline
  // passed, not at every host (2,048 of them, 100 ticks a second, at 16,384 workers).
  HealthMonitor agent_deadlines_;
  std::vector<std::function<void()>> listeners_;
  std::optional<TimePoint> backoff_ends_;  // the earliest end of a host's backoff to announce
};

}  // namespace elastra::coordinator
