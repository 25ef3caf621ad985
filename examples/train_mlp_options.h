// train_mlp's settings: its command line (ParseFlags) and what it reads from the environment (the
// CUDA device, a test hook). The program itself is train_mlp.cc.
#pragma once

#include <cstdint>
#include <string>

#ifndef ELASTRA_TRAIN_MLP_CUDA
#define ELASTRA_TRAIN_MLP_CUDA 0
#endif

namespace train_mlp {

struct Flags {
  int64_t steps = 100;
  int64_t global_batch = 64;
  int hidden = 32;
  int ffn = 0;     // 0: 2 x hidden
  int layers = 2;  // residual MLP blocks
  int micro_batches = 2;
  uint64_t seed = 1;
  int64_t dataset_size = 4096;
  double lr = 1e-2;
  std::string log;
  double step_time_ms = 0;
  bool reference = false;
  int commit_every = 0;  // 0: the worker's default (ELASTRA_COMMIT_EVERY or 10)
  std::string checkpoint_dir;
  int checkpoint_every = 0;
  bool plan = false;  // give the coordinator's planner a model description
  int pin_tp = 0, pin_pp = 0;
  bool only_dp = false;
  bool cuda = false;  // --device cuda
  // --stop-file FILE: training ends early once FILE exists. Before each step the workers agree
  // (one allreduce over world()) on whether any of them sees it, so all stop after the same step.
  // Host collectives only (not with the nccl backend). Tests use it to end a job when they are
  // done with it instead of guessing how many steps their resizes need.
  std::string stop_file;
  // --hold-file FILE: while FILE exists the workers wait between two steps (agreed as for
  // --stop-file; rank 0 then creates FILE.held), and ask again once it is gone. A test that kills
  // a worker while the others hold knows that no dp, pp or tp collective was in flight.
  std::string hold_file;
  // --device-memory-mb N: the memory this worker may use for the job's state
  // (WorkerOptions::device_memory_bytes, as ELASTRA_DEVICE_MEMORY_BYTES); 0: the environment's.
  int64_t device_memory_mb = 0;
  // --state-mb N: N MiB of state beside the model (the tensor "pad", float64, split over tp with
  // layer 0), committed, checkpointed and moved like the parameters but not computed on: the
  // state of a larger model whose step runs elsewhere, at the pace of --step-time-ms.
  // bench_goodput uses it for a realistic state size without a realistic CPU step. 0: none.
  int64_t state_mb = 0;
};

// The flags of the command line, checked; exits with status 2 (after printing the usage) on a bad
// flag or value, a model too large for this example, or --device cuda in a build without CUDA.
Flags ParseFlags(int argc, char** argv);

// The CUDA device of this process for --device cuda: ELASTRA_DEVICE when it is a number, else the
// local rank under mpirun (OMPI_COMM_WORLD_LOCAL_RANK), else 0.
int DeviceOrdinal();

// Test hook: ELASTRA_TEST_FAIL_OPS=WORKER_ID:STEP makes the arithmetic of the worker WORKER_ID fail
// at step STEP as a CUDA error would (MlpOps::FailForTest), on any device.
struct InjectedFailure {
  std::string worker_id;
  int64_t step = -1;
};
InjectedFailure InjectedFailureFromEnvironment();

}  // namespace train_mlp
