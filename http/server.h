// HttpServer: the coordinator's HTTP API (docs/http.md), off unless `--http ADDR:PORT` asks for
// it. It runs on its own threads (cpp-httplib's pool) and talks to the coordinator the way an
// admin client does: over one in-process ControlClient holding the job's admin key, to the
// coordinator's own ZeroMQ address. So the core stays socket-free, every request goes through
// the same admission (a resize over HTTP and one from `elastra resize` are refused alike), and a
// slow or hostile HTTP client only ever holds an HTTP thread, never the coordinator's loop.
//
// Every endpoint but GET /healthz needs `Authorization: Bearer TOKEN`: the read token for GET
// /v1/job, /v1/resizes/ID, /v1/events and /metrics; the admin token for those and POST
// /v1/resize and /v1/drain. Tokens are compared in constant time. Thread-safe: Stop() may be called
// from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "protocol/control_client.h"
#include "common/job_events.h"
#include "elastra/status.h"

namespace elastra::http {

struct HttpOptions {
  // Where to listen: "HOST:PORT"; ":PORT" listens on 127.0.0.1; port 0 picks a free port.
  std::string listen = "127.0.0.1:0";
  // Bearer tokens (non-empty, different): admin may resize and drain, read may only look.
  std::string admin_token;
  std::string read_token;
  // The admin connection to the coordinator this API fronts (address, keys, job).
  ControlClientOptions coordinator;
  // Request bodies above this many bytes are answered 413 without being read further.
  size_t max_body_bytes = 64 * 1024;
  // A client that sends nothing for this long is disconnected (slow clients never hold a thread
  // for longer).
  std::chrono::milliseconds read_timeout{5000};
  // How long one request to the coordinator may take.
  std::chrono::milliseconds coordinator_timeout{10000};
  // The longest a POST with "wait": true blocks before answering 202 with the change in flight.
  std::chrono::milliseconds max_wait{std::chrono::minutes(10)};
  // HTTP worker threads (each serves one connection at a time).
  int threads = 8;
  // What GET /healthz says this coordinator is, as "role": "leader" for the elected leader of a
  // job on etcd (docs/ha.md; a standby answers with StandbyServer). Empty: no "role".
  std::string role;
  // The job's events from a position on (an event id; 0: from the start), which GET /v1/events
  // streams and /metrics counts: the launcher hands the journal's reader (journal/events.h).
  // Empty: no event stream (404) and no event metrics.
  std::function<std::unique_ptr<JobEventSource>(uint64_t after)> events;
  // Event streams open at once (each holds a thread); more are answered 503.
  int max_event_streams = 4;
  // How often an open event stream looks for new journal records, and sends a comment line when
  // there are none (so a client that went away is noticed).
  std::chrono::milliseconds event_poll{200};
  std::chrono::milliseconds event_keepalive{std::chrono::seconds(5)};
};

// Parses a --http value: "HOST:PORT" or ":PORT" (loopback). kInvalidArgument otherwise.
StatusOr<std::pair<std::string, int>> ParseHttpListen(const std::string& text);

// 32 random bytes as 64 hex digits, for a bearer token.
StatusOr<std::string> GenerateToken();

// The tokens of the state directory: <dir>/admin.token and <dir>/read.token (mode 0600), read
// when both exist (a restarted coordinator keeps them), else generated and written.
struct HttpTokens {
  std::string admin;
  std::string read;
};
StatusOr<HttpTokens> LoadOrCreateTokens(const std::string& state_dir);

class HttpServer {
 public:
  // Connects to the coordinator, binds and starts serving. kInvalidArgument for a bad listen
  // address or empty/equal tokens, kUnavailable when the port cannot be bound, the
  // ControlClient's error when the coordinator cannot be reached.
  static StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options);

  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Stops accepting, finishes the requests in progress (a waiting POST answers 202 at once),
  // and closes the coordinator connection. Idempotent.
  void Stop();

  // "http://127.0.0.1:40125" with the real port.
  const std::string& url() const;
  int port() const;

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra::http
