// WorkerService: what workers tell the coordinator (docs/protocol.md): join, leave, heartbeat
// (answered with a HeartbeatAck, the lease a worker fences itself by; agents' heartbeats too), the
// PausedReport, GenerationReady and FailureReport of a change of generation, and the agents'
// reports of their workers' exits. It keeps Membership and the heartbeat deadlines (HealthMonitor)
// up to date and journals who joined and who left; what concerns a generation goes to the
// generation manager, what concerns a host to the host manager, and a worker that a waiting change
// needs wakes the resize manager. Time comes from the injected Clock. Thread-compatible: the core's
// loop owns it, like every manager.
#pragma once

#include <functional>
#include <string>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/context.h"
#include "coordinator/generation_manager.h"
#include "coordinator/health.h"
#include "coordinator/host_manager.h"
#include "coordinator/host_table.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/layout_policy.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"
#include "coordinator/resize_manager.h"

namespace elastra::coordinator {

class WorkerService {
 public:
  // Every pointer is not owned and must outlive the service.
  // Calls the layout policy (the registered state), the generation manager (joins, leaves,
  // failures, the change's reports), the host manager (a worker's exit on its host) and the
  // resize manager (a join or exit that ends a resize).
  WorkerService(const CoordinatorContext& context, LayoutPolicy* layouts,
                GenerationManager* generations, HostManager* host_manager, ResizeManager* resizes)
      : options_(context.options),
        clock_(context.clock),
        membership_(context.membership),
        hosts_(context.hosts),
        health_(context.health),
        outbox_(context.outbox),
        journal_(context.journal),
        layouts_(layouts),
        generations_(generations),
        host_manager_(host_manager),
        resizes_(resizes) {}
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // Requests, answered through the outbox (an ErrorReply when refused). A join from a drained host
  // is refused (kFailedPrecondition).
  void OnJoin(const std::string& identity, const proto::Envelope& e);
  void OnLeave(const std::string& identity, const proto::Envelope& e);

  // A heartbeat arriving from ROUTER identity `identity`. From a member, standby, leaving or
  // finished worker, or from an agent: answered with a HeartbeatAck. From a worker declared lost:
  // answered with Shutdown (at most once per heartbeat timeout), never with an ack: the job went on
  // without it. From an unknown sender: dropped.
  // `sender`: the worker e.sender names (Membership::Find, looked up once by the caller; nullptr
  // when none), here and in the reports below.
  void OnHeartbeat(const std::string& identity, const proto::Envelope& e, WorkerInfo* sender);
  // Called with each decoded heartbeat of a member or standby worker (the training numbers it
  // carries go to TrainingMetrics).
  void SetHeartbeatListener(
      std::function<void(const WorkerInfo& worker, const proto::Heartbeat&)> listener) {
    heartbeat_listener_ = std::move(listener);
  }
  // Fire-and-forget reports. One from an unknown sender, or about a change not in flight, is
  // counted as stale and dropped.
  void OnPaused(const proto::Envelope& e, WorkerInfo* sender);
  void OnGenerationReady(const proto::Envelope& e, const WorkerInfo* sender);
  void OnFailureReport(const proto::Envelope& e);
  // An agent's report that a worker's process exited. With an admin key, about any worker; with a
  // worker key, only from a registered agent about a worker on its own host (else an ErrorReply
  // kUnauthenticated).
  void OnProcessExited(const std::string& identity, proto::Role role, const proto::Envelope& e);

  // Heartbeat deadlines: members that missed theirs are lost (one recovery for all of them; a
  // host whose agent is silent too is lost as one event), standby workers are dropped, leaving
  // ones forgotten.
  void ExpireHeartbeats();

 private:
  // The ids of the workers whose heartbeat deadline passed (HealthMonitor::TakeExpired), sorted.
  std::vector<std::string> ExpiredIds();

  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  HostTable* hosts_;
  HealthMonitor* health_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  LayoutPolicy* layouts_;
  GenerationManager* generations_;
  HostManager* host_manager_;
  ResizeManager* resizes_;
  std::function<void(const WorkerInfo&, const proto::Heartbeat&)> heartbeat_listener_;
};

}  // namespace elastra::coordinator
