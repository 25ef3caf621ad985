// Worker: the API a training loop links. One Worker per process. It joins the job's coordinator,
// holds the current generation's layout and communicators, owns the TensorCollection, and at
// StepEnd() agrees with its peers on when to pause for a reconfiguration, moves state to new
// workers, and rolls back to an in-memory commit after a failure.
//
// example: worker-h (compiled as written, with the include of this header, by tests/install)
//   elastra::Status TrainOneStep(elastra::Worker& worker);  // uses world() collectives
//
//   elastra::Status Train(const elastra::WorkerOptions& options, int64_t steps) {
//     ELASTRA_ASSIGN_OR_RETURN(auto worker, elastra::Worker::Create(options));
//     ELASTRA_RETURN_IF_ERROR(
//         worker->state().AddTensor("w", {64, 64}, elastra::DataType::kFloat64));
//     // ... initialize worker->state().View<double>("w")
//     ELASTRA_RETURN_IF_ERROR(worker->Start());
//     while (worker->step() < steps) {
//       elastra::Status s = TrainOneStep(*worker);
//       // An error from StepEnd is one the job cannot recover from.
//       ELASTRA_ASSIGN_OR_RETURN(elastra::StepAction action, worker->StepEnd(s));
//       if (action == elastra::StepAction::kLeave) return elastra::OkStatus();  // shrunk out
//       // kReconfigured: layout, rank or step may have changed; re-fetch views
//     }
//     worker->Finish();
//     return elastra::OkStatus();
//   }
//
// Not thread-safe: call from the training thread. Internally one I/O thread talks to the
// coordinator (heartbeats, pushes).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"

namespace elastra {

class MpiBootstrap;  // the mpirun bootstrap, internal to the worker library

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
  // Optional model description (JSON, see docs/resharding.md) the coordinator's planner uses to
  // choose layouts when a resize names only a worker count.
  std::string model_json;
  // Test hook: sleep this long before building each generation (ELASTRA_TEST_APPLY_DELAY_MS).
  std::chrono::milliseconds test_apply_delay{0};
  // Test hook: "WORKER_ID:GENERATION" makes that worker's build of that generation fail right
  // after its state moved, as a failure there would leave its shards
  // (ELASTRA_TEST_FAIL_AFTER_MOVE).
  std::string test_fail_after_move;
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
  // Set by FromEnvironment under mpirun: the bootstrap (MPI rank 0 hosts the job's coordinator in
  // it). The Worker keeps it alive; MPI is finalized when the last copy goes.
  std::shared_ptr<MpiBootstrap> mpi;

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

enum class StepAction {
  kContinue,      // nothing changed; go on with step()
  kReconfigured,  // a new generation: layout/rank/communicator changed, step() may have rolled back
  kLeave,         // this worker was removed by a shrink; its state is handed off; exit 0
};

class Worker {
 public:
  // Validates options and connects to the coordinator. kUnauthenticated when the coordinator
  // refuses our key, kUnavailable when it cannot be reached.
  static StatusOr<std::unique_ptr<Worker>> Create(const WorkerOptions& options);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The state to register before Start().
  TensorCollection& state();

  // Joins the job and returns once this worker holds a layout, communicators and the job's state
  // (received from a current worker when it joins a running job). Returns kLeave-equivalent
  // kAborted if the coordinator never admits it, kUnavailable on timeout.
  Status Start();

  // Ends a step. `step_status` is the outcome of the step's own collectives: an error there
  // (kPeerLost, kTimedOut, kAborted) starts the failure path. Cheap when nothing is pending: one
  // small allreduce. Returns an error only when the job cannot go on (no commit to roll back to,
  // the coordinator gone past decision_timeout, state mismatch).
  StatusOr<StepAction> StepEnd(const Status& step_status);

  // Tells the coordinator this worker finished training (call after the last step). Returns once
  // this rank's checkpoint write in flight, if any, is durable and reported, so that the job's
  // last checkpoint is committed before the job ends.
  void Finish();

  // Numbers from the training loop, carried to the coordinator with the next heartbeat (no message
  // of their own) and shown in its status (GET /v1/job "training"), its metrics
  // (elastra_training_metric{name=...}) and its dashboard. Report keeps the latest `value` of
  // `name` with the current step(); the job's value of a name is the one of the lowest-ranked
  // member that reported it, so report a job-wide number (a loss averaged over the data-parallel
  // group) or report on rank 0. kInvalidArgument when `name` is not [A-Za-z_][A-Za-z0-9_]* of at
  // most 64 bytes, `value` is not finite, or 16 other names were reported already.
  Status Report(std::string_view name, double value);
  // The samples this worker's data-parallel replica consumed in the step just run (its share of
  // the global batch). The coordinator counts one worker per replica (pipeline stage 0, tensor
  // rank 0), so every worker may call it alike. kInvalidArgument when `samples` is negative.
  Status ReportSamples(int64_t samples);

  // The number of steps applied to state(): the next step to run.
  int64_t step() const;
  uint64_t generation() const;
  const Layout& layout() const;
  int rank() const;
  int world_size() const;
  const std::string& worker_id() const;
  // The training communicators' backend once Start() resolved WorkerOptions::backend: kGloo or
  // kNccl.
  Backend backend() const;
  // This worker's place in the current layout.
  const Coordinates& coordinates() const;
  // The current generation's communicators: the world, and this worker's data-parallel group
  // (same pipeline stage and tensor rank), pipeline group (same dp and tp rank) and
  // tensor-parallel group (same dp rank and stage). A group that spans the world is the world.
  // Valid until the next StepEnd that returns kReconfigured. backend() says which kind they are.
  Communicator& world();
  Communicator& dp_group();
  Communicator& pp_group();
  Communicator& tp_group();

  class Impl;

 private:
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra
