// Route: what the HTTP API (docs/http.md) decides from a request alone: which endpoint, whether its
// token grants it, and what a resize or drain body asks. A pure function over the parts of the
// request that cpp-httplib parsed off the connection, so the server's handlers only carry out the
// action it returns, and the fuzz target (tests/fuzz/http_fuzzer.cc) drives every endpoint's
// parsing without a socket. Thread-safe (no state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/messages.h"

namespace elastra::http {

// The parts of a request the API reads.
struct ApiRequest {
  std::string method;                      // "GET", "HEAD" (served as GET) or "POST"
  std::string path;                        // decoded, without the query
  std::string authorization;               // the Authorization header; empty when absent
  std::string cookie;                      // the Cookie header; empty when absent
  std::optional<std::string> token_param;  // the `token` query parameter, when given
  std::string last_event_id;               // the Last-Event-ID header; empty when absent
  std::string body;                        // a POST's body
};

// What the API is configured with, as far as routing goes.
struct ApiConfig {
  std::string admin_token;  // may read, resize and drain
  std::string read_token;   // may only read
  bool events = true;       // false: the job keeps no journal (GET /v1/events is 404)
};

// What the server does with a request.
struct ApiAction {
  enum class Kind {
    kError,      // answer `code` with ErrorBody(message), and WWW-Authenticate when set
    kHealth,     // GET /healthz
    kDashboard,  // GET /: the page
    kSetCookie,  // GET /?token=: `token` becomes the cookie, then back to /
    kJob,        // GET /v1/job
    kMetrics,    // GET /metrics
    kChange,     // GET /v1/resizes/`id`
    kEvents,     // GET /v1/events: the events after `id`
    kResize,     // POST /v1/resize: `resize`, `wait`
    kDrain,      // POST /v1/drain: `drain`, `wait`
  };
  Kind kind = Kind::kError;
  int code = 0;                  // kError: 400, 401, 403, 404 or 422
  std::string message;           // kError: why
  std::string www_authenticate;  // kError 401: the challenge
  std::string token;             // kSetCookie
  uint64_t id = 0;               // kChange, kEvents
  proto::ResizeRequest resize;   // kResize, as the body asks (its own `wait` left false)
  proto::DrainRequest drain;     // kDrain, as the body asks (its own `wait` left false)
  bool wait = false;             // kResize, kDrain: the client waits for the outcome
};

// The action for `req`. Never fails: a request the API cannot serve is a kError action.
ApiAction Route(const ApiRequest& req, const ApiConfig& config);

// The JSON body of an error answer, {"error": message}; bytes of `message` that are not UTF-8
// (a header's bytes quoted back) are replaced with U+FFFD.
std::string ErrorBody(const std::string& message);

}  // namespace elastra::http
