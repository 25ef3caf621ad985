#include "launch/host_agent.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <thread>

#include "protocol/codec.h"
#include "common/logging.h"
#include "elastra/device_buffer.h"

namespace elastra::launch {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

// How long a refused drain waits before asking again.
constexpr milliseconds kDrainRetry{100};

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal = sig; }

bool Ready(const auto& future) {
  return future.valid() && future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
}

}  // namespace

std::map<std::string, std::string> WorkerEnvironment(const HostAgentOptions& options,
                                                     const std::string& worker_id, int device) {
  const ConnectionInfo& job = options.job;
  std::map<std::string, std::string> env = {{"ELASTRA_COORDINATOR", job.address},
                                            {"ELASTRA_JOB", job.job},
                                            {"ELASTRA_WORKER_ID", worker_id},
                                            {"ELASTRA_SERVER_KEY", job.server_public},
                                            {"ELASTRA_WORKER_PUBLIC_KEY", job.worker.public_key},
                                            {"ELASTRA_WORKER_SECRET_KEY", job.worker.secret_key}};
  if (!options.worker_state_dir.empty()) env["ELASTRA_STATE_DIR"] = options.worker_state_dir;
  if (options.export_host) {
    env["ELASTRA_HOST"] = options.registration.host;
    env["ELASTRA_BIND_HOST"] = options.registration.address;
  }
  if (device >= 0) env["ELASTRA_DEVICE"] = std::to_string(device);
  return env;
}

std::chrono::milliseconds AgentHeartbeatInterval() {
  const char* text = std::getenv("ELASTRA_HEARTBEAT_MS");
  int ms = 200;
  if (text != nullptr && *text != '\0') {
    const char* end = text + std::char_traits<char>::length(text);
    int v = 0;
    auto [ptr, ec] = std::from_chars(text, end, v);
    if (ec == std::errc() && ptr == end && v > 0) {
      ms = v;
    } else {
      LOG(WARNING) << "ELASTRA_HEARTBEAT_MS='" << text << "' is not a positive integer; using 200";
    }
  }
  return milliseconds(ms);
}

int GpuCount(const GpusFlag& flag) {
  if (flag.all) return CudaDeviceCount();
  return flag.count.value_or(0);
}

HostAgent::HostAgent(HostAgentOptions options, std::unique_ptr<ControlClient> client,
                     CoordinatorWatch* watch)
    : options_(std::move(options)),
      client_(std::move(client)),
      watch_(watch),
      label_("host " + options_.registration.host) {
  if (options_.registration.gpus > 0) gpus_.emplace(options_.registration.gpus);
  last_heard_ = Clock::now();
  next_registration_ = Clock::now() + options_.register_period;
}

HostAgent::~HostAgent() {
  // Closing first ends the requests still in flight on other threads (they return kUnavailable),
  // so that the futures below do not wait out their timeouts.
  client_->Close();
}

Status HostAgent::Register() {
  auto ack = client_->Call<proto::Ack>(MessageType::kAgentRegister, options_.registration,
                                       options_.request_timeout);
  if (ack.ok()) last_heard_ = Clock::now();
  return ack.status();
}

int HostAgent::Run() {
  g_signal = 0;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  for (const std::string& id : options_.initial_workers) Spawn(id);
  for (;;) {
    HandleSignal();
    ReapWorkers();
    WatchCoordinator();
    KeepRegistered();
    HandlePushes();
    FollowDrain();
    if (std::optional<int> code = Outcome()) return *code;
    EnforceGraces();
    std::this_thread::sleep_for(milliseconds(10));
  }
}

void HostAgent::HandleSignal() {
  const int sig = g_signal.exchange(0);
  if (sig == 0) return;
  if (options_.on_signal == HostAgentOptions::OnSignal::kStopWorkers) {
    LOG(WARNING) << "signal " << sig << ": stopping the workers";
    exit_code_ = 128 + sig;
    StopWorkers(128 + sig);
    return;
  }
  if (sig == SIGTERM && options_.workers_ignore_sigterm && (draining_ || exit_code_)) {
    LOG(INFO) << "signal " << sig << " again: the drain of " << label_
              << " goes on (SIGINT stops the workers at once)";
    return;
  }
  if (!draining_ && !exit_code_) {
    LOG(WARNING) << "signal " << sig << ": asking the coordinator to drain " << label_
                 << (options_.workers_ignore_sigterm
                         ? " (SIGINT stops the workers at once)"
                         : " (a second signal stops the workers at once)");
    StartDrain();
    return;
  }
  LOG(WARNING) << "signal " << sig << ": stopping the workers now";
  if (!exit_code_) exit_code_ = 128 + sig;
  StopWorkers(128 + sig);
}

