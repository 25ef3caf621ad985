// elastra run: the local launcher/agent. Starts the coordinator as a child process on loopback
// (`elastra coordinator`, keys and journal in the state directory) and starts it again with
// --restart when it dies, spawns and supervises the workers, reports their exits to the
// coordinator at once, starts more when a resize asks, and exits with the job's status.
// elastra coordinator: the same coordinator without an agent, for workers started elsewhere.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "common/control_client.h"
#include "common/coordinator_process.h"
#include "common/keys.h"
#include "common/logging.h"
#include "common/status_json.h"
#include "coordinator/embedded.h"
#include "coordinator/server.h"
#include "elastra/device_buffer.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/device_slots.h"
#include "launch/process.h"

namespace elastra::launch {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

std::atomic<int> g_stop_signal{0};
void OnSignal(int sig) { g_stop_signal = sig; }

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

std::map<std::string, std::string> WorkerEnv(const ConnectionInfo& info, const std::string& id,
                                             const std::string& state_dir) {
  return {{"ELASTRA_COORDINATOR", info.address},
          {"ELASTRA_JOB", info.job},
          {"ELASTRA_WORKER_ID", id},
          {"ELASTRA_SERVER_KEY", info.server_public},
          {"ELASTRA_WORKER_PUBLIC_KEY", info.worker.public_key},
          {"ELASTRA_WORKER_SECRET_KEY", info.worker.secret_key},
          {"ELASTRA_STATE_DIR", state_dir}};
}

// The launcher's own path: the coordinator it starts is `elastra coordinator` of the same build.
std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "elastra";
  return std::string(buf, static_cast<size_t>(n));
}

// elastra run's flags.
struct RunOptions {
  int nproc = 0;
  std::string state_dir = ".elastra";
  int max_workers = 64;
  std::string job = "elastra";
  std::string resume;       // empty: a new job
  std::optional<int> gpus;  // --gpus N; neither this nor gpus_auto: no ELASTRA_DEVICE
  bool gpus_auto = false;   // --gpus auto: every CUDA device this process sees
  Args program;             // PROGRAM ARGS..., everything after --
};

// elastra coordinator's flags.
struct CoordinatorOptions {
  std::string state_dir = ".elastra";
  int workers = 1;
  int max_workers = 64;
  std::string bind = "tcp://127.0.0.1:0";
  std::string job = "elastra";
  std::string resume;
  bool restart = false;
};

