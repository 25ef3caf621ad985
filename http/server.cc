#include "http/server.h"

#include <httplib.h>

#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <limits>
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

// Whether two tokens are equal, in time that depends only on the length of `expected` (a
// mismatch at the first byte takes as long as one at the last).
bool ConstantTimeEquals(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

void Reply(httplib::Response& res, int code, const std::string& body, const char* type = kJson) {
  res.status = code;
  res.set_content(body, type);
}

void Error(httplib::Response& res, int code, const std::string& message) {
  Reply(res, code, json{{"error", message}}.dump());
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
  explicit Impl(HttpOptions options) : options_(std::move(options)) {}

  Status Start(std::unique_ptr<ControlClient> client) {
    client_ = std::move(client);
    auto listen = ParseHttpListen(options_.listen);
    if (!listen.ok()) return listen.status();
    const int threads = std::max(1, options_.threads);
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    const auto timeout = options_.read_timeout;
    server_.set_read_timeout(timeout.count() / 1000, (timeout.count() % 1000) * 1000);
    server_.set_write_timeout(timeout.count() / 1000, (timeout.count() % 1000) * 1000);
    server_.set_keep_alive_timeout(2);
    server_.set_payload_max_length(options_.max_body_bytes);
    Routes();
    const auto& [host, port] = *listen;
    port_ =
        port == 0 ? server_.bind_to_any_port(host) : (server_.bind_to_port(host, port) ? port : -1);
    if (port_ < 0) {
      return UnavailableError("cannot listen for HTTP on " + host + ":" + std::to_string(port));
    }
    url_ = "http://" + host + ":" + std::to_string(port_);
    thread_ = std::thread([this] {
      server_.listen_after_bind();
      listen_returned_ = true;
    });
    // httplib's stop() does nothing until the listening loop runs (it checks is_running()), so a
    // Stop() right after Start() would leave that loop, and the join, running forever: return
    // only once it runs (or has already given up).
    while (!server_.is_running() && !listen_returned_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return OkStatus();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    server_.stop();
    if (thread_.joinable()) thread_.join();
    for (auto& t : trackers_) t.join();
    trackers_.clear();
    if (client_) client_->Close();
  }

  const std::string& url() const { return url_; }
  int port() const { return port_; }

 private:
  enum class Access { kRead, kAdmin };

  // The token a request carries: `Authorization: Bearer TOKEN`; else, for a browser, the
  // `token` query parameter or the kCookie cookie, which grant reading only (a cookie is sent
  // by the browser on its own, so it must never let a page elsewhere change the job). Empty
  // when none.
  static std::string TokenOf(const httplib::Request& req, bool* from_browser) {
    const std::string header = req.get_header_value("Authorization");
    constexpr char kBearer[] = "Bearer ";
    *from_browser = false;
    if (header.rfind(kBearer, 0) == 0) return header.substr(sizeof(kBearer) - 1);
    *from_browser = true;
    if (req.has_param("token")) return req.get_param_value("token");
    return CookieValue(req.get_header_value("Cookie"), kCookie);
  }

  static std::string CookieValue(const std::string& header, const std::string& name) {
    size_t pos = 0;
    while (pos < header.size()) {
      size_t end = header.find(';', pos);
      if (end == std::string::npos) end = header.size();
      size_t begin = header.find_first_not_of(' ', pos);
      if (begin < end && header.compare(begin, name.size() + 1, name + "=") == 0) {
        return header.substr(begin + name.size() + 1, end - begin - name.size() - 1);
      }
      pos = end + 1;
    }
    return "";
  }

  // Whether the request carries a token that grants `need`; answers 401/403 when not.
  bool Authorized(const httplib::Request& req, httplib::Response& res, Access need) {
    bool from_browser = false;
    const std::string token = TokenOf(req, &from_browser);
    if (token.empty()) {
      res.set_header("WWW-Authenticate", "Bearer");
      Error(res, 401,
            "missing bearer token (Authorization: Bearer TOKEN; a browser opens /?token=TOKEN)");
      return false;
    }
    const bool admin = ConstantTimeEquals(token, options_.admin_token);
    const bool read = ConstantTimeEquals(token, options_.read_token);
    if (!admin && !read) {
      res.set_header("WWW-Authenticate", "Bearer error=\"invalid_token\"");
      Error(res, 401, "the bearer token is not this job's");
      return false;
    }
    if (need == Access::kAdmin && (!admin || from_browser)) {
      Error(res, 403,
            from_browser ? "a token from a query parameter or cookie may only read; send "
                           "Authorization: Bearer with the admin token"
                         : "the read token may not change the job; use the admin token");
      return false;
    }
    return true;
  }

  // GET /: the dashboard. With ?token=, a valid token becomes an HttpOnly cookie and the browser
  // is sent back to / (the token leaves the address bar and the history).
  void Dashboard(const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("token")) {
      if (!Authorized(req, res, Access::kRead)) return;
      res.set_header("Set-Cookie", std::string(kCookie) + "=" + req.get_param_value("token") +
                                       "; Path=/; HttpOnly; SameSite=Strict");
      res.set_header("Cache-Control", "no-store");
      res.set_redirect("/", 303);
      return;
    }
    if (!Authorized(req, res, Access::kRead)) return;
    res.set_header("Content-Security-Policy", kDashboardCsp);
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.status = 200;
    res.set_content(std::string(DashboardHtml()), "text/html; charset=utf-8");
  }

  void Routes() {
    server_.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (res.body.empty()) Error(res, res.status, DefaultMessage(res.status));
    });
    server_.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                                     std::exception_ptr) { Error(res, 500, "internal error"); });
    server_.Get(
        "/", [this](const httplib::Request& req, httplib::Response& res) { Dashboard(req, res); });
    server_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      Reply(res, 200, R"({"ok":true})");
    });
    server_.Get("/v1/job", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, Access::kRead)) return;
      auto status = JobStatus();
      if (!status.ok()) return Error(res, HttpCode(status.status()), status.status().message());
      Reply(res, 200, proto::StatusJson(*status));
    });
    server_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, Access::kRead)) return;
      auto status = JobStatus();
      if (!status.ok()) return Error(res, HttpCode(status.status()), status.status().message());
      Reply(res, 200, PrometheusMetrics(*status) + JournalMetrics(), kPrometheus);
    });
    server_.Get(
        R"(/v1/resizes/(\d{1,18}))", [this](const httplib::Request& req, httplib::Response& res) {
          if (!Authorized(req, res, Access::kRead)) return;
          const uint64_t id = std::stoull(req.matches[1].str());
          std::lock_guard<std::mutex> lock(mu_);
          auto it = changes_.find(id);
          if (it == changes_.end()) {
            return Error(res, 404,
                         "no resize " + std::to_string(id) + " (ids are per coordinator process)");
          }
          Reply(res, 200, ChangeJson(id, it->second));
        });
    server_.Get("/v1/events", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, Access::kRead)) return;
      if (!options_.events) return Error(res, 404, "this job keeps no journal");
      uint64_t after = 0;
      const std::string last = req.get_header_value("Last-Event-ID");
      if (!last.empty()) {
        auto [ptr, ec] = std::from_chars(last.data(), last.data() + last.size(), after);
        if (ec != std::errc() || ptr != last.data() + last.size()) {
          return Error(res, 400, "Last-Event-ID '" + last + "' is not an event id");
        }
      }
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
            if (out.empty() && now - *quiet_since >= options_.event_keepalive)
              out = ": keepalive\n\n";
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
    });
    server_.Post("/v1/resize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, Access::kAdmin)) return;
      proto::ResizeRequest r;
      bool wait = false;
      if (std::string why = ParseResize(req.body, &r, &wait); !why.empty()) {
        return Error(res, why.rfind("422:", 0) == 0 ? 422 : 400, why.substr(4));
      }
      r.wait = true;  // the tracker learns the outcome even when this client does not wait
      Submit(MessageType::kResize, proto::EncodePayload(r), "", wait, res);
    });
    server_.Post("/v1/drain", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res, Access::kAdmin)) return;
      json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (!body.is_object()) return Error(res, 400, "the body is not a JSON object");
      proto::DrainRequest d;
      bool wait = false;
      for (const auto& [key, value] : body.items()) {
        if (key == "host" && value.is_string() && !value.get<std::string>().empty()) {
          d.host = value.get<std::string>();
        } else if (key == "wait" && value.is_boolean()) {
          wait = value.get<bool>();
        } else {
          return Error(res, 400, "unexpected or malformed field \"" + key + "\"");
        }
      }
      if (d.host.empty()) return Error(res, 400, "\"host\" is required");
      d.wait = true;
      Submit(MessageType::kDrain, proto::EncodePayload(d), d.host, wait, res);
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

  // Fills `r` from a resize body; "" when it is well formed, else "400:why" or "422:why".
  static std::string ParseResize(const std::string& text, proto::ResizeRequest* r, bool* wait) {
    json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object()) return "400:the body is not a JSON object";
    bool has_workers = false;
    for (const auto& [key, value] : body.items()) {
      if (key == "workers" && value.is_number_integer()) {
        const int64_t n = value.get<int64_t>();
        if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
          return "422:\"workers\" must be at least 1, got " + std::to_string(n);
        }
        r->workers = static_cast<int32_t>(n);
        has_workers = true;
      } else if (key == "layout" && value.is_object()) {
        int32_t* dims[] = {&r->layout.dp, &r->layout.pp, &r->layout.tp};
        const char* names[] = {"dp", "pp", "tp"};
        if (value.size() != 3) return "400:\"layout\" needs exactly dp, pp and tp";
        for (int i = 0; i < 3; ++i) {
          auto it = value.find(names[i]);
          if (it == value.end() || !it->is_number_integer()) {
            return std::string("400:\"layout\" needs an integer \"") + names[i] + "\"";
          }
          const int64_t v = it->get<int64_t>();
          if (v < 1 || v > 1 << 20) {
            return std::string("422:layout ") + names[i] + " must be at least 1";
          }
          *dims[i] = static_cast<int32_t>(v);
        }
        r->has_layout = true;
      } else if (key == "wait" && value.is_boolean()) {
        *wait = value.get<bool>();
      } else if (key == "spares" && value.is_number_integer()) {
        // The coordinator refuses more than max_workers (422, with the bound).
        const int64_t k = value.get<int64_t>();
        if (k < 0 || k > std::numeric_limits<int32_t>::max()) {
          return "422:\"spares\" must be 0 or more, got " + std::to_string(k);
        }
        r->spares = static_cast<int32_t>(k);
      } else {
        return "400:unexpected or malformed field \"" + key + "\"";
      }
    }
    if (!has_workers && !r->has_layout && r->spares < 0) {
      return "400:\"workers\", \"layout\" or \"spares\" is required";
    }
    if (!has_workers) r->workers = r->has_layout ? r->layout.world() : 0;  // 0: only the spares
    return "";
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
  httplib::Server server_;
  std::thread thread_;
  std::atomic<bool> listen_returned_{false};
  std::unique_ptr<ControlClient> client_;
  std::string url_;
  int port_ = -1;

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
