// WorkerService: what workers and agents tell the coordinator (docs/protocol.md): join, leave,
// heartbeat, the PausedReport, GenerationReady and FailureReport of a change of generation, and,
// from agents, registration and process exits. It keeps Membership and the heartbeat deadlines
// (HealthMonitor) up to date and journals who joined and who left; what concerns a generation goes
// to the generation manager, and a worker or agent that a waiting grow needs wakes the resize
// manager. Time comes from the injected Clock. Thread-compatible: the core's loop owns it, like
// every manager.
#pragma once

#include <string>

#include "common/clock.h"
#include "common/messages.h"
#include "coordinator/generation_manager.h"
#include "coordinator/health.h"
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
  WorkerService(const CoordinatorOptions* options, Clock* clock, Membership* membership,
                HealthMonitor* health, Outbox* outbox, JournalRecorder* journal,
                LayoutPolicy* layouts, GenerationManager* generations, ResizeManager* resizes)
      : options_(options),
        clock_(clock),
        membership_(membership),
        health_(health),
        outbox_(outbox),
        journal_(journal),
        layouts_(layouts),
        generations_(generations),
        resizes_(resizes) {}
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // Requests, answered through the outbox (an ErrorReply when refused).
  void OnJoin(const std::string& identity, const proto::Envelope& e);
  void OnLeave(const std::string& identity, const proto::Envelope& e);
  // Admin key only (the core checks the role).
  void OnAgentRegister(const std::string& identity, const proto::Envelope& e);

  // Fire-and-forget reports. One from an unknown sender, or about a change not in flight, is
  // counted as stale and dropped.
  void OnHeartbeat(const proto::Envelope& e);
  void OnPaused(const proto::Envelope& e);
  void OnGenerationReady(const proto::Envelope& e);
  void OnFailureReport(const proto::Envelope& e);
  // Admin key only (the core checks the role).
  void OnProcessExited(const proto::Envelope& e);

  // Heartbeat deadlines: members that missed theirs are lost (one recovery for all of them),
  // standby workers are dropped, leaving ones forgotten.
  void ExpireHeartbeats();

 private:
  const CoordinatorOptions* options_;
  Clock* clock_;
  Membership* membership_;
  HealthMonitor* health_;
  Outbox* outbox_;
  JournalRecorder* journal_;
  LayoutPolicy* layouts_;
  GenerationManager* generations_;
  ResizeManager* resizes_;
};

}  // namespace elastra::coordinator
