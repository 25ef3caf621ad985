// elastra run: the local launcher/agent. Starts an embedded coordinator on loopback (keys in the
// state directory), spawns and supervises the workers, reports their exits to the coordinator at
// once, starts more when a resize asks, and exits with the job's status.
// elastra coordinator: the same coordinator without an agent, for workers started elsewhere.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/control_client.h"
#include "common/keys.h"
#include "common/logging.h"
#include "coordinator/embedded.h"
#include "coordinator/server.h"
#include "launch/commands.h"
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

using Embedded = coordinator::EmbeddedCoordinator;

// Makes the state directory and the job's keys, starts the coordinator, writes coordinator.json.
StatusOr<Embedded> StartEmbedded(const std::string& state_dir, const std::string& job,
                                 const std::string& bind, int initial_workers, int max_workers,
                                 const std::string& resume_from = "") {
  coordinator::EmbeddedOptions o;
  o.resume_from = resume_from;
  o.state_dir = state_dir;
  o.job = job;
  o.bind = bind;
  o.initial_workers = initial_workers;
  o.max_workers = max_workers;
  return coordinator::StartEmbeddedCoordinator(o);
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

}  // namespace

int RunCommand(const Args& args) {
  FlagParser flags("run", args);
  if (!flags.Parse({"nproc", "state-dir", "max-workers", "job", "resume"}, {})) return 2;
  long long nproc = 0, max_workers = 64;
  if (!flags.Has("nproc")) {
    std::fprintf(stderr, "elastra run: --nproc N is required\n");
    return 2;
  }
  if (!flags.GetInt("nproc", 1, 4096, &nproc)) return 2;
  if (!flags.GetInt("max-workers", 1, 4096, &max_workers)) return 2;
  if (max_workers < nproc) max_workers = nproc;
  if (flags.rest().empty()) {
    std::fprintf(stderr, "elastra run: no program given; usage: elastra run --nproc N -- PROGRAM\n");
    return 2;
  }
  std::string state_dir = flags.Get("state-dir", ".elastra");
  std::string job = flags.Get("job", "elastra");
  logging::SetTag("agent");

  auto embedded = StartEmbedded(state_dir, job, "tcp://127.0.0.1:0", static_cast<int>(nproc),
                                static_cast<int>(max_workers), flags.Get("resume"));
  if (!embedded.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", embedded.status().ToString().c_str());
    return 1;
  }
  const ConnectionInfo& info = embedded->info;
  LOG(INFO) << "coordinator for job '" << job << "' at " << info.address << "; state in "
            << state_dir;

  ControlClientOptions co;
  co.address = info.address;
  co.server_public = info.server_public;
  co.client_keys = info.admin;
  co.job = job;
  co.sender = "agent-" + HostName();
  auto agent_or = ControlClient::Connect(co);
  if (!agent_or.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", agent_or.status().ToString().c_str());
    return 1;
  }
  auto agent = std::move(agent_or).value();
  auto reg = agent->Call<proto::Ack>(MessageType::kAgentRegister,
                                     proto::AgentRegister{HostName(),
                                                          static_cast<int32_t>(max_workers)},
                                     milliseconds(5000));
  if (!reg.ok()) {
    std::fprintf(stderr, "elastra run: registering the agent: %s\n",
                 reg.status().ToString().c_str());
    return 1;
  }

  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);

  ProcessGroup group;
  auto spawn = [&](const std::string& id) {
    auto pid = group.Spawn(id, flags.rest(), WorkerEnv(info, id, state_dir));
    if (!pid.ok()) {
      LOG(ERROR) << "cannot start worker " << id << ": " << pid.status();
      proto::ProcessExited exited{id, 127, 0};
      agent->Send(MessageType::kProcessExited, proto::EncodePayload(exited)).IgnoreError();
      return;
    }
    LOG(INFO) << "started worker " << id << " as pid " << *pid;
  };
  for (long long i = 0; i < nproc; ++i) spawn("w" + std::to_string(i));

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
        // Every worker is gone and the coordinator did not say the job is over: ask it once more.
        auto st = agent->Call<proto::StatusReply>(MessageType::kStatusRequest,
                                                  proto::StatusRequest{}, milliseconds(2000));
        std::string state;
        if (st.ok()) {
          auto j = nlohmann::json::parse(st->json, nullptr, false);
          if (!j.is_discarded()) state = j.value("state", std::string());
        }
        shutdown_code = (state == "finished") ? 0 : 1;
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
  if (st.ok()) WriteFileAtomically(state_dir + "/status.json", st->json + "\n", 0600).IgnoreError();
  agent->Close();
  embedded->server->Stop();
  int code = shutdown_code.value_or(any_failed ? 1 : 0);
  LOG(INFO) << "exiting with " << code;
  return code;
}

int CoordinatorCommand(const Args& args) {
  FlagParser flags("coordinator", args);
  if (!flags.Parse({"state-dir", "workers", "max-workers", "bind", "job"}, {})) return 2;
  long long workers = 1, max_workers = 64;
  if (!flags.GetInt("workers", 1, 4096, &workers)) return 2;
  if (!flags.GetInt("max-workers", 1, 4096, &max_workers)) return 2;
  std::string state_dir = flags.Get("state-dir", ".elastra");
  logging::SetTag("coordinator");
  auto embedded = StartEmbedded(state_dir, flags.Get("job", "elastra"),
                                flags.Get("bind", "tcp://127.0.0.1:0"), static_cast<int>(workers),
                                static_cast<int>(std::max(workers, max_workers)));
  if (!embedded.ok()) {
    std::fprintf(stderr, "elastra coordinator: %s\n", embedded.status().ToString().c_str());
    return 1;
  }
  std::printf("{\"address\":\"%s\",\"state_dir\":\"%s\"}\n", embedded->info.address.c_str(),
              state_dir.c_str());
  std::fflush(stdout);
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  while (g_stop_signal == 0) std::this_thread::sleep_for(milliseconds(50));
  embedded->server->Stop();
  return 0;
}

}  // namespace elastra::launch
