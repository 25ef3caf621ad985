// HostAgent: the agent loop of one host, shared by `elastra agent` (a host of a job that spans
// machines, docs/hosts.md "Agents") and `elastra run` (a coordinator child process plus one such
// agent on the same machine). It keeps the host registered with the coordinator (AgentRegister
// every few seconds, so a restarted coordinator learns it back), starts a worker for each id of a
// SpawnRequest with the worker environment (WorkerEnvironment), never more at once than its slots
// (a start asked for while they are full waits for a worker to exit), hands out GPUs (DeviceSlots),
// reports each worker's exit at once (ProcessExited), and ends when the coordinator says so
// (Shutdown), when a signal asks (a drain of the host, or stopping the workers), or, for
// `elastra run`, when its workers are all gone.
//
// Not thread-safe: one owner drives it. Run() installs SIGTERM and SIGINT handlers: one HostAgent
// per process.
#pragma once

#include <chrono>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/control_client.h"
#include "protocol/keys.h"
#include "protocol/messages.h"
#include "elastra/status.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/device_slots.h"
#include "launch/process.h"

namespace elastra::launch {

// The exit codes of `elastra agent` (docs/launching.md, "Running across hosts").
inline constexpr int kAgentExitOk = 0;          // the job finished, or this host was drained
inline constexpr int kAgentExitFailed = 1;      // the job failed, or a drain asked for failed
inline constexpr int kAgentExitUsage = 2;       // bad usage
inline constexpr int kAgentExitCannotJoin = 3;  // no join file, no coordinator, a refused key

// The coordinator a HostAgent's owner runs beside it (`elastra run`'s child process), watched from
// the agent's loop: the agent registers again at once after a restart, and does not conclude that
// the job is over while the coordinator is down but coming back.
class CoordinatorWatch {
 public:
  enum class Event {
    kNone,       // nothing changed
    kRestarted,  // it died and runs again (same address, keys and journal)
    kGone,       // it died and cannot be started again: the job cannot go on
  };
  virtual ~CoordinatorWatch() = default;
  // Called on every turn of the loop; may restart the coordinator (blocking while it starts).
  virtual Event Supervise() = 0;
  // True while it is down and will be started again.
  virtual bool restarting() const = 0;
};

struct HostAgentOptions {
  // What the agent registers: the host's name, its slots (max_workers), the address its workers
  // bind their collectives to, and the GPUs it hands out (0: CPU workers; otherwise each worker
  // gets ELASTRA_DEVICE, the least used of these devices).
  proto::AgentRegister registration;
  // The job its workers join: coordinator address, job, server key and the worker key pair.
  ConnectionInfo job;
  // The worker program and its arguments (required).
  Args program;
  // ELASTRA_STATE_DIR for the workers; empty: not set.
  std::string worker_state_dir;
  // Whether workers get ELASTRA_HOST and ELASTRA_BIND_HOST (the registration's host and address).
  // `elastra run` leaves both to the environment it was started with.
  bool export_host = true;
  // Workers started at once, without a SpawnRequest (`elastra run`'s first --nproc). Default none.
  std::vector<std::string> initial_workers;
  // What SIGTERM and SIGINT do. kDrain (default, `elastra agent`): ask the coordinator to drain
  // this host and exit 0 once the job left it; a second signal stops the workers at once.
  // kStopWorkers (`elastra run`): SIGTERM the workers and exit 128+signal.
  enum class OnSignal { kDrain, kStopWorkers } on_signal = OnSignal::kDrain;
  // For schedulers that signal every process of a host at once (Slurm ends a step on a node with
  // SIGTERM to all of its processes, then SIGKILL after KillWait; docs/slurm.md). Default false.
  // When true: the workers start with SIGTERM ignored, so that only the agent's drain decides when
  // they leave; a SIGTERM during a drain (Slurm's srun forwards the one it got) is ignored rather
  // than stopping the workers (SIGINT still does); the agent stops workers with SIGINT, then
  // SIGKILL after kill_grace.
  bool workers_ignore_sigterm = false;
  // End when every worker is gone and the coordinator did not say the job is over, with the job's
  // outcome read from the coordinator's status (`elastra run`, whose workers are the whole job).
  // Default false: an agent with no worker waits for the next SpawnRequest.
  bool exit_when_idle = false;
  // Each worker in a process group of its own (default true), so that a terminal's Ctrl-C reaches
  // only the agent, which drains, rather than killing the workers under the drain.
  bool own_process_groups = true;
  // How often the registration is sent again (default 2 s).
  std::chrono::milliseconds register_period{2000};
  // How long one registration or the first reply to a drain may take (default 5 s).
  std::chrono::milliseconds request_timeout{5000};
  // How long the coordinator may leave every registration unanswered before the agent stops its
  // workers and exits kAgentExitCannotJoin; 0 (default): wait for it forever.
  std::chrono::milliseconds coordinator_timeout{0};
  // How long a drain asked for by a signal may take to be done (default 300 s); past it the
  // workers are stopped and the agent exits kAgentExitFailed.
  std::chrono::milliseconds drain_timeout{300000};
  // After a Shutdown with code 0 (job finished, host drained): how long the workers get to exit
  // by themselves before SIGTERM (default 10 s).
  std::chrono::milliseconds finish_grace{10000};
  // After SIGTERM: how long the workers get before SIGKILL (default 5 s).
  std::chrono::milliseconds kill_grace{5000};
};

// The environment a worker starts with, added to the agent's own: ELASTRA_COORDINATOR,
// ELASTRA_JOB, ELASTRA_WORKER_ID, ELASTRA_SERVER_KEY, ELASTRA_WORKER_PUBLIC_KEY and
// ELASTRA_WORKER_SECRET_KEY; ELASTRA_STATE_DIR when `worker_state_dir` is set; ELASTRA_HOST and
// ELASTRA_BIND_HOST with `export_host`; ELASTRA_DEVICE when `device` >= 0. Pure.
std::map<std::string, std::string> WorkerEnvironment(const HostAgentOptions& options,
                                                     const std::string& worker_id, int device);

// The heartbeat interval of the agent's connection: ELASTRA_HEARTBEAT_MS (default 200), as the
// workers use, so that the coordinator can tell a host's agent went silent.
std::chrono::milliseconds AgentHeartbeatInterval();

// The devices --gpus names: N for --gpus N, every CUDA device this process sees for --gpus auto
// (0 when there is none), 0 without the flag.
int GpuCount(const GpusFlag& flag);

class HostAgent {
 public:
  // `client`: connected to the coordinator with the agent's key and sender id "agent-<host>"
  // (AgentHeartbeatInterval()); the agent owns it and closes it when destroyed. `watch`: the
  // coordinator its owner runs (may be null); it must outlive the agent.
  HostAgent(HostAgentOptions options, std::unique_ptr<ControlClient> client,
            CoordinatorWatch* watch = nullptr);
  ~HostAgent();
  HostAgent(const HostAgent&) = delete;
  HostAgent& operator=(const HostAgent&) = delete;

