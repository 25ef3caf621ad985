// elastra resize | drain | status | keygen: the admin side, what an external scheduler calls.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/control_client.h"
#include "common/keys.h"
#include "common/status_json.h"
#include "launch/cli.h"
#include "launch/commands.h"

namespace elastra::launch {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

constexpr char kDefaultStateDir[] = ".elastra";

// Connects with the admin credentials from DIR/coordinator.json; prints why on failure.
std::unique_ptr<ControlClient> ConnectAdmin(const std::string& command,
                                            const std::string& state_dir) {
  auto info = ReadConnectionInfo(state_dir + "/coordinator.json");
  if (!info.ok()) {
    std::fprintf(stderr, "elastra %s: no job found in %s: %s\n", command.c_str(), state_dir.c_str(),
                 info.status().ToString().c_str());
    return nullptr;
  }
  ControlClientOptions o;
  o.address = info->address;
  o.server_public = info->server_public;
  o.client_keys = info->admin;
  o.job = info->job;
  o.sender = "admin-" + std::to_string(getpid());
  o.connect_timeout = milliseconds(5000);
  auto client = ControlClient::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "elastra %s: %s\n", command.c_str(), client.status().ToString().c_str());
    return nullptr;
  }
  return std::move(client).value();
}

// The "done" reply of a resize read back from the job's status: no resize pending, and a
// generation newer than `before` with the requested workers (and layout) in the history.
// nullopt while that is not so, or when the status cannot be read.
std::optional<proto::ResizeReply> DoneFromStatus(ControlClient& client, uint64_t before,
                                                 const proto::ResizeRequest& req) {
  auto st = client.Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                            milliseconds(2000));
  if (!st.ok() || st->status.resize_pending) return std::nullopt;
  for (const proto::GenerationRecord& h : st->status.history) {
    if (h.generation <= before || static_cast<int>(h.workers.size()) != req.workers) continue;
    if (req.has_layout && !(h.layout == req.layout)) continue;
    proto::ResizeReply r;
    r.phase = proto::ResizePhase::kDone;
    r.generation = h.generation;
    r.workers = req.workers;
    r.layout = h.layout;
    r.downtime_ms = h.downtime_ms;
    r.agreement_ms = h.agreement_ms;
    r.rebuild_ms = h.rebuild_ms;
    r.transfer_ms = h.transfer_ms;
    r.message = "confirmed from the job's status (the coordinator restarted meanwhile)";
    return r;
  }
  return std::nullopt;
}

// The "done" reply of a drain read back from the job's status: no change pending and `host`
// drained, with the timings of the newest drain generation after `before` when there is one.
std::optional<proto::ResizeReply> DrainDoneFromStatus(ControlClient& client, uint64_t before,
                                                      const std::string& host) {
  auto st = client.Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                            milliseconds(2000));
  if (!st.ok() || st->status.resize_pending) return std::nullopt;
  const auto& hosts = st->status.hosts;
  auto it = std::find_if(hosts.begin(), hosts.end(), [&](const proto::HostStatus& h) {
    return h.name == host && h.state == proto::HostState::kDrained;
  });
  if (it == hosts.end()) return std::nullopt;
  proto::ResizeReply r;
  r.phase = proto::ResizePhase::kDone;
  r.generation = st->status.generation;
  r.workers = st->status.layout.world();
  r.layout = st->status.layout;
  for (const proto::GenerationRecord& h : st->status.history) {
    if (h.generation <= before || h.reason != proto::GenerationReason::kDrain) continue;
    r.generation = h.generation;
    r.workers = static_cast<int32_t>(h.workers.size());
    r.layout = h.layout;
    r.downtime_ms = h.downtime_ms;
    r.agreement_ms = h.agreement_ms;
    r.rebuild_ms = h.rebuild_ms;
    r.transfer_ms = h.transfer_ms;
  }
  r.message = "confirmed from the job's status (the coordinator restarted meanwhile)";
  return r;
}

struct ResizeOptions {
  std::string state_dir = kDefaultStateDir;
  int workers = 0;
  std::optional<Layout> layout;  // none: the coordinator chooses
  bool wait = false;
  int timeout_s = 600;
};