void HostAgent::ReapWorkers() {
  while (std::optional<ExitInfo> exit = workers_.Reap()) {
    if (gpus_) gpus_->Release(exit->worker_id);
    if (exit->signal != 0) {
      LOG(WARNING) << "worker " << exit->worker_id << " (pid " << exit->pid << ") killed by signal "
                   << exit->signal;
    } else {
      LOG(INFO) << "worker " << exit->worker_id << " (pid " << exit->pid << ") exited with "
                << exit->exit_code;
    }
    ReportExit(exit->worker_id, exit->exit_code, exit->signal);
  }
  // Starts that waited for a slot, in the order they were asked for (Spawn queues one again while
  // the slots are full; once the end is decided it refuses and reports them).
  while (!waiting_.empty() && (workers_.live() == 0 || static_cast<int>(workers_.live()) <
                                                           options_.registration.max_workers)) {
    const std::string id = waiting_.front();
    waiting_.pop_front();
    Spawn(id);
  }
}

void HostAgent::WatchCoordinator() {
  if (watch_ == nullptr) return;
  switch (watch_->Supervise()) {
    case CoordinatorWatch::Event::kNone:
      return;
    case CoordinatorWatch::Event::kRestarted: {
      // At once rather than at the next period: the restarted coordinator places workers only
      // on agents it knows.
      Status again = Register();
      if (!again.ok()) LOG(WARNING) << "registering again after the restart: " << again;
      return;
    }
    case CoordinatorWatch::Event::kGone:
      StopWorkers(kAgentExitFailed);
      return;
  }
}

void HostAgent::KeepRegistered() {
  const auto now = Clock::now();
  if (Ready(registering_)) {
    const Status s = registering_.get();
    if (s.ok()) {
      last_heard_ = now;
    } else if (s.code() == StatusCode::kTimedOut || s.code() == StatusCode::kUnavailable) {
      LOG_EVERY_MS(WARNING, 10000) << "no answer from the coordinator at " << options_.job.address
                                   << " to the registration of " << label_ << ": " << s;
    } else {
      last_heard_ = now;  // it answered: it is there, and refuses
      LOG_EVERY_MS(WARNING, 30000)
          << "the coordinator refused the registration of " << label_ << ": " << s;
    }
    next_registration_ = now + options_.register_period;
  }
  // Registering again is harmless; it makes a restarted coordinator know this host again within
  // a period. Not once the end is decided: the coordinator is done with this host.
  if (!registering_.valid() && !exit_code_ && now >= next_registration_) {
    ControlClient* client = client_.get();
    registering_ = std::async(std::launch::async, [client, registration = options_.registration,
                                                   timeout = options_.request_timeout] {
      return client->Call<proto::Ack>(MessageType::kAgentRegister, registration, timeout).status();
    });
  }
  if (options_.coordinator_timeout.count() > 0 && !exit_code_ &&
      now - last_heard_ > options_.coordinator_timeout) {
    LOG(ERROR) << "no answer from the coordinator at " << options_.job.address << " for "
               << options_.coordinator_timeout.count() / 1000 << " s; stopping the workers";
    StopWorkers(kAgentExitCannotJoin);
  }
}

void HostAgent::HandlePushes() {
  while (std::optional<proto::Envelope> push = client_->PollPush(milliseconds(0))) {
    last_heard_ = Clock::now();
    if (push->type == MessageType::kSpawnRequest) {
      auto req = proto::DecodePayload<proto::SpawnRequest>(push->payload);
      if (!req.ok()) {
        LOG(WARNING) << "dropping an unreadable spawn request: " << req.status();
        continue;
      }
      for (const std::string& id : req->worker_ids) Spawn(id);
    } else if (push->type == MessageType::kShutdown) {
      auto req = proto::DecodePayload<proto::Shutdown>(push->payload);
      const int code = req.ok() ? req->exit_code : kAgentExitFailed;
      LOG(INFO) << "job over for " << label_ << " (" << (req.ok() ? req->reason : "?")
                << "), exit code " << code;
      if (code == 0) {
        Finish(0);
      } else {
        StopWorkers(code);
      }
    }
  }
}

void HostAgent::FollowDrain() {
  if (!Ready(drain_)) return;
  StatusOr<proto::ResizeReply> outcome = drain_.get();
  if (outcome.ok() && outcome->phase == proto::ResizePhase::kDone) {
    LOG(INFO) << "drained: the job left " << label_ << " (generation " << outcome->generation
              << ")";
    Finish(kAgentExitOk);
    return;
  }
  const std::string why = !outcome.ok()              ? outcome.status().ToString()
                          : outcome->message.empty() ? std::string("failed")
                                                     : outcome->message;
  LOG(ERROR) << "the drain of " << label_ << " failed: " << why << "; stopping the workers";
  StopWorkers(kAgentExitFailed);
}

void HostAgent::EnforceGraces() {
  if (workers_.live() == 0) return;
  const auto now = Clock::now();
  if (now >= term_at_) {
    LOG(WARNING) << workers_.live() << " workers still running at shutdown; stopping them";
    workers_.SignalAll(StopSignal());
    term_at_ = Clock::time_point::max();
    kill_at_ = std::min(kill_at_, now + options_.kill_grace);
  }
  if (now >= kill_at_) {
    LOG(WARNING) << workers_.live() << " workers still running at shutdown; killing them";
    workers_.SignalAll(SIGKILL);
    kill_at_ = Clock::time_point::max();
  }
}

