// SlurmCluster: a real Slurm cluster (Debian's slurmctld, slurmd and munge) on a NamespaceCluster,
// for the Slurm tests (tests/slurm/). Host 0 runs slurmctld and the one munged every host shares
// (the file system is shared, so is its socket); hosts 1..N each run a slurmd whose node name is
// the host's name ("host1" at 198.18.0.11, ...). The partition `debug` holds every node; each node
// has 1 CPU, so one job (one task per node) takes a node whole. No accounting, linuxproc
// process tracking, no cgroups. Clients (sbatch, squeue, scontrol, ...) run inside host 0 with
// SLURM_CONF set (Run); from the root namespace 198.18.0.0/24 is not reachable.
//
// Every daemon is a child of the cluster: the destructor kills them with everything Slurm started
// (slurmstepd, jobs) through NamespaceCluster's destructor, and removes the cluster's folder
// unless ELASTRA_KEEP_TEST_DIRS is set. The recipe it follows: docs/slurm.md.
//
// Thread-compatible: one test thread drives it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "elastra/status.h"
#include "testbed/namespace_cluster.h"

namespace elastra::testing {

class SlurmCluster {
 public:
  struct Options {
    int nodes = 3;
    // slurm.conf's KillWait: seconds between the SIGTERM that ends a step on a node and SIGKILL.
    int kill_wait_s = 30;
    // slurm.conf's SlurmdTimeout: how long a silent slurmd takes to be marked down.
    int slurmd_timeout_s = 30;
    // How long the daemons may take to show every node idle.
    std::chrono::seconds start_timeout{60};
  };

  // Empty when a cluster can be made here; else one line: namespaces are missing
  // (NamespaceCluster::Unavailable) or a Slurm or munge program or munge's key is.
  static std::string Unavailable();

  // Builds the hosts, writes slurm.conf, starts munged, slurmctld and the slurmds, and returns
  // once `sinfo` shows every node idle (kTimedOut after start_timeout, with the daemons' logs).
  static StatusOr<std::unique_ptr<SlurmCluster>> Create(Options options);
  ~SlurmCluster();
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  NamespaceCluster& hosts() { return *cluster_; }
  int nodes() const { return options_.nodes; }
  // Node k (1..nodes()) is host k of hosts(): "host1".
  std::string NodeName(int node) const { return cluster_->Name(node); }
  const std::string& dir() const { return dir_; }
  std::string conf_path() const { return dir_ + "/slurm.conf"; }

  // Runs a Slurm client (or any command) in host 0 with SLURM_CONF and `env` added.
  StatusOr<RunResult> Run(const std::vector<std::string>& argv,
                          std::chrono::seconds timeout = std::chrono::seconds(60),
                          const std::map<std::string, std::string>& env = {});

  // The nodes of job `id` (squeue %N, expanded by `scontrol show hostnames`); empty when it is not
  // running.
  std::vector<std::string> JobNodes(const std::string& id);
  // The job's state (squeue %T: RUNNING, COMPLETED, ...), "" when squeue no longer knows it.
  std::string JobState(const std::string& id);
  // A node's state (sinfo %T: idle, mixed, allocated, down*, ...).
  std::string NodeState(int node);

  // The tails of the daemons' logs, for failure messages.
  std::string Logs() const;

 private:
  explicit SlurmCluster(Options options) : options_(std::move(options)) {}
  Status Start();
  Status WriteConf() const;
  Status WaitForIdleNodes();

  const Options options_;
  std::string dir_;
  std::unique_ptr<NamespaceCluster> cluster_;
};

}  // namespace elastra::testing