  // Registers once and waits for the coordinator's Ack: the refusal as the coordinator's Status
  // (kUnauthenticated for a key that may not register a host), kTimedOut when no reply came
  // within request_timeout.
  [[nodiscard]] Status Register();

  // Starts the initial workers and runs until the job is over for this host; returns the exit
  // code: the Shutdown's code, kAgentExitOk after a drain, kAgentExitFailed when a drain failed,
  // kAgentExitCannotJoin when the coordinator stayed silent for coordinator_timeout, 128+signal
  // after a signal with OnSignal::kStopWorkers or a second signal during a drain; with
  // exit_when_idle, 0 when the job finished and 1 otherwise. Returns once no worker is left.
  int Run();

  ControlClient& client() { return *client_; }

 private:
  using Clock = std::chrono::steady_clock;

  // The steps of one turn of the loop, in order.
  void HandleSignal();
  void ReapWorkers();
  void WatchCoordinator();
  void KeepRegistered();
  void HandlePushes();
  void FollowDrain();
  void EnforceGraces();
  // The exit code once the loop may end (nullopt while it goes on).
  std::optional<int> Outcome();

  void Spawn(const std::string& worker_id);
  void ReportExit(const std::string& worker_id, int exit_code, int signal);
  void StartDrain();
  // The end is decided (the first decision's code stands): wait `finish_grace` for the workers to
  // exit, then SIGTERM them; or SIGTERM them now.
  void Finish(int code);
  void StopWorkers(int code);
  // The signal that asks a worker to stop: SIGTERM, or SIGINT when workers ignore SIGTERM.
  int StopSignal() const;

  HostAgentOptions options_;
  std::unique_ptr<ControlClient> client_;
  CoordinatorWatch* watch_;
  ProcessGroup workers_;
  // Workers the coordinator asked for while every slot was taken, in order: each starts once a
  // worker exits (a host never runs more workers than its slots).
  std::deque<std::string> waiting_;
  std::optional<DeviceSlots> gpus_;
  const std::string label_;  // "host NAME", for logs

  std::optional<int> exit_code_;  // the end is decided; the loop ends when no worker is left
  Clock::time_point term_at_ = Clock::time_point::max();  // SIGTERM the workers then
  Clock::time_point kill_at_ = Clock::time_point::max();  // SIGKILL them then

  std::future<Status> registering_;  // a registration in flight
  Clock::time_point next_registration_;
  Clock::time_point last_heard_;  // the coordinator's last answer or push

  bool draining_ = false;
  std::future<StatusOr<proto::ResizeReply>> drain_;  // the drain's outcome (done or failed)
};

}  // namespace elastra::launch