struct DrainOptions {
  std::string state_dir = kDefaultStateDir;
  std::string host;
  bool wait = false;
  int timeout_s = 600;
};

struct StatusOptions {
  std::string state_dir = kDefaultStateDir;
  bool json = false;
};

struct KeygenOptions {
  std::string out;  // empty: print the key pair
};

// The outcome of a request answered like a resize (ResizeRequest, DrainRequest): with `wait` and
// an "accepted" first reply, the second reply (done or failed), waited for up to `timeout_s`. A
// coordinator restarted from its journal (docs/journal.md) finishes the change but no longer knows
// who waits for it: `done_from_status` reads the outcome from the job's status instead. nullopt
// after printing why on stderr (then the command exits 1).
std::optional<proto::ResizeReply> AwaitOutcome(
    const std::string& command, ControlClient& client, const proto::ResizeReply& first, bool wait,
    int timeout_s, const std::function<std::optional<proto::ResizeReply>()>& done_from_status) {
  if (!wait || first.phase != proto::ResizePhase::kAccepted) return first;
  const uint64_t id = client.last_request_id();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr, "elastra %s: not done within %d s\n", command.c_str(), timeout_s);
      return std::nullopt;
    }
    auto second = client.AwaitReply(id, std::min(left, milliseconds(1000)));
    if (second.ok()) {
      auto decoded = proto::DecodePayload<proto::ResizeReply>(second->payload);
      if (!decoded.ok()) {
        std::fprintf(stderr, "elastra %s: %s\n", command.c_str(),
                     decoded.status().ToString().c_str());
        return std::nullopt;
      }
      return *decoded;
    }
    if (second.status().code() != StatusCode::kTimedOut) {
      std::fprintf(stderr, "elastra %s: %s\n", command.c_str(), second.status().ToString().c_str());
      return std::nullopt;
    }
    if (auto done = done_from_status()) {
      // The real reply, when it is on its way, has the full timings.
      auto late = client.AwaitReply(id, milliseconds(300));
      auto decoded = late.ok() ? proto::DecodePayload<proto::ResizeReply>(late->payload)
                               : StatusOr<proto::ResizeReply>(late.status());
      return decoded.ok() ? *decoded : *done;
    }
  }
}

// Prints a resize-like reply as one JSON line (with "host" for a drain); its exit code.
int PrintOutcome(const proto::ResizeReply& reply, const std::string& host = "") {
  std::printf("%s\n", proto::ResizeReplyJson(reply, host).c_str());
  return reply.phase == proto::ResizePhase::kFailed ? 1 : 0;
}

int ResizeJob(const ResizeOptions& flags) {
  proto::ResizeRequest req;
  req.workers = flags.workers;
  req.wait = flags.wait;
  if (flags.layout) {
    req.layout = *flags.layout;
    req.has_layout = true;
  }
  auto client = ConnectAdmin("resize", flags.state_dir);
  if (client == nullptr) return 1;
  auto first = client->Call<proto::ResizeReply>(MessageType::kResize, req, milliseconds(10000));
  if (!first.ok()) {
    std::fprintf(stderr, "elastra resize: refused: %s\n", first.status().message().c_str());
    return 1;
  }
  auto reply = AwaitOutcome("resize", *client, *first, req.wait, flags.timeout_s,
                            [&] { return DoneFromStatus(*client, first->generation, req); });
  if (!reply) return 1;
  return PrintOutcome(*reply);
}

int DrainHost(const DrainOptions& flags) {
  const proto::DrainRequest req{flags.host, flags.wait};
  auto client = ConnectAdmin("drain", flags.state_dir);
  if (client == nullptr) return 1;
  auto first = client->Call<proto::ResizeReply>(MessageType::kDrain, req, milliseconds(10000));
  if (!first.ok()) {
    std::fprintf(stderr, "elastra drain: refused: %s\n", first.status().message().c_str());
    return 1;
  }
  auto reply = AwaitOutcome("drain", *client, *first, req.wait, flags.timeout_s, [&] {
    return DrainDoneFromStatus(*client, first->generation, flags.host);
  });
  if (!reply) return 1;
  return PrintOutcome(*reply, flags.host);
}