int RunJob(const RunOptions& flags) {
  if (flags.program.empty()) {
    return UsageError("elastra run", "no program given; usage: elastra run --nproc N -- PROGRAM");
  }
  const int nproc = flags.nproc;
  const int max_workers = std::max(flags.max_workers, nproc);
  // --gpus N|auto: each worker gets ELASTRA_DEVICE, a GPU of its own while there are enough.
  std::optional<DeviceSlots> gpus;
  if (flags.gpus_auto) {
    const int n = CudaDeviceCount();
    if (n == 0) {
      std::fprintf(stderr, "elastra run: --gpus auto: this machine shows no CUDA device\n");
      return 2;
    }
    gpus.emplace(n);
  } else if (flags.gpus) {
    gpus.emplace(*flags.gpus);
  }
  const std::string& state_dir = flags.state_dir;
  const std::string& job = flags.job;
  logging::SetTag("agent");

  std::vector<std::string> coordinator_args = {
      "--job", job, "--bind", "tcp://127.0.0.1:0", "--workers", std::to_string(nproc),
      "--max-workers", std::to_string(max_workers)};
  if (!flags.resume.empty()) {
    coordinator_args.push_back("--resume");
    coordinator_args.push_back(flags.resume);
  }
  CoordinatorProcess coordinator(SelfPath(), state_dir, coordinator_args);
  auto info_or = coordinator.Start();
  if (!info_or.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", info_or.status().ToString().c_str());
    return 1;
  }
  const ConnectionInfo info = std::move(info_or).value();
  LOG(INFO) << "coordinator for job '" << job << "' at " << info.address << " (pid "
            << coordinator.pid() << "); state in " << state_dir;

  ControlClientOptions co;
  co.address = info.address;
  co.server_public = info.server_public;
  co.client_keys = info.admin;
  co.job = job;
  co.sender = "agent-" + HostName();
  auto agent_or = ControlClient::Connect(co);
  if (!agent_or.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", agent_or.status().ToString().c_str());
    coordinator.Stop(milliseconds(2000));
    return 1;
  }
  auto agent = std::move(agent_or).value();
  const proto::AgentRegister registration{HostName(), static_cast<int32_t>(max_workers)};
  auto reg = agent->Call<proto::Ack>(MessageType::kAgentRegister, registration,
                                     milliseconds(5000));
  if (!reg.ok()) {
    std::fprintf(stderr, "elastra run: registering the agent: %s\n",
                 reg.status().ToString().c_str());
    coordinator.Stop(milliseconds(2000));
    return 1;
  }
  // Registering again is harmless; it makes a coordinator restarted by someone else know this
  // agent again within a second or two.
  auto next_registration = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int failed_restarts = 0;

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  ProcessGroup group;
  auto spawn = [&](const std::string& id) {
    auto env = WorkerEnv(info, id, state_dir);
    if (gpus) env["ELASTRA_DEVICE"] = std::to_string(gpus->Acquire(id));
    auto pid = group.Spawn(id, flags.program, env);
    if (!pid.ok()) {
      if (gpus) gpus->Release(id);
      LOG(ERROR) << "cannot start worker " << id << ": " << pid.status();
      proto::ProcessExited exited{id, 127, 0};
      agent->Send(MessageType::kProcessExited, proto::EncodePayload(exited)).IgnoreError();
      return;
    }
    LOG(INFO) << "started worker " << id << " as pid " << *pid
              << (gpus ? " on GPU " + env["ELASTRA_DEVICE"] : std::string());
  };
  for (int i = 0; i < nproc; ++i) spawn("w" + std::to_string(i));

  std::optional<int> shutdown_code;
  auto shutdown_deadline = std::chrono::steady_clock::time_point::max();
  bool any_failed = false;
  while (true) {
    if (g_stop_signal != 0) {
      LOG(WARNING) << "signal " << g_stop_signal.load() << ": stopping the workers";
      group.SignalAll(SIGTERM);
      shutdown_code = 128 + g_stop_signal.load();
      shutdown_deadline = std::min(shutdown_deadline,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(5));
      g_stop_signal = 0;
    }
    while (auto exit = group.Reap()) {
      if (coordinator.IsIt(exit->pid)) {
        coordinator.Reaped();
        LOG(WARNING) << "the coordinator (pid " << exit->pid << ") died ("
                     << (exit->signal != 0 ? "signal " + std::to_string(exit->signal)
                                           : "exit code " + std::to_string(exit->exit_code))
                     << "); starting it again on " << state_dir;
        continue;
      }
      if (gpus) gpus->Release(exit->worker_id);
      if (exit->signal != 0) {
        LOG(WARNING) << "worker " << exit->worker_id << " (pid " << exit->pid
                     << ") killed by signal " << exit->signal;
      } else {
        LOG(INFO) << "worker " << exit->worker_id << " (pid " << exit->pid << ") exited with "
                  << exit->exit_code;
      }
      if (exit->signal != 0 || exit->exit_code != 0) any_failed = true;
      proto::ProcessExited msg{exit->worker_id, exit->exit_code, exit->signal};
      agent->Send(MessageType::kProcessExited, proto::EncodePayload(msg)).IgnoreError();
    }
    if (coordinator.pid() == 0 && failed_restarts < 3) {
      // The restart: the same state directory, address and keys; the journal gives the job back.
      auto restarted = coordinator.Start();
      if (restarted.ok()) {
        failed_restarts = 0;
        LOG(INFO) << "coordinator restarted (pid " << coordinator.pid() << ") at "
                  << restarted->address;
        auto again = agent->Call<proto::Ack>(MessageType::kAgentRegister, registration,
                                             milliseconds(5000));
        if (!again.ok()) LOG(WARNING) << "registering again after the restart: " << again.status();
      } else if (++failed_restarts >= 3) {
        LOG(ERROR) << "cannot restart the coordinator: " << restarted.status()
                   << "; stopping the workers";
        group.SignalAll(SIGTERM);
        if (!shutdown_code) shutdown_code = 1;
        shutdown_deadline = std::min(shutdown_deadline,
                                     std::chrono::steady_clock::now() + std::chrono::seconds(5));
      } else {
        LOG(WARNING) << "restarting the coordinator failed: " << restarted.status()
                     << "; trying again";
      }
    } else if (std::chrono::steady_clock::now() >= next_registration) {
      agent->Send(MessageType::kAgentRegister, proto::EncodePayload(registration)).IgnoreError();
      next_registration = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    }
    while (auto push = agent->PollPush(milliseconds(0))) {
      if (push->type == MessageType::kSpawnRequest) {
        auto req = proto::DecodePayload<proto::SpawnRequest>(push->payload);
        if (!req.ok()) continue;
        for (const auto& id : req->worker_ids) spawn(id);
      } else if (push->type == MessageType::kShutdown) {
        auto req = proto::DecodePayload<proto::Shutdown>(push->payload);
        int code = req.ok() ? req->exit_code : 1;
        LOG(INFO) << "job over (" << (req.ok() ? req->reason : "?") << "), exit code " << code;
        if (!shutdown_code) shutdown_code = code;
        shutdown_deadline = std::min(shutdown_deadline, std::chrono::steady_clock::now() +
                                                            std::chrono::seconds(10));
      }
    }
    if (group.live() == 0) {
      if (!shutdown_code) {
        // Every worker is gone and the coordinator did not say the job is over: ask it once more
        // (again, while it is being restarted).
        if (coordinator.pid() == 0 && failed_restarts < 3) continue;
        auto st = agent->Call<proto::StatusReply>(MessageType::kStatusRequest,
                                                  proto::StatusRequest{}, milliseconds(2000));
        if (!st.ok() && coordinator.pid() == 0 && failed_restarts < 3) continue;
        shutdown_code = st.ok() && st->status.state == proto::JobState::kFinished ? 0 : 1;
      }
      break;
    }
    if (std::chrono::steady_clock::now() > shutdown_deadline) {
      LOG(WARNING) << group.live() << " workers still running at shutdown; killing them";
      group.SignalAll(SIGKILL);
      shutdown_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  // Keep the final status beside coordinator.json for reports.
  auto st = agent->Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                            milliseconds(2000));
  if (st.ok()) {
    WriteFileAtomically(state_dir + "/status.json", proto::StatusJson(st->status) + "\n", 0600)
        .IgnoreError();
  }
  agent->Close();
  coordinator.Stop(milliseconds(5000));
  int code = shutdown_code.value_or(any_failed ? 1 : 0);
  LOG(INFO) << "exiting with " << code;
  return code;
}

int RunCoordinator(const CoordinatorOptions& flags) {
  logging::SetTag("coordinator");
  coordinator::EmbeddedOptions o;
  o.state_dir = flags.state_dir;
  o.job = flags.job;
  o.bind = flags.bind;
  o.initial_workers = flags.workers;
  o.max_workers = std::max(flags.workers, flags.max_workers);
  o.resume_from = flags.resume;
  // --restart: take back the job journaled in the state directory (docs/journal.md).
  o.restart = flags.restart;
  auto embedded = coordinator::StartEmbeddedCoordinator(o);
  if (!embedded.ok()) {
    std::fprintf(stderr, "elastra coordinator: %s\n", embedded.status().ToString().c_str());
    return 1;
  }
  const nlohmann::json ready = {{"address", embedded->info.address},
                                {"state_dir", flags.state_dir}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (g_stop_signal == 0) std::this_thread::sleep_for(milliseconds(50));
  embedded->server->Stop();
  return 0;
}

}  // namespace

void AddRunCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app->add_subcommand(
      "run", "Start a job on this machine: a coordinator, N workers, and supervise them");
  SetUsage(run, {"elastra run --nproc N [--state-dir DIR] [--max-workers M] [--job NAME] "
                 "[--resume CKPT_ROOT] [--gpus N|auto] -- PROGRAM ARGS..."});
  AddIntFlag(run, "--nproc", &o->nproc, 1, 4096, "N", "Workers to start")->required();
  run->add_option("--state-dir", o->state_dir,
                  "Keys, coordinator.json, journal and status.json of the job")
      ->type_name("DIR")
      ->capture_default_str();
  AddIntFlag(run, "--max-workers", &o->max_workers, 1, 4096, "M",
             "Most workers a resize may ask for (at least --nproc)")
      ->capture_default_str();
  run->add_option("--job", o->job, "The job's name")->type_name("NAME")->capture_default_str();
  run->add_option("--resume", o->resume,
                  "Start from the newest committed checkpoint under this root")
      ->type_name("CKPT_ROOT");
  run->add_option_function<std::string>(
         "--gpus",
         [o](const std::string& text) {
           if (text == "auto") {
             o->gpus_auto = true;
           } else {
             o->gpus = ParseIntFlag("--gpus", text, 1, 4096);
           }
         },
         "Give each worker a GPU (ELASTRA_DEVICE) among N, or every CUDA device with auto")
      ->type_name("N|auto");
  // After --, every argument is the program's, flags included.
  run->add_option("PROGRAM", o->program, "The worker program and its arguments, after --")
      ->type_name("");
  run->callback([o, exit_code] { *exit_code = RunJob(*o); });
}

void AddCoordinatorCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<CoordinatorOptions>();
  CLI::App* coordinator = app->add_subcommand(
      "coordinator", "Run only the coordinator, for workers started elsewhere");
  SetUsage(coordinator, {"elastra coordinator --state-dir DIR --workers N "
                         "[--bind tcp://127.0.0.1:0] [--max-workers M] [--job NAME]",
                         "elastra coordinator --state-dir DIR --restart"});
  coordinator->add_option("--state-dir", o->state_dir, "Where the job's keys and journal live")
      ->type_name("DIR")
      ->capture_default_str();
  AddIntFlag(coordinator, "--workers", &o->workers, 1, 4096, "N", "Workers the job starts with")
      ->capture_default_str();
  AddIntFlag(coordinator, "--max-workers", &o->max_workers, 1, 4096, "M",
             "Most workers a resize may ask for")
      ->capture_default_str();
  coordinator->add_option("--bind", o->bind, "Address to listen on")
      ->type_name("ADDRESS")
      ->capture_default_str();
  coordinator->add_option("--job", o->job, "The job's name")
      ->type_name("NAME")
      ->capture_default_str();
  coordinator->add_option("--resume", o->resume,
                          "Start from the newest committed checkpoint under this root")
      ->type_name("CKPT_ROOT");
  coordinator->add_flag("--restart", o->restart,
                        "Take back the job journaled in --state-dir after its coordinator died");
  coordinator->callback([o, exit_code] { *exit_code = RunCoordinator(*o); });
}

}  // namespace elastra::launch