std::optional<int> HostAgent::Outcome() {
  if (workers_.live() > 0) return std::nullopt;
  if (exit_code_) return exit_code_;
  if (!options_.exit_when_idle) return std::nullopt;
  // Every worker is gone and the coordinator did not say the job is over: ask it once more (again
  // later, while it is being restarted).
  if (watch_ != nullptr && watch_->restarting()) return std::nullopt;
  proto::StatusRequest brief;
  brief.brief = true;  // only the job's state
  auto st = client_->Call<proto::StatusReply>(MessageType::kStatusRequest, brief,
                                              milliseconds(2000));
  if (!st.ok() && watch_ != nullptr && watch_->restarting()) return std::nullopt;
  if (st.ok()) return st->status.state == proto::JobState::kFinished ? 0 : 1;
  // No answer: the coordinator may have ended the job and gone while its Shutdown was still on
  // the way (under ThreadSanitizer it came 2 s late, after the workers had exited). What came
  // meanwhile decides.
  HandlePushes();
  if (workers_.live() > 0) return std::nullopt;
  if (exit_code_) return exit_code_;
  return 1;
}

void HostAgent::Spawn(const std::string& id) {
  if (exit_code_ || draining_) {
    LOG(WARNING) << "not starting worker " << id << ": "
                 << (exit_code_ ? "this agent is stopping" : label_ + " is draining");
    ReportExit(id, 1, 0);
    return;
  }
  for (const auto& [pid, live_id] : workers_.children()) {
    if (live_id == id) {
      LOG(WARNING) << "worker " << id << " runs already (pid " << pid << "); not starting another";
      return;
    }
  }
  if (std::find(waiting_.begin(), waiting_.end(), id) != waiting_.end()) return;
  if (workers_.live() > 0 &&
      static_cast<int>(workers_.live()) >= options_.registration.max_workers) {
    // The coordinator counts only the workers it knows: those it declared lost (a partition that
    // healed) may still be stopping here. Starting beyond the slots would share their GPUs.
    LOG(WARNING) << "worker " << id << " waits for a free slot: " << workers_.live()
                 << " workers still run on " << label_ << " (" << options_.registration.max_workers
                 << " slots)";
    waiting_.push_back(id);
    return;
  }
  const int device = gpus_ ? gpus_->Acquire(id) : -1;
  auto pid = workers_.Spawn(id, options_.program, WorkerEnvironment(options_, id, device),
                            options_.own_process_groups, options_.workers_ignore_sigterm);
  if (!pid.ok()) {
    if (gpus_) gpus_->Release(id);
    LOG(ERROR) << "cannot start worker " << id << ": " << pid.status();
    ReportExit(id, 127, 0);
    return;
  }
  LOG(INFO) << "started worker " << id << " as pid " << *pid
            << (device >= 0 ? " on GPU " + std::to_string(device) : std::string());
}

void HostAgent::ReportExit(const std::string& worker_id, int exit_code, int signal) {
  const proto::ProcessExited msg{worker_id, exit_code, signal};
  client_->Send(MessageType::kProcessExited, proto::EncodePayload(msg)).IgnoreError();
}

void HostAgent::StartDrain() {
  draining_ = true;
  const proto::DrainRequest req{options_.registration.host, /*wait=*/true};
  ControlClient* client = client_.get();
  drain_ = std::async(
      std::launch::async,
      [client, req, first_timeout = options_.request_timeout,
       timeout = options_.drain_timeout]() -> StatusOr<proto::ResizeReply> {
        // A drain is refused while another change is in flight, e.g. the drain of another host
        // that the same scheduler signal reached: ask again until it is taken or the time is up.
        const auto deadline = Clock::now() + timeout;
        auto first = client->Call<proto::ResizeReply>(MessageType::kDrain, req, first_timeout);
        while (!first.ok() && first.status().code() == StatusCode::kBusy &&
               Clock::now() + kDrainRetry < deadline) {
          LOG_EVERY_MS(INFO, 2000) << "the drain waits: " << first.status().message();
          std::this_thread::sleep_for(kDrainRetry);
          first = client->Call<proto::ResizeReply>(MessageType::kDrain, req, first_timeout);
        }
        if (!first.ok() || first->phase != proto::ResizePhase::kAccepted) return first;
        auto second = client->AwaitReply(client->last_request_id(), timeout);
        if (!second.ok()) {
          if (second.status().code() != StatusCode::kTimedOut) return second.status();
          return TimedOutError("not done within " + std::to_string(timeout.count() / 1000) + " s");
        }
        return proto::DecodePayload<proto::ResizeReply>(second->payload);
      });
}

void HostAgent::Finish(int code) {
  if (!exit_code_) exit_code_ = code;
  term_at_ = std::min(term_at_, Clock::now() + options_.finish_grace);
}

void HostAgent::StopWorkers(int code) {
  if (!exit_code_) exit_code_ = code;
  if (workers_.live() == 0) return;
  workers_.SignalAll(StopSignal());
  term_at_ = Clock::time_point::max();
  kill_at_ = std::min(kill_at_, Clock::now() + options_.kill_grace);
}

int HostAgent::StopSignal() const { return options_.workers_ignore_sigterm ? SIGINT : SIGTERM; }

}  // namespace elastra::launch
