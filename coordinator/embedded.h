// An embedded coordinator: the one `elastra run`, `elastra coordinator` and the mpirun bootstrap
// start inside their own process. Makes the state directory (mode 0700) and the job's CURVE keys
// (server, admin, worker), starts a CoordinatorServer, and writes <state_dir>/coordinator.json
// (mode 0600) so that `elastra resize|status --state-dir` and workers started with
// ELASTRA_STATE_DIR find it. Heartbeat and spawn timing come from ELASTRA_HEARTBEAT_MS,
// ELASTRA_HEARTBEAT_TIMEOUT_MS and ELASTRA_SPAWN_TIMEOUT_MS when set. The coordinator journals the
// job to <state_dir>/journal.bin and keeps its key pair in <state_dir>/server.key (mode 0600), so
// that a restart (EmbeddedOptions::restart) takes the job back on the same address and keys.
#pragma once

#include <memory>
#include <string>

#include "common/keys.h"
#include "coordinator/server.h"
#include "elastra/status.h"

namespace elastra::coordinator {

struct EmbeddedOptions {
  // Where coordinator.json and the keys go; created when missing.
  std::string state_dir = ".elastra";
  // The job's name.
  std::string job = "elastra";
  // ZeroMQ endpoint to bind; port 0 picks a free port.
  std::string bind = "tcp://127.0.0.1:0";
  // The first generation forms when this many workers joined.
  int initial_workers = 1;
  // Upper bound on the workers of one generation (raised to initial_workers when lower).
  int max_workers = 64;
  // A checkpoint root to resume from (CoordinatorOptions::resume_from); empty: a fresh start.
  std::string resume_from;
  // Take back the job in state_dir after its coordinator died (docs/journal.md): reuse the
  // address, job name and keys of coordinator.json and server.key and replay journal.bin; job,
  // bind, initial_workers and max_workers are then read from the state directory. Without it a
  // new job starts and an old journal in state_dir is discarded.
  bool restart = false;
};

struct EmbeddedCoordinator {
  std::unique_ptr<CoordinatorServer> server;
  ConnectionInfo info;  // what coordinator.json holds (address with the real port, keys)
};

// kInvalidArgument when the state directory cannot be made or an option is out of range,
// kUnavailable when the address cannot be bound, kInternal when libzmq lacks CURVE or the file
// cannot be written.
StatusOr<EmbeddedCoordinator> StartEmbeddedCoordinator(const EmbeddedOptions& options);

}  // namespace elastra::coordinator
