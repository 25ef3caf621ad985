// ClusterJob: a real many-host Elastra job on a NamespaceCluster, for the scenario tests
// (cluster_job_test.cc): `elastra coordinator` on host 0, bound to every interface of that host,
// `elastra agent` on the hosts a test chooses, each with a copy of join.json, and train_mlp
// workers started by the agents. The test drives the job with the real `elastra status`,
// `elastra resize` and `elastra coordinator --restart`, run inside host 0, and with the cluster's
// faults (KillHost, SetLinkUp).
//
// Every process the job starts is a child of the test process, runs in a host's namespaces and
// writes its output to a log in dir(): coordinator.log, agent<k>.log (the agent's workers write
// there too). The cluster's hosts share the file system (only /etc/hosts differs), so the
// workers' --log and --stop-file are ordinary paths in dir().
//
// Thread-compatible: one test thread drives it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "elastra/status.h"
#include "testbed/namespace_cluster.h"

namespace elastra::testing {

class ClusterJob {
 public:
  struct Options {
    int hosts = 2;
    // train_mlp's flags; --log and --stop-file are added.
    std::vector<std::string> train_args;
    // Added to the environment of every process the job starts (coordinator, agents and, through
    // the agents, workers): the short timeouts a test injects.
    std::map<std::string, std::string> env;
    // The job's state directory, under dir(): where `elastra coordinator` keeps its journal and
    // keys. A job launched by mpirun has its coordinator write .elastra in the launch directory.
    std::string state_dir_name = "state";
  };

  // The coordinator's port on host 0 (each host has a port space of its own).
  static constexpr int kPort = 5555;

  // Builds the cluster and the job's folder. kUnavailable when namespaces cannot be made here.
  static StatusOr<std::unique_ptr<ClusterJob>> Create(Options options);
  // Kills every process of the job (the cluster's destructor) and removes dir() unless
  // ELASTRA_KEEP_TEST_DIRS is set.
  ~ClusterJob();
  ClusterJob(const ClusterJob&) = delete;
  ClusterJob& operator=(const ClusterJob&) = delete;

  NamespaceCluster& cluster() { return *cluster_; }
  const std::string& dir() const { return dir_; }
  std::string state_dir() const { return dir_ + "/" + options_.state_dir_name; }
  std::string log_path() const { return dir_ + "/run.jsonl"; }
  std::string stop_path() const { return dir_ + "/stop"; }
  std::string agent_log(int host) const { return dir_ + "/agent" + std::to_string(host) + ".log"; }
  std::string coordinator_log() const { return dir_ + "/coordinator.log"; }

  // `elastra coordinator --state-dir state_dir() --workers N --max-workers M --bind
  // tcp://0.0.0.0:kPort` on host 0; returns once it printed its line (join.json is written).
  Status StartCoordinator(int workers, int max_workers);
  // `elastra coordinator --state-dir state_dir() --restart` on host 0; returns once it took the
  // job back (its line is printed again).
  Status RestartCoordinator();
  pid_t coordinator_pid() const { return coordinator_; }

  // `elastra agent --join hostK/join.json --name hostK --slots S -- train_mlp ...` on host k,
  // with its own copy of the join file; returns once it registered (its line).
  Status StartAgent(int host, int slots);
  pid_t agent_pid(int host) const;
  // The hosts whose agents this job started and has not killed.
  std::vector<int> agent_hosts() const;

  // The machine of host k died: SIGKILLs every process there (its agent, the agent's workers, the
  // coordinator on host 0) through NamespaceCluster::KillHost, and reaps the agent. Returns the
  // agent's exit code as WaitExit does (137 when it was killed).
  StatusOr<int> KillHost(int host);

  // `MPIRUN ARGS... train_mlp --log ... --stop-file ... TRAIN_ARGS` started in host 0 with dir()
  // as its working directory (where MPI rank 0's coordinator writes .elastra), mpirun_argv being
  // `MPIRUN ARGS...`; Open MPI's root permission variables are set. Its output goes to
  // mpirun_log(). Returns its pid.
  StatusOr<pid_t> StartMpirun(const std::vector<std::string>& mpirun_argv);
  std::string mpirun_log() const { return dir_ + "/mpirun.log"; }

  // Waits until child `pid` (one this job started) exits and reaps it: its exit code (128 +
  // signal when killed), or -1 when `timeout` passed first (it is left running).
  static int WaitExit(pid_t pid, std::chrono::seconds timeout);

  // `elastra ARGS --state-dir state_dir()` run in host 0 (the admin's side: coordinator.json).
  RunResult Elastra(std::vector<std::string> args,
                    std::chrono::seconds timeout = std::chrono::seconds(120));
  // `elastra status --json`, parsed; an empty object when it fails (no coordinator answers).
  nlohmann::json JobStatus();
  // Polls JobStatus() until `pred` holds (true) or `timeout` passes (false).
  bool WaitFor(const std::function<bool(const nlohmann::json&)>& pred,
               std::chrono::seconds timeout);
  bool WaitForStep(int64_t step, std::chrono::seconds timeout);

  // Creates stop_path(): the workers end the job together after the step at which they agree
  // they see it.
  void StopTraining();

  // The tail of every process log (coordinator, agents), for failure messages.
  std::string Logs() const;

 private:
  explicit ClusterJob(Options options) : options_(std::move(options)) {}
  Status WaitForCoordinatorLine(size_t occurrence);

  const Options options_;
  std::string dir_;
  std::unique_ptr<NamespaceCluster> cluster_;
  pid_t coordinator_ = -1;
  std::map<int, pid_t> agents_;
};

// The members of a status, by rank: {rank, host}.
std::map<int, std::string> MemberHostsByRank(const nlohmann::json& status);
// The job's history (generations) from a status.
std::vector<nlohmann::json> History(const nlohmann::json& status);
// A host's entry in a status ("hosts"), or an empty object.
nlohmann::json HostEntry(const nlohmann::json& status, const std::string& name);
// The lines of `path` that contain `text`.
std::vector<std::string> LinesWith(const std::string& path, const std::string& text);

}  // namespace elastra::testing
