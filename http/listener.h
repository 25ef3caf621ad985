// What every HTTP server of ours does the same way around cpp-httplib (HttpServer, the standby's
// StandbyServer): its thread pool and timeouts, and its listening loop on a thread of its own.
// Internal to http/.
#ifndef ELASTRA_HTTP_LISTENER_H_
#define ELASTRA_HTTP_LISTENER_H_

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "elastra/status.h"

namespace elastra::http {

struct ListenerOptions {
  int threads = 1;  // worker threads (each serves one connection at a time); at least 1
  std::chrono::milliseconds read_timeout{5000};  // and the write timeout
  int keep_alive_seconds = 1;
  size_t max_body_bytes = 64 * 1024;
};

// Runs `server`'s listening loop on a thread of its own. Not thread-safe: one owner calls Start
// and Stop.
class Listener {
 public:
  explicit Listener(httplib::Server* server) : server_(server) {}
  ~Listener() { Stop(); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Sets the server's thread pool, timeouts and body bound (before Start).
  void Configure(const ListenerOptions& options);
  // Binds host:port (0: a free port) and runs the loop; returns once the loop runs, since
  // httplib's stop() does nothing before it does (a Stop() right after Start() would leave the
  // loop, and the join, running forever). kUnavailable when the address cannot be bound.
  Status Start(const std::string& host, int port);
  // Stops the loop and joins its thread; nothing when it never started or stopped already.
  void Stop();

  const std::string& url() const { return url_; }  // "http://HOST:PORT" once started
  int port() const { return port_; }                // -1 before Start

 private:
  httplib::Server* server_;
  std::thread thread_;
  std::atomic<bool> returned_{false};  // the loop returned (or never ran)
  std::string url_;
  int port_ = -1;
};

}  // namespace elastra::http

#endif  // ELASTRA_HTTP_LISTENER_H_
