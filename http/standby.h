// StandbyServer: the HTTP a standby coordinator serves on its --http address while another
// coordinator leads its job on etcd (docs/ha.md, "A standby's HTTP"). There is no job behind it:
// GET /healthz answers 200 {"ok":true,"status":"ok","role":"standby","job":NAME,"leader":{...}},
// and every other request 503 {"error":"standby: job NAME is led by ...","leader":{...}}, so a
// load balancer sees a live process and a client learns where the leader is. "leader" is the
// leader key's value, read again for each request (a JSON object; any other value as
// {"address": value}; null while no one leads or etcd does not answer). No tokens: it tells
// nothing the leader key does not. The standby stops it before it binds the same address as the
// leader. Thread-safe: Stop() may be called from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "elastra/status.h"

namespace elastra::http {

struct StandbyOptions {
  // Where to listen, as HttpOptions::listen: "HOST:PORT" or ":PORT" (loopback); port 0: any.
  std::string listen = "127.0.0.1:0";
  // The job this process is a standby of. Required.
  std::string job;
  // The leader key's value now; kNotFound while no one leads, another error when it cannot be
  // read. Called on the server's threads, once for each request. Required.
  std::function<StatusOr<std::string>()> leader;
  // A client that sends nothing for this long is disconnected.
  std::chrono::milliseconds read_timeout{5000};
  // Worker threads (each serves one connection at a time).
  int threads = 2;
};

// A leader key's value described for a person: "http://H:P (control tcp://H:P, host H, pid N)"
// from the JSON object the coordinator campaigns with, whichever of those fields it has; any
// other value as it is.
std::string DescribeLeader(const std::string& value);

class StandbyServer {
 public:
  // Binds and starts serving. kInvalidArgument for a bad listen address or a missing job or
  // leader function, kUnavailable when the port cannot be bound.
  static StatusOr<std::unique_ptr<StandbyServer>> Start(StandbyOptions options);

  ~StandbyServer();  // Stop()
  StandbyServer(const StandbyServer&) = delete;
  StandbyServer& operator=(const StandbyServer&) = delete;

  // Stops accepting and finishes the requests in progress; the address is free once it
  // returned. Idempotent.
  void Stop();

  // "http://127.0.0.1:40125" with the real port.
  const std::string& url() const;

  class Impl;

 private:
  explicit StandbyServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra::http
