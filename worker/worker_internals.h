// WorkerInternals: the options the worker library keeps off the public WorkerOptions. Under mpirun,
// the bootstrap (MPI rank 0 hosts the job's coordinator in it; the Worker keeps it alive, and MPI
// is finalized when the last copy goes), and the test hooks that tests set through the
// environment. WorkerOptions::FromEnvironment makes them; WorkerOptions::internals carries them.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "elastra/worker_options.h"

namespace elastra {

class MpiBootstrap;  // worker/mpi_bootstrap.h

struct WorkerInternals {
  // Set under mpirun (OMPI_COMM_WORLD_SIZE set and no ELASTRA_COORDINATOR given).
  std::shared_ptr<MpiBootstrap> mpi;
  // Test hook: sleep this long before building each generation (ELASTRA_TEST_APPLY_DELAY_MS).
  std::chrono::milliseconds test_apply_delay{0};
  // Test hook: "WORKER_ID:GENERATION" makes that worker's build of that generation fail right
  // after its state moved, as a failure there would leave its shards
  // (ELASTRA_TEST_FAIL_AFTER_MOVE).
  std::string test_fail_after_move;
};

// The internals of `options`, or the defaults when it has none (options made by hand).
inline const WorkerInternals& InternalsOf(const WorkerOptions& options) {
  static const WorkerInternals kNone;
  return options.internals != nullptr ? *options.internals : kNone;
}

}  // namespace elastra
