// elastra resize | drain | status | keygen: the admin side, what an external scheduler calls.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "protocol/control_client.h"
#include "protocol/keys.h"
#include "protocol/status_json.h"
#include "launch/cli.h"
#include "launch/admin_connect.h"
#include "launch/commands.h"
#include "launch/status_table.h"

namespace elastra::launch {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

constexpr char kDefaultStateDir[] = ".elastra";

// How long a resize or drain waits to connect and for the coordinator's first answer: its
// --timeout, at most a minute (a coordinator busy planning for thousands of workers, or on a
// loaded machine, may take seconds; one that is gone should not hold the command for 10 minutes).
milliseconds FirstAnswerTimeout(milliseconds timeout) {
  return std::min(timeout, milliseconds(std::chrono::minutes(1)));
}

// A --timeout as its messages say it: "2 s", or "300 ms" when not whole seconds.
std::string DurationText(milliseconds t) {
  return t.count() % 1000 == 0 ? std::to_string(t.count() / 1000) + " s"
                               : std::to_string(t.count()) + " ms";
}

// --timeout's value: seconds ("30", "30s") or milliseconds ("300ms"), from 1 ms to a day.
milliseconds ParseTimeout(const std::string& text) {
  std::string_view digits = text;
  int64_t unit_ms = 1000;
  if (digits.size() > 2 && digits.substr(digits.size() - 2) == "ms") {
    digits.remove_suffix(2);
    unit_ms = 1;
  } else if (digits.size() > 1 && digits.back() == 's') {
    digits.remove_suffix(1);
  }
  int64_t n = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  constexpr int64_t kDayMs = 86'400'000;
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || n < 1 ||
      n > kDayMs / unit_ms) {
    throw FlagError("--timeout must be between 1 and 86400 (seconds; 1ms to 86400000ms in "
                    "milliseconds), got '" +
                    text + "'");
  }
  return milliseconds(n * unit_ms);
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

// --url URL --token-file F: talk to the job's HTTP API (docs/http.md) instead of its ZeroMQ
// address, so a scheduler host needs no CURVE keys.
struct HttpFlags {
  std::string url;
  std::string token_file;
};

// The flags the admin commands share (AddAdminFlags): where the job is (--state-dir, --etcd with
// --job, or --url with --token-file) and, for a change (resize, drain), whether and how long to
// wait for it.
struct AdminFlags : AdminTarget {
  AdminFlags() { state_dir = kDefaultStateDir; }
  HttpFlags http;
  bool wait = false;  // resize and drain only
  // --timeout: for a change, the wait for it, and (at most a minute) connecting and the first
  // answer; for status, connecting and the answer. nullopt: the command's default (kChangeTimeout,
  // kStatusTimeout).
  std::optional<milliseconds> timeout;
};

constexpr milliseconds kChangeTimeout = std::chrono::minutes(10);
constexpr milliseconds kStatusTimeout{5000};

struct ResizeOptions : AdminFlags {
  int workers = 0;               // 0: not given (--spares alone)
  std::optional<Layout> layout;  // none: the coordinator chooses
  std::optional<int> spares;     // none: unchanged
};

struct DrainOptions : AdminFlags {
  std::string host;
};

struct StatusOptions : AdminFlags {
  bool json = false;
};

struct KeygenOptions {
  std::string out;  // empty: print the key pair
};

// The outcome of a request answered like a resize (ResizeRequest, DrainRequest): with `wait` and
// an "accepted" first reply, the second reply (done or failed), waited for up to `timeout`. A
// coordinator restarted from its journal (docs/journal.md) finishes the change but no longer knows
// who waits for it: `done_from_status` reads the outcome from the job's status instead. nullopt
// after printing why on stderr (then the command exits 1).
std::optional<proto::ResizeReply> AwaitOutcome(
    const std::string& command, ControlClient& client, const proto::ResizeReply& first, bool wait,
    milliseconds timeout,
    const std::function<std::optional<proto::ResizeReply>()>& done_from_status) {
  if (!wait || first.phase != proto::ResizePhase::kAccepted) return first;
  const uint64_t id = client.last_request_id();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      std::fprintf(stderr, "elastra %s: not done within %s\n", command.c_str(),
                   DurationText(timeout).c_str());
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

// One call to the HTTP API: the status code and the body; nullopt after printing why on stderr
// (no token, no answer).
struct HttpAnswer {
  int status = 0;
  std::string body;
};
std::optional<HttpAnswer> CallHttp(const std::string& command, const HttpFlags& flags,
                                   const std::string& method, const std::string& path,
                                   const std::string& body, milliseconds timeout) {
  std::ifstream in(flags.token_file);
  std::string token;
  std::getline(in, token);
  if (token.empty()) {
    std::fprintf(stderr, "elastra %s: no token in %s\n", command.c_str(), flags.token_file.c_str());
    return std::nullopt;
  }
  httplib::Client client(flags.url);
  const milliseconds connect = std::min(timeout, milliseconds(10000));
  client.set_connection_timeout(connect.count() / 1000, connect.count() % 1000 * 1000);
  client.set_read_timeout(timeout.count() / 1000, timeout.count() % 1000 * 1000);
  const httplib::Headers headers = {{"Authorization", "Bearer " + token}};
  auto res = method == "POST" ? client.Post(path, headers, body, "application/json")
                              : client.Get(path, headers);
  if (!res) {
    std::fprintf(stderr, "elastra %s: no answer from %s: %s\n", command.c_str(), flags.url.c_str(),
                 httplib::to_string(res.error()).c_str());
    return std::nullopt;
  }
  return HttpAnswer{res->status, res->body};
}

// The "error" of an HTTP error answer, or its body.
std::string HttpError(const HttpAnswer& a) {
  nlohmann::json j = nlohmann::json::parse(a.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_string()) {
    return j["error"].get<std::string>() + " (HTTP " + std::to_string(a.status) + ")";
  }
  return "HTTP " + std::to_string(a.status);
}

// elastra resize|drain --url: POST /v1/resize or /v1/drain; prints what the ZeroMQ path prints
// (the API's object without its "id").
int ChangeOverHttp(const std::string& command, const HttpFlags& http, const std::string& path,
                   const nlohmann::json& body, bool wait, milliseconds timeout) {
  auto answer =
      CallHttp(command, http, "POST", path, body.dump(), timeout + std::chrono::seconds(30));
  if (!answer) return 1;
  if (answer->status != 200 && answer->status != 202) {
    std::fprintf(stderr, "elastra %s: refused: %s\n", command.c_str(), HttpError(*answer).c_str());
    return 1;
  }
  nlohmann::json out = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  if (!out.is_object()) {
    std::fprintf(stderr, "elastra %s: the API answered no JSON object\n", command.c_str());
    return 1;
  }
  if (wait && out.value("phase", "") == "accepted") {
    std::fprintf(stderr, "elastra %s: not done within the API's wait (change %s goes on)\n",
                 command.c_str(), out.value("id", "?").c_str());
    return 1;
  }
  out.erase("id");
  std::printf("%s\n", out.dump().c_str());
  return out.value("phase", "") == "failed" ? 1 : 0;
}

int ResizeOverHttp(const ResizeOptions& flags) {
  nlohmann::json body = {{"wait", flags.wait}};
  if (flags.workers > 0) body["workers"] = flags.workers;
  if (flags.spares) body["spares"] = *flags.spares;
  if (flags.layout) {
    body["layout"] = {{"dp", flags.layout->dp}, {"pp", flags.layout->pp}, {"tp", flags.layout->tp}};
  }
  return ChangeOverHttp("resize", flags.http, "/v1/resize", body, flags.wait,
                        flags.timeout.value_or(kChangeTimeout));
}

int ResizeJob(const ResizeOptions& flags) {
  if (flags.workers == 0 && !flags.spares) {
    return UsageError("elastra resize", "--workers or --spares is required");
  }
  if (flags.workers == 0 && flags.layout) {
    return UsageError("elastra resize", "--layout needs --workers");
  }
  if (!flags.http.url.empty()) return ResizeOverHttp(flags);
  proto::ResizeRequest req;
  req.workers = flags.workers;
  req.wait = flags.wait;
  req.spares = flags.spares.value_or(-1);
  if (flags.layout) {
    req.layout = *flags.layout;
    req.has_layout = true;
  }
  const milliseconds timeout = flags.timeout.value_or(kChangeTimeout);
  auto client = ConnectAdmin("resize", flags, FirstAnswerTimeout(timeout));
  if (client == nullptr) return 1;
  auto first =
      client->Call<proto::ResizeReply>(MessageType::kResize, req, FirstAnswerTimeout(timeout));
  if (!first.ok()) {
    std::fprintf(stderr, "elastra resize: refused: %s\n", first.status().message().c_str());
    return 1;
  }
  auto reply = AwaitOutcome("resize", *client, *first, req.wait, timeout,
                            [&] { return DoneFromStatus(*client, first->generation, req); });
  if (!reply) return 1;
  return PrintOutcome(*reply);
}

int DrainHost(const DrainOptions& flags) {
  if (!flags.http.url.empty()) {
    return ChangeOverHttp("drain", flags.http, "/v1/drain",
                          {{"host", flags.host}, {"wait", flags.wait}}, flags.wait,
                          flags.timeout.value_or(kChangeTimeout));
  }
  const proto::DrainRequest req{flags.host, flags.wait};
  const milliseconds timeout = flags.timeout.value_or(kChangeTimeout);
  auto client = ConnectAdmin("drain", flags, FirstAnswerTimeout(timeout));
  if (client == nullptr) return 1;
  auto first =
      client->Call<proto::ResizeReply>(MessageType::kDrain, req, FirstAnswerTimeout(timeout));
  if (!first.ok()) {
    std::fprintf(stderr, "elastra drain: refused: %s\n", first.status().message().c_str());
    return 1;
  }
  auto reply = AwaitOutcome("drain", *client, *first, req.wait, timeout, [&] {
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
// runs, when there is no such file, or with --etcd.
std::optional<nlohmann::json> FinalStatus(const StatusOptions& flags) {
  if (!flags.etcd.empty()) return std::nullopt;  // a job on etcd has no state directory here
  const std::string& state_dir = flags.state_dir;
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

// elastra status --url: GET /v1/job, printed as the ZeroMQ path prints it.
int StatusOverHttp(const StatusOptions& flags) {
  auto answer = CallHttp("status", flags.http, "GET", "/v1/job", "",
                         flags.timeout.value_or(std::chrono::seconds(30)));
  if (!answer) return 1;
  if (answer->status != 200) {
    std::fprintf(stderr, "elastra status: %s\n", HttpError(*answer).c_str());
    return 1;
  }
  nlohmann::json st = nlohmann::json::parse(answer->body, nullptr, /*allow_exceptions=*/false);
  if (!st.is_object()) {
    std::fprintf(stderr, "elastra status: the API answered no JSON object\n");
    return 1;
  }
  if (flags.json) {
    std::printf("%s\n", st.dump().c_str());
  } else {
    PrintStatusTable(st);
  }
  return 0;
}

int ShowStatus(const StatusOptions& flags) {
  if (!flags.http.url.empty()) return StatusOverHttp(flags);
  if (auto final = FinalStatus(flags)) return ShowFinalStatus(flags, *final);
  const milliseconds timeout = flags.timeout.value_or(kStatusTimeout);
  auto client = ConnectAdmin("status", flags, timeout);
  if (client == nullptr) {
    if (auto final = FinalStatus(flags)) return ShowFinalStatus(flags, *final);
    return 1;
  }
  auto reply = client->Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                                timeout);
  if (!reply.ok()) {
    if (auto final = FinalStatus(flags)) return ShowFinalStatus(flags, *final);
    std::fprintf(stderr, "elastra status: %s\n", reply.status().ToString().c_str());
    return 1;
  }
  if (flags.json) {
    std::printf("%s\n", proto::StatusJson(reply->status).c_str());
    return 0;
  }
  PrintStatusTable(nlohmann::json::parse(proto::StatusJson(reply->status)));
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

// What tells one admin command's shared flags apart in its help.
struct AdminFlagsHelp {
  const char* state_dir;         // --state-dir's help
  const char* change = nullptr;  // a change ("resize", "drain"); nullptr: no --wait
  const char* wait = nullptr;    // --wait's help, for a change
};

// Adds the flags every admin command shares to `command`, and the command's own flags through
// `add_own`, in the order its help lists them: --state-dir, the command's own, --wait (a change),
// --etcd and --job (the leader found on etcd instead of --state-dir), --url and --token-file
// (which replace --state-dir's ZeroMQ connection), --timeout.
void AddAdminFlags(CLI::App* command, AdminFlags* out, const AdminFlagsHelp& help,
                   const std::function<void()>& add_own) {
  command->add_option("--state-dir", out->state_dir, help.state_dir)
      ->type_name("DIR")
      ->capture_default_str();
  add_own();
  if (help.change != nullptr) command->add_flag("--wait", out->wait, help.wait);
  CLI::Option* etcd =
      command
          ->add_option("--etcd", out->etcd,
                       "Instead of --state-dir: the etcd cluster (comma-separated URLs) whose "
                       "leader key names the job's coordinator (elastra coordinator --etcd)")
          ->type_name("URLS");
  CLI::Option* job =
      command->add_option("--job", out->job, "With --etcd: the job's name (its --job)")
          ->type_name("NAME");
  etcd->needs(job);
  job->needs(etcd);
  CLI::Option* url =
      command
          ->add_option("--url", out->http.url,
                       "The job's HTTP API (\"http\" of coordinator.json) instead of --state-dir")
          ->type_name("URL");
  CLI::Option* token =
      command
          ->add_option("--token-file", out->http.token_file,
                       "With --url: the file holding the bearer token (admin.token or read.token)")
          ->type_name("FILE");
  url->needs(token);
  token->needs(url);
  url->excludes(etcd);
  const std::string timeout_help =
      help.change == nullptr
          ? std::string(
                "Give up connecting (with --etcd: finding a leader too) or waiting for "
                "the answer after this long (default 5 s; 300ms for milliseconds)")
          : std::string("With --wait: give up waiting after this long (the ") + help.change +
                " goes on; default 600 s; 300ms for milliseconds); connecting and the first "
                "answer wait as long, at most 60 s (with --etcd: finding a leader too)";
  command
      ->add_option_function<std::string>(
          "--timeout", [out](const std::string& text) { out->timeout = ParseTimeout(text); },
          timeout_help)
      ->type_name("SECONDS");
}

}  // namespace

void AddResizeCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<ResizeOptions>();
  CLI::App* resize = app->add_subcommand("resize", "Change a running job's size or layout");
  SetUsage(resize, {"elastra resize --state-dir DIR --workers N [--layout dp=D,pp=P,tp=T] "
                    "[--spares K] [--wait] [--timeout SECONDS]",
                    "elastra resize --state-dir DIR --spares K",
                    "elastra resize --etcd URLS --job NAME --workers N [--layout dp=D,pp=P,tp=T] "
                    "[--spares K] [--wait] [--timeout SECONDS]",
                    "elastra resize --url URL --token-file FILE --workers N [--layout "
                    "dp=D,pp=P,tp=T] [--spares K] [--wait] [--timeout SECONDS]"});
  AddAdminFlags(resize, o.get(),
                {.state_dir = "The job's state directory (elastra run's)",
                 .change = "resize",
                 .wait = "Block until the job runs at the new size"},
                [&] {
                  AddIntFlag(resize, "--workers", &o->workers, 1, 1 << 20, "N",
                             "Workers after the change (required unless --spares is given)");
                  AddLayoutFlag(resize, "--layout", &o->layout,
                                "The exact layout (D*P*T = N); without it the job keeps pp and tp "
                                "when they divide N");
                  AddIntFlag(resize, "--spares", &o->spares, 0, kMaxJobWorkers, "K",
                             "Standby workers to keep beyond the layout from now on (alone: "
                             "only they change, at once)");
                });
  resize->callback([o, exit_code] { *exit_code = ResizeJob(*o); });
}

void AddDrainCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<DrainOptions>();
  CLI::App* drain =
      app->add_subcommand("drain", "Move a running job off one host (its agent then exits 0)");
  SetUsage(drain, {"elastra drain --state-dir DIR --host HOST [--wait] [--timeout SECONDS]",
                   "elastra drain --etcd URLS --job NAME --host HOST [--wait] [--timeout SECONDS]",
                   "elastra drain --url URL --token-file FILE --host HOST [--wait] "
                   "[--timeout SECONDS]"});
  AddAdminFlags(drain, o.get(),
                {.state_dir = "The job's state directory (its coordinator's)",
                 .change = "drain",
                 .wait = "Block until the job has left the host"},
                [&] {
                  drain->add_option("--host", o->host, "The host to drain (its agent's --name)")
                      ->type_name("HOST")
                      ->required();
                });
  drain->callback([o, exit_code] { *exit_code = DrainHost(*o); });
}

void AddStatusCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<StatusOptions>();
  CLI::App* status =
      app->add_subcommand("status", "Show a job's state, workers, hosts and history");
  SetUsage(status, {"elastra status --state-dir DIR [--json] [--timeout SECONDS]",
                    "elastra status --etcd URLS --job NAME [--json] [--timeout SECONDS]",
                    "elastra status --url URL --token-file FILE [--json] [--timeout SECONDS]"});
  AddAdminFlags(status, o.get(), {.state_dir = "The job's state directory (elastra run's)"}, [&] {
    status->add_flag("--json", o->json,
                     "One JSON object: job, state, generation, layout, step, workers, history, "
                     "agents, hosts, target_workers, spares_target, counters");
  });
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
