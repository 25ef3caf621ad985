// CoordinatorContext: what every manager of the coordinator shares, built once by the core
// (coordinator_core.h) and handed to each manager with only the peers that manager calls. Who calls
// whom is drawn in docs/architecture.md ("coordinator/").
//   options     the job's options (normalized; the managers never change them)
//   clock       the injected clock: every timer and health check reads it
//   membership  the workers and their states
//   hosts       the hosts and their slots
//   health      the heartbeat deadlines of the workers
//   outbox      the frames to send, by worker
//   journal     the job's record (a no-op without a state directory)
// Plain pointers: the core owns all of them and outlives every manager.
#pragma once

namespace elastra {
class Clock;
}  // namespace elastra

namespace elastra::coordinator {

struct CoordinatorOptions;
class Membership;
class HostTable;
class HealthMonitor;
class Outbox;
class JournalRecorder;

struct CoordinatorContext {
  const CoordinatorOptions* options = nullptr;
  Clock* clock = nullptr;
  Membership* membership = nullptr;
  HostTable* hosts = nullptr;
  HealthMonitor* health = nullptr;
  Outbox* outbox = nullptr;
  JournalRecorder* journal = nullptr;
};

}  // namespace elastra::coordinator
