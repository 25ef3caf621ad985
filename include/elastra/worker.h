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
#include "elastra/worker_options.h"

namespace elastra {

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
  // (received from a current worker when it joins a running job). Returns kAborted if the
  // coordinator ends this worker's part before it holds a rank (dismissed() then says whether
  // it did so cleanly), kUnavailable on timeout, kFailedPrecondition after Leave().
  Status Start();

  // True once Start() returned an error because the coordinator ended this worker's part cleanly
  // before it ever held a rank: a standby (a hot spare, or a replacement an agent started) that
  // the job no longer needs (`elastra resize --spares` lowered, its host drained), or the job
  // finished while it stood by. Nothing went wrong: the program should exit 0, as on kLeave.
  bool dismissed() const;

  // Leaves the job at once without finishing, for a program that goes on after giving up on
  // training (Python's Worker.close()): tells the coordinator (a Leave; `why` goes to its log),
  // which goes on without this worker right away, its peers recovering as from a lost one without
  // waiting out its heartbeats, and closes the communicators and the connection. Waits up to a
  // second for the coordinator's answer. Nothing when this worker left or finished already;
  // StepEnd() and Start() fail with kFailedPrecondition afterwards.
  void Leave(std::string_view why);

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

 private:
  class Impl;
  explicit Worker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra
