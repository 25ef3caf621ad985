// The mpirun bootstrap (internal to the worker library). Under `mpirun` (Open MPI's
// OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK in the environment) a training program needs no
// other set-up:
//   - without ELASTRA_COORDINATOR, MPI is initialized, MPI rank 0 starts the coordinator as a child
//     process (`elastra coordinator`, found by ElastraBinary(); initial workers = the MPI world
//     size; it writes <ELASTRA_STATE_DIR or .elastra>/coordinator.json as under `elastra run`),
//     starts it again with --restart when it dies, and broadcasts its port, the addresses it may
//     be reached at, the job and the worker keys to every rank over MPI. A job on one host uses
//     127.0.0.1. A job that spans hosts binds the coordinator to every interface (0.0.0.0) and
//     sends every non-loopback IPv4 address of rank 0's host: each rank on another host connects
//     to the first that accepts (its own subnets first) and binds its collectives to the local
//     address of that route; the ranks on rank 0's host use the address most of the others
//     reached (ChooseAddresses, ChooseJobAddress). ELASTRA_BIND_HOST overrides the bind address;
//     on rank 0 it is also offered first;
//   - with ELASTRA_COORDINATOR set, the ranks join that coordinator (keys from the environment or
//     ELASTRA_STATE_DIR); MPI is not initialized for this.
// Worker ids are "mpi-<world rank>" (rank 0's coordinator) or "mpi-<mpirun job id>-<world rank>"
// (external coordinator, so two mpirun jobs can share one coordinator).
//
// The object must outlive the Worker's use of the coordinator: rank 0's coordinator process is
// stopped with it. Its destructor on rank 0 waits (up to ELASTRA_MPI_FINISH_TIMEOUT_MS, default
// 60000) for the job to finish or fail, so that the other ranks can still reach the coordinator,
// then stops it; every rank then calls MPI_Finalize if this object initialized MPI.
// Thread-compatible: create and destroy from one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/keys.h"
#include "elastra/status.h"

namespace elastra {

class CoordinatorProcess;

// What mpirun tells a rank about its place.
struct MpirunEnvironment {
  int world_size = 0;
  int world_rank = 0;
  int local_rank = 0;
  int local_size = 0;
  std::string job_id;  // OMPI_MCA_ess_base_jobid, may be empty
};

// nullopt when the process was not started by mpirun; kInvalidArgument naming the variable when
// one of them is malformed (rank outside the world, not a number).
StatusOr<std::optional<MpirunEnvironment>> DetectMpirun();

// The Open MPI flag that keeps a job alive when one rank dies, or an empty string when the
// environment shows neither OMPI_MCA_orte_enable_recovery=1 nor
// OMPI_MCA_orte_abort_on_non_zero_status=0.
std::string MpirunRecoveryFlag();

// For a job that spans hosts: the address of rank 0's host that the ranks there use for the
// coordinator and bind their collectives to. `picks` holds, by rank, the address each rank on
// another host reached the coordinator at (empty for ranks on rank 0's host and ranks that reached
// none). The most frequent pick wins, a tie going to the lowest rank's; `fallback` when there is
// none.
std::string ChooseJobAddress(const std::vector<std::string>& picks, const std::string& fallback);

class MpiBootstrap {
 public:
  // Sets the job up as described above. Collective over the MPI world when no coordinator is
  // named: every rank must call it. kUnavailable when rank 0's broadcast does not arrive within
  // ELASTRA_MPI_BOOTSTRAP_TIMEOUT_MS (default 120000), the coordinator's own error (carried to
  // every rank) when rank 0 cannot start it, kFailedPrecondition when this build has no MPI and
  // no coordinator is named, kInvalidArgument for a malformed environment.
  static StatusOr<std::shared_ptr<MpiBootstrap>> Create(const MpirunEnvironment& env);

  ~MpiBootstrap();
  MpiBootstrap(const MpiBootstrap&) = delete;
  MpiBootstrap& operator=(const MpiBootstrap&) = delete;

  const MpirunEnvironment& environment() const { return env_; }
  // Address, job, coordinator public key and the worker key pair (admin keys only on the host).
  const ConnectionInfo& connection() const { return info_; }
  const std::string& worker_id() const { return worker_id_; }
  // The address this rank's collectives bind to: ELASTRA_BIND_HOST when set; else 127.0.0.1 for
  // a single-host job, the local address of the route to the coordinator for one that spans
  // hosts. Empty when joining a named coordinator without ELASTRA_BIND_HOST (WorkerOptions then
  // takes the route to it).
  const std::string& bind_host() const { return bind_host_; }
  // True on the rank that started the coordinator process.
  bool hosts_coordinator() const { return coordinator_ != nullptr; }
  // Where coordinator.json was written (empty when joining an external coordinator).
  const std::string& state_dir() const { return state_dir_; }

 private:
  explicit MpiBootstrap(const MpirunEnvironment& env);
  void StartSupervisor();
  // Rank 0: starts the coordinator process and returns what it broadcasts (its port and the
  // addresses it may be reached at, the job and the worker keys, or an error).
  std::string StartCoordinator(bool spans_hosts, const std::string& bind_override,
                               long long max_workers);
  // Every rank (collective when the job spans hosts): the coordinator address this rank uses and
  // the address its collectives bind to, from rank 0's `hosts` and `port`.
  Status ChooseAddresses(const std::vector<std::string>& hosts, int port, bool spans_hosts,
                         const std::string& bind_override,
                         std::chrono::steady_clock::time_point deadline);

  MpirunEnvironment env_;
  ConnectionInfo info_;
  std::string worker_id_;
  std::string bind_host_;
  std::string state_dir_;
  std::unique_ptr<CoordinatorProcess> coordinator_;  // rank 0's `elastra coordinator` child
  std::thread supervisor_;  // starts it again when it dies
  std::mutex supervisor_mu_;
  std::condition_variable supervisor_cv_;
  bool stopping_ = false;
  std::atomic<bool> coordinator_ended_{false};  // it exited by itself: the job is over
  std::atomic<int> job_exit_code_{-1};  // its exit code then: 0 finished, 1 failed
  bool finalize_mpi_ = false;
};

}  // namespace elastra