// Whether `pid` is a process that runs: it exists and is no zombie (one that exited and that its
// parent has not reaped yet).
bool ProcessRuns(pid_t pid) {
  if (kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');  // the name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= text.size() || text[paren + 2] != 'Z';
}

// The final status of a job whose coordinator has exited (it writes <state_dir>/status.json when
// the job ends, then exits): the file's JSON; nullopt while the coordinator of coordinator.json
// runs, or when there is no such file.
std::optional<nlohmann::json> FinalStatus(const std::string& state_dir) {
  auto info = ReadConnectionInfo(state_dir + "/coordinator.json");
  if (info.ok() && info->pid > 0 && ProcessRuns(static_cast<pid_t>(info->pid))) return std::nullopt;
  std::ifstream in(state_dir + "/status.json");
  if (!in) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

int ShowFinalStatus(const StatusOptions& flags, const nlohmann::json& j) {
  if (flags.json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf(
      "job %s %s at generation %llu, step %lld (the coordinator has exited; the final "
      "status is in %s/status.json)\n",
      j.value("job", std::string("?")).c_str(), j.value("state", std::string("?")).c_str(),
      static_cast<unsigned long long>(j.value("generation", uint64_t{0})),
      static_cast<long long>(j.value("step", int64_t{0})), flags.state_dir.c_str());
  return 0;
}

int ShowStatus(const StatusOptions& flags) {
  if (auto final = FinalStatus(flags.state_dir)) return ShowFinalStatus(flags, *final);
  auto client = ConnectAdmin("status", flags.state_dir);
  if (client == nullptr) {
    if (auto final = FinalStatus(flags.state_dir)) return ShowFinalStatus(flags, *final);
    return 1;
  }
  auto reply = client->Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                                milliseconds(5000));
  if (!reply.ok()) {
    if (auto final = FinalStatus(flags.state_dir)) return ShowFinalStatus(flags, *final);
    std::fprintf(stderr, "elastra status: %s\n", reply.status().ToString().c_str());
    return 1;
  }
  const proto::JobStatus& st = reply->status;
  if (flags.json) {
    std::printf("%s\n", proto::StatusJson(st).c_str());
    return 0;
  }
  // The size now (the committed generation's) and, when the coordinator keeps one, the size the
  // job returns to after failures and drains.
  std::string size = std::to_string(st.generation > 0 ? st.layout.world() : 0);
  if (st.target_workers > 0) size += " (target " + std::to_string(st.target_workers) + ")";
  std::printf("job %s  state %s  generation %llu  layout %s  step %lld  workers %s\n",
              st.job.c_str(), proto::ToString(st.state),
              static_cast<unsigned long long>(st.generation), st.layout.ToString().c_str(),
              static_cast<long long>(st.step), size.c_str());
  std::printf("%-10s %-9s %5s %8s %12s %8s  %s\n", "WORKER", "STATE", "RANK", "STEP", "HEARTBEAT",
              "PID", "HOST");
  for (const proto::WorkerStatus& w : st.workers) {
    std::string hb = std::to_string(w.last_heartbeat_ms_ago) + " ms ago";
    std::printf("%-10s %-9s %5d %8lld %12s %8lld  %s\n", w.id.c_str(), proto::ToString(w.state),
                w.rank, static_cast<long long>(w.step), hb.c_str(), static_cast<long long>(w.pid),
                w.host.c_str());
  }
  if (!st.hosts.empty()) {
    std::printf("%-16s %-24s %5s %4s %7s %-8s %12s\n", "HOST", "ADDRESS", "SLOTS", "GPUS",
                "WORKERS", "STATE", "HEARTBEAT");
    for (const proto::HostStatus& h : st.hosts) {
      const std::string hb =
          h.last_heartbeat_ms_ago < 0 ? "-" : std::to_string(h.last_heartbeat_ms_ago) + " ms ago";
      std::printf("%-16s %-24s %5d %4d %7d %-8s %12s\n", h.name.c_str(), h.address.c_str(), h.slots,
                  h.gpus, h.workers, proto::ToString(h.state), hb.c_str());
    }
  }
  if (!st.history.empty()) {
    std::printf("%-10s %-8s %7s %-16s %11s\n", "GENERATION", "REASON", "WORKERS", "LAYOUT",
                "DOWNTIME");
    for (const proto::GenerationRecord& h : st.history) {
      std::printf("%-10llu %-8s %7zu %-16s %8.1f ms\n",
                  static_cast<unsigned long long>(h.generation), proto::ToString(h.reason),
                  h.workers.size(), h.layout.ToString().c_str(), h.downtime_ms);
    }
  }
  return 0;
}

int Keygen(const KeygenOptions& flags) {
  auto keys = GenerateKeyPair();
  if (!keys.ok()) {
    std::fprintf(stderr, "elastra keygen: %s\n", keys.status().ToString().c_str());
    return 1;
  }
  nlohmann::ordered_json out = {{"public", keys->public_key}};
  if (!flags.out.empty()) {
    Status s = WriteKeyFile(flags.out, *keys);
    if (!s.ok()) {
      std::fprintf(stderr, "elastra keygen: %s\n", s.ToString().c_str());
      return 1;
    }
    out["file"] = flags.out;
  } else {
    out["secret"] = keys->secret_key;
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

void AddResizeCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<ResizeOptions>();
  CLI::App* resize = app->add_subcommand("resize", "Change a running job's size or layout");
  SetUsage(resize, {"elastra resize --state-dir DIR --workers N [--layout dp=D,pp=P,tp=T] "
                    "[--wait] [--timeout SECONDS]"});
  resize->add_option("--state-dir", o->state_dir, "The job's state directory (elastra run's)")
      ->type_name("DIR")
      ->capture_default_str();
  AddIntFlag(resize, "--workers", &o->workers, 1, 1 << 20, "N", "Workers after the change")
      ->required();
  AddLayoutFlag(resize, "--layout", &o->layout,
                "The exact layout (D*P*T = N); without it the job keeps pp and tp when they "
                "divide N");
  resize->add_flag("--wait", o->wait, "Block until the job runs at the new size");
  AddIntFlag(resize, "--timeout", &o->timeout_s, 1, 86400, "SECONDS",
             "With --wait: give up waiting after this long (the resize goes on)")
      ->capture_default_str();
  resize->callback([o, exit_code] { *exit_code = ResizeJob(*o); });
}

void AddDrainCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<DrainOptions>();
  CLI::App* drain =
      app->add_subcommand("drain", "Move a running job off one host (its agent then exits 0)");
  SetUsage(drain, {"elastra drain --state-dir DIR --host HOST [--wait] [--timeout SECONDS]"});
  drain->add_option("--state-dir", o->state_dir, "The job's state directory (its coordinator's)")
      ->type_name("DIR")
      ->capture_default_str();
  drain->add_option("--host", o->host, "The host to drain (its agent's --name)")
      ->type_name("HOST")
      ->required();
  drain->add_flag("--wait", o->wait, "Block until the job has left the host");
  AddIntFlag(drain, "--timeout", &o->timeout_s, 1, 86400, "SECONDS",
             "With --wait: give up waiting after this long (the drain goes on)")
      ->capture_default_str();
  drain->callback([o, exit_code] { *exit_code = DrainHost(*o); });
}

void AddStatusCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<StatusOptions>();
  CLI::App* status =
      app->add_subcommand("status", "Show a job's state, workers, hosts and history");
  SetUsage(status, {"elastra status --state-dir DIR [--json]"});
  status->add_option("--state-dir", o->state_dir, "The job's state directory (elastra run's)")
      ->type_name("DIR")
      ->capture_default_str();
  status->add_flag("--json", o->json,
                   "One JSON object: job, state, generation, layout, step, workers, history, "
                   "agents, hosts, target_workers, counters");
  status->callback([o, exit_code] { *exit_code = ShowStatus(*o); });
}

void AddKeygenCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<KeygenOptions>();
  CLI::App* keygen = app->add_subcommand("keygen", "Make a CURVE key pair");
  SetUsage(keygen, {"elastra keygen [--out FILE]"});
  keygen
      ->add_option("--out", o->out,
                   "Write the pair to FILE (mode 0600) and print only the public key")
      ->type_name("FILE");
  keygen->callback([o, exit_code] { *exit_code = Keygen(*o); });
}

}  // namespace elastra::launch
