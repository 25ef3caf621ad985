// WorkerOptions: how a Worker finds its job and how it trains: the coordinator and keys, the
// backend, commit and checkpoint periods, timeouts. `elastra run`, an agent or the mpirun bootstrap
// hand them to the program through its environment (FromEnvironment); a program may also fill them
// by hand. Plain data.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "elastra/communicator.h"
#include "elastra/status.h"

namespace elastra {

// What the worker library keeps for itself (worker/worker_internals.h): the mpirun bootstrap and
// the test hooks.
struct WorkerInternals;

struct WorkerOptions {
  // Coordinator endpoint, "tcp://host:port" (ELASTRA_COORDINATOR).
  std::string coordinator;
  // Job name (ELASTRA_JOB, default "elastra").
  std::string job = "elastra";
  // Stable id for this process (ELASTRA_WORKER_ID, default "<host>-<pid>").
  std::string worker_id;
  // The coordinator's CURVE public key (ELASTRA_SERVER_KEY).
  std::string server_public_key;
  // This worker's CURVE key pair (ELASTRA_WORKER_PUBLIC_KEY / ELASTRA_WORKER_SECRET_KEY).
  std::string public_key;
  std::string secret_key;
  // Host name reported for placement (ELASTRA_HOST, which the agent sets; default gethostname()).
  std::string host;
  // Local device index, -1 for CPU (ELASTRA_DEVICE, default -1; "local" under mpirun: the local
  // rank). A state on a device (TensorCollection::SetDevice) sets it when it is -1; the two must
  // agree otherwise.
  int device = -1;
  // The training communicators' backend (ELASTRA_BACKEND=gloo|nccl|auto): kGloo, kNccl, or
  // nullopt for auto (the default): kNccl when the state lives on a CUDA device and the build has
  // NCCL, else kGloo. With kNccl world() and the groups take device buffers; the worker's own
  // traffic (step agreement, state moves) always goes over Gloo on host buffers.
  std::optional<Backend> backend;
  // Address this worker's collectives bind to (ELASTRA_BIND_HOST). FromEnvironment's default is
  // the local address of the route to the coordinator, so that peers on other hosts can reach it
  // (127.0.0.1 when the coordinator is on loopback); under mpirun, what the bootstrap chose
  // (docs/mpi.md). A WorkerOptions made by hand keeps 127.0.0.1.
  std::string bind_host = "127.0.0.1";
  // In-memory commit every this many steps (ELASTRA_COMMIT_EVERY, default 10). A failure rolls
  // back at most this many steps.
  int commit_every = 10;
  // Default timeout of every collective (ELASTRA_COLLECTIVE_TIMEOUT_MS, default 5000).
  std::chrono::milliseconds collective_timeout{5000};
  // How long to wait for the coordinator's decisions (first layout, next generation) before
  // giving up with kUnavailable (ELASTRA_DECISION_TIMEOUT_MS, default 300000).
  std::chrono::milliseconds decision_timeout{300000};
  // Heartbeat period (ELASTRA_HEARTBEAT_MS, default 200).
  std::chrono::milliseconds heartbeat_interval{200};
  // Disk checkpoints (ELASTRA_CHECKPOINT_DIR, ELASTRA_CHECKPOINT_EVERY): every this many steps
  // (0: never) each rank writes its shards under checkpoint_dir in the background, and the
  // coordinator commits the checkpoint once every rank's file is durable. A failure that takes the
  // only holder of some shard recovers from the newest committed checkpoint.
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  // The memory this worker may use for the job's state, in bytes (ELASTRA_DEVICE_MEMORY_BYTES):
  // the coordinator never gives it a rank whose share of the registered state (by the tensors'
  // sharding rules), plus the modelled activations when a model description was given, exceeds
  // it (docs/recovery.md). 0: unlimited (FromEnvironment's default on a CPU); on a GPU,
  // Worker::Start() takes the device's total memory when it is 0.
  int64_t device_memory_bytes = 0;
  // Optional model description (JSON, see docs/resharding.md) the coordinator's planner uses to
  // choose layouts when a resize names only a worker count.
  std::string model_json;
  // When a shrink takes this worker out, park instead of leaving: release the communicators, stay
  // in the job as standby (heartbeating), and come back with the members' state at a later grow.
  // StepEnd() blocks while parked and returns kReconfigured when back, or kLeave when the job
  // ends meanwhile. Default false; true under mpirun, where a rank cannot be started again.
  bool park_when_removed = false;
  // Called when this worker parks: on the training thread, inside StepEnd(), after the worker has
  // released its communicators and shards and before it waits to be brought back. The program
  // gives back memory of its own there (device scratch pools, library handles, staging buffers)
  // and makes it again lazily once StepEnd() has returned kReconfigured. It must not call the
  // Worker. Optional; not read from the environment.
  std::function<void()> on_park;
  // This process's rank on its host under mpirun (OMPI_COMM_WORLD_LOCAL_RANK), -1 otherwise.
  // ELASTRA_DEVICE=local sets `device` to it.
  int local_rank = -1;
  // Set by FromEnvironment: what the worker library keeps for itself (under mpirun the bootstrap,
  // whose MPI rank 0 hosts the job's coordinator, and MPI is finalized when the last copy goes;
  // the test hooks). Opaque to programs: copy it along with the options; null is the default.
  std::shared_ptr<const WorkerInternals> internals;

  // Fills the fields above from the environment that `elastra run` (or the mpirun bootstrap)
  // sets. kInvalidArgument naming the variable when one is missing or malformed. When
  // ELASTRA_COORDINATOR is unset but ELASTRA_STATE_DIR names a directory with coordinator.json,
  // the address and keys are read from there.
  // Under mpirun (OMPI_COMM_WORLD_SIZE set) without ELASTRA_COORDINATOR, MPI rank 0 starts an
  // embedded coordinator and shares it over MPI (collective: every rank must call this); worker
  // ids are "mpi-<world rank>" and park_when_removed is true. kUnavailable when the bootstrap
  // fails (the reason is carried to every rank).
  static StatusOr<WorkerOptions> FromEnvironment();
};

}  // namespace elastra
