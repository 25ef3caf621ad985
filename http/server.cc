#include "http/server.h"

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "protocol/keys.h"
#include "common/logging.h"
#include "protocol/status_json.h"
#include "http/dashboard.h"
#include "http/metrics.h"
#include "http/listener.h"
#include "http/routes.h"

namespace elastra::http {
namespace {

using nlohmann::json;
using proto::MessageType;
using proto::ResizePhase;
using proto::ResizeReply;
using std::chrono::milliseconds;

constexpr char kJson[] = "application/json";
constexpr char kPrometheus[] = "text/plain; version=0.0.4; charset=utf-8";
// The cookie the dashboard's browser keeps the (read) token in.
constexpr char kCookie[] = "elastra_token";

void Reply(httplib::Response& res, int code, const std::string& body, const char* type = kJson) {
  res.status = code;
  res.set_content(body, type);
}

void Error(httplib::Response& res, int code, const std::string& message) {
  Reply(res, code, ErrorBody(message));
}

// The HTTP status for a coordinator's refusal (docs/http.md, "Errors").
int HttpCode(const Status& s) {
  switch (s.code()) {
    case StatusCode::kFailedPrecondition:
    case StatusCode::kBusy:
      return 409;  // another change in flight, the job over or not formed yet
    case StatusCode::kInvalidArgument:
    case StatusCode::kResourceExhausted:
      return 422;  // a size or layout this job cannot take
    case StatusCode::kNotFound:
      return 404;
    case StatusCode::kUnauthenticated:
      return 403;
    case StatusCode::kTimedOut:
    case StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

const char* DefaultMessage(int code) {
  switch (code) {
    case 400:
      return "bad request";
    case 404:
      return "no such endpoint";
    case 413:
      return "request body too large";
    default:
      return "request failed";
  }
}

std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return token;
}

// A resize or drain the API accepted: what it asked and where it stands.
struct Change {
  std::string host;   // a drain's host; empty for a resize
  ResizeReply reply;  // the latest reply (accepted, then done or failed)
  bool final = false;
};

}  // namespace

StatusOr<std::pair<std::string, int>> ParseHttpListen(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return InvalidArgumentError("--http '" + text + "' is not HOST:PORT or :PORT");
  }
  std::string host = text.substr(0, colon);
  const std::string port_text = text.substr(colon + 1);
  int port = -1;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    return InvalidArgumentError("--http '" + text + "': the port must be 0..65535");
  }
  if (host.empty()) host = "127.0.0.1";
  return std::make_pair(host, port);
}

StatusOr<std::string> GenerateToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  unsigned char bytes[32];
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes))) {
    return InternalError("cannot read /dev/urandom for a token");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += kHex[b >> 4];
    token += kHex[b & 15];
  }
  return token;
}

StatusOr<HttpTokens> LoadOrCreateTokens(const std::string& state_dir) {
  const std::string admin_path = state_dir + "/admin.token";
  const std::string read_path = state_dir + "/read.token";
  HttpTokens t{ReadToken(admin_path), ReadToken(read_path)};
  if (!t.admin.empty() && !t.read.empty() && t.admin != t.read) return t;
  ELASTRA_ASSIGN_OR_RETURN(t.admin, GenerateToken());
  ELASTRA_ASSIGN_OR_RETURN(t.read, GenerateToken());
  ELASTRA_RETURN_IF_ERROR(WriteFileAtomically(admin_path, t.admin + "\n", 0600));
  ELASTRA_RETURN_IF_ERROR(WriteFileAtomically(read_path, t.read + "\n", 0600));
  return t;
}

class HttpServer::Impl {
 public:
  explicit Impl(HttpOptions options)
      : options_(std::move(options)),
        config_{options_.admin_token, options_.read_token, static_cast<bool>(options_.events)} {}

  Status Start(std::unique_ptr<ControlClient> client) {
    client_ = std::move(client);
    auto listen = ParseHttpListen(options_.listen);
    if (!listen.ok()) return listen.status();
    listener_.Configure({.threads = options_.threads,
                         .read_timeout = options_.read_timeout,
                         .keep_alive_seconds = 2,
                         .max_body_bytes = options_.max_body_bytes});
    Routes();
    return listener_.Start(listen->first, listen->second);
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    listener_.Stop();
    for (auto& t : trackers_) t.join();
    trackers_.clear();
    if (client_) client_->Close();
  }

  const std::string& url() const { return listener_.url(); }
  int port() const { return listener_.port(); }

 private:
  void Routes() {
    server_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) Error(res, res.status, DefaultMessage(res.status));
    });
    server_.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                     std::exception_ptr) { Error(res, 500, "internal error"); });
    // cpp-httplib matches the paths; Route (http/routes.h) decides everything else.
    const auto serve = [this](const httplib::Request& req, httplib::Response& res) {
      Serve(req, res);
    };
    for (const char* path :
         {"/", "/healthz", "/v1/job", "/metrics", R"(/v1/resizes/(\d{1,18}))", "/v1/events"}) {
      server_.Get(path, serve);
    }
    server_.Post("/v1/resize", serve);
    server_.Post("/v1/drain", serve);
  }

  void Serve(const httplib::Request& req, httplib::Response& res) {
    ApiRequest api{req.method, req.path, req.get_header_value("Authorization"),
                   req.get_header_value("Cookie"), std::nullopt,
                   req.get_header_value("Last-Event-ID"), req.body};
    if (req.has_param("token")) api.token_param = req.get_param_value("token");
    ApiAction a = Route(api, config_);
    switch (a.kind) {
      case ApiAction::Kind::kError:
        if (!a.www_authenticate.empty()) res.set_header("WWW-Authenticate", a.www_authenticate);
        return Error(res, a.code, a.message);
      case ApiAction::Kind::kHealth: {
        json health = {{"ok", true}};
        if (!options_.role.empty()) health["role"] = options_.role;
        return Reply(res, 200, health.dump());
      }
      case ApiAction::Kind::kSetCookie:
        // The token leaves the address bar and the history as an HttpOnly cookie.
        res.set_header("Set-Cookie", std::string(kCookie) + "=" + a.token +
                                         "; Path=/; HttpOnly; SameSite=Strict");
        res.set_header("Cache-Control", "no-store");
        return res.set_redirect("/", 303);
      case ApiAction::Kind::kDashboard:
        res.set_header("Content-Security-Policy", kDashboardCsp);
        res.set_header("Cache-Control", "no-store");
        res.set_header("X-Content-Type-Options", "nosniff");
        return Reply(res, 200, std::string(DashboardHtml()), "text/html; charset=utf-8");
      case ApiAction::Kind::kJob:
      case ApiAction::Kind::kMetrics: {
        auto status = JobStatus();
        if (!status.ok()) return Error(res, HttpCode(status.status()), status.status().message());
        if (a.kind == ApiAction::Kind::kJob) return Reply(res, 200, proto::StatusJson(*status));
        return Reply(res, 200, PrometheusMetrics(*status) + JournalMetrics(), kPrometheus);
      }
      case ApiAction::Kind::kChange: {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = changes_.find(a.id);
        if (it == changes_.end()) {
          return Error(res, 404,
                       "no resize " + std::to_string(a.id) + " (ids are per coordinator process)");
        }
        return Reply(res, 200, ChangeJson(a.id, it->second));
      }
      case ApiAction::Kind::kEvents:
        return Events(a.id, res);
      case ApiAction::Kind::kResize:
        a.resize.wait = true;  // the tracker learns the outcome even when this client does not wait
        return Submit(MessageType::kResize, proto::EncodePayload(a.resize), "", a.wait, res);
      case ApiAction::Kind::kDrain:
        a.drain.wait = true;
        return Submit(MessageType::kDrain, proto::EncodePayload(a.drain), a.drain.host, a.wait,
                      res);
    }
  }

  // GET /v1/events: the journal's events after `after`, as server-sent events, until the client
  // goes away or the API stops.
  void Events(uint64_t after, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (streams_ >= options_.max_event_streams) {
        return Error(res, 503, "too many event streams open; retry later");
      }
      ++streams_;
    }
    res.set_header("Cache-Control", "no-cache");
    std::shared_ptr<JobEventSource> reader = options_.events(after);
    auto quiet_since =
        std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, reader, quiet_since](size_t, httplib::DataSink& sink) {
          std::string out;
          for (const JobEvent& e : reader->ReadNew()) {
            out += "id: " + std::to_string(e.id) + "\nevent: " + e.type + "\ndata: " + e.data +
                   "\n\n";
          }
          const auto now = std::chrono::steady_clock::now();
          if (out.empty() && now - *quiet_since >= options_.event_keepalive) {
            out = ": keepalive\n\n";
          }
          if (!out.empty()) {
            *quiet_since = now;
            if (!sink.write(out.data(), out.size())) return false;  // the client went away
          }
          std::unique_lock<std::mutex> lock(mu_);
          cv_.wait_for(lock, options_.event_poll, [&] { return stopped_; });
          if (stopped_) sink.done();  // the API stops: end the stream cleanly
          return true;
        },
        [this](bool) {
          std::lock_guard<std::mutex> lock(mu_);
          --streams_;
        });
  }

  // Counts of the journal's events since the job started (restarts included): what the status
  // does not carry, such as checkpoint commits. Read incrementally, one reader for all scrapes.
  std::string JournalMetrics() {
    if (!options_.events) return "";
    std::lock_guard<std::mutex> lock(journal_mu_);
    if (!journal_reader_) {
      journal_reader_ = options_.events(0);
    }
    for (const JobEvent& e : journal_reader_->ReadNew()) journal_metrics_.Add(e);
    return journal_metrics_.Text();
  }

  StatusOr<proto::JobStatus> JobStatus() {
    auto reply = client_->Call<proto::StatusReply>(
        MessageType::kStatusRequest, proto::StatusRequest{}, options_.coordinator_timeout);
    if (!reply.ok()) return reply.status();
    return reply->status;
  }

  static std::string ChangeJson(uint64_t id, const Change& c) {
    json j = json::parse(proto::ResizeReplyJson(c.reply, c.host));
    j["id"] = std::to_string(id);
    return j.dump();
  }

  // Sends a resize or drain; answers 202 {"id", "phase": "accepted", ...} or, when it is over
  // (at once, or after waiting), 200 with the outcome.
  void Submit(MessageType type, const std::string& payload, const std::string& host, bool wait,
              httplib::Response& res) {
    auto first = client_->Request(type, payload, options_.coordinator_timeout);
    if (!first.ok()) return Error(res, HttpCode(first.status()), first.status().message());
    const uint64_t request_id = client_->last_request_id();
    auto decoded = proto::DecodePayload<ResizeReply>(first->payload);
    if (!decoded.ok()) return Error(res, 500, decoded.status().message());
    uint64_t id = 0;
    std::unique_lock<std::mutex> lock(mu_);
    if (stopped_) return Error(res, 503, "the HTTP API is stopping");
    id = next_id_++;
    Change& change = changes_[id];
    change.host = host;
    change.reply = *decoded;
    change.final = decoded->phase != ResizePhase::kAccepted;
    if (!change.final) {
      trackers_.emplace_back([this, id, request_id] { Track(id, request_id); });
    }
    LOG(INFO) << "HTTP " << (host.empty() ? "resize " : "drain of " + host + ", ") << id << " "
              << proto::ToString(decoded->phase);
    if (wait) {
      cv_.wait_for(lock, options_.max_wait, [&] { return stopped_ || changes_[id].final; });
    }
    const Change& now = changes_[id];
    Reply(res, now.final ? 200 : 202, ChangeJson(id, now));
  }

  // Waits for the second reply of an accepted change (done or failed), until Stop().
  void Track(uint64_t id, uint64_t request_id) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopped_) return;
      }
      auto second = client_->AwaitReply(request_id, milliseconds(500));
      if (!second.ok() && second.status().code() == StatusCode::kTimedOut) continue;
      ResizeReply outcome;
      if (second.ok()) {
        auto decoded = proto::DecodePayload<ResizeReply>(second->payload);
        if (decoded.ok()) {
          outcome = *decoded;
        } else {
          outcome.phase = ResizePhase::kFailed;
          outcome.message = decoded.status().message();
        }
      } else {
        outcome.phase = ResizePhase::kFailed;
        outcome.message = second.status().message();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        changes_[id].reply = outcome;
        changes_[id].final = true;
      }
      cv_.notify_all();
      return;
    }
  }

  HttpOptions options_;
  const ApiConfig config_;
  httplib::Server server_;
  Listener listener_{&server_};  // after server_: it stops before server_ goes
  std::unique_ptr<ControlClient> client_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
  int streams_ = 0;  // open event streams
  uint64_t next_id_ = 1;
  std::map<uint64_t, Change> changes_;
  std::vector<std::thread> trackers_;

  std::mutex journal_mu_;  // guards what /metrics reads from the journal
  std::unique_ptr<JobEventSource> journal_reader_;
  JournalEventMetrics journal_metrics_;
};

StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options) {
  if (options.admin_token.empty() || options.read_token.empty() ||
      options.admin_token == options.read_token) {
    return InvalidArgumentError("the HTTP API needs two different, non-empty tokens");
  }
  if (!ParseHttpListen(options.listen).ok()) return ParseHttpListen(options.listen).status();
  auto client = ControlClient::Connect(options.coordinator);
  if (!client.ok())
    return client.status().WithContext("the HTTP API connecting to its coordinator");
  auto impl = std::make_unique<Impl>(options);
  ELASTRA_RETURN_IF_ERROR(impl->Start(std::move(client).value()));
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }
void HttpServer::Stop() { impl_->Stop(); }
const std::string& HttpServer::url() const { return impl_->url(); }
int HttpServer::port() const { return impl_->port(); }

}  // namespace elastra::http
