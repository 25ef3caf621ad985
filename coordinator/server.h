// CoordinatorServer: the coordinator as a running service. A ZeroMQ ROUTER socket with CURVE
// encryption; a ZAP handler admits only the listed worker and admin public keys and tags each
// connection a role (worker or admin); one loop thread decodes frames, hands them to CoordinatorCore,
// sends what it answers, and ticks its deadlines. Thread-safe: every method may be called from any
// thread while the loop runs.
//
//   CoordinatorOptions options;
//   options.server_keys = *GenerateKeyPair();
//   options.worker_public_keys = {worker_keys.public_key};
//   options.admin_public_keys = {admin_keys.public_key};
//   options.initial_workers = 4;
//   auto server = CoordinatorServer::Start(options);   // binds tcp://127.0.0.1:0 by default
//   (*server)->address();                              // "tcp://127.0.0.1:40123"
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "protocol/messages.h"
#include "coordinator/options.h"
#include "elastra/status.h"

namespace elastra::coordinator {

class CoordinatorServer {
 public:
  // Binds and starts the loop thread. kInvalidArgument for malformed keys or no allowed key at
  // all, kUnavailable when the address cannot be bound, kInternal when libzmq lacks CURVE.
  static StatusOr<std::unique_ptr<CoordinatorServer>> Start(const CoordinatorOptions& options);

  ~CoordinatorServer();  // Stop()
  CoordinatorServer(const CoordinatorServer&) = delete;
  CoordinatorServer& operator=(const CoordinatorServer&) = delete;

  // Stops the loop and closes the sockets, first giving the messages already sent up to a second
  // to leave (ZMQ_LINGER): the job's last Shutdowns reach their agents and workers. Idempotent.
  void Stop();

  // The job is over: true once it finished or failed, the messages telling every agent and every
  // standby worker so were handed to ZeroMQ, and <state_dir>/status.json holds the final status.
  // The server keeps answering (status requests, agents registering again) until Stop(); the
  // owner exits then: 0 when state() is kFinished, 1 when kFailed.
  bool done() const;
  // Waits up to `timeout` for done(); returns done().
  bool WaitDone(std::chrono::milliseconds timeout) const;

  // The bound endpoint with the real port, e.g. "tcp://127.0.0.1:40123".
  const std::string& address() const;
  // The server's CURVE public key (Z85), what clients put in server_public.
  const std::string& public_key() const;

  // Snapshots of the core, taken under its lock.
  proto::JobStatus Snapshot() const;
  proto::JobState state() const;
  uint64_t generation() const;
  uint64_t malformed_frames() const;  // frames that did not decode (or had the wrong shape)
  uint64_t stale_messages() const;
  uint64_t rejected_keys() const;     // CURVE handshakes refused by the ZAP handler

  class Impl;

 private:
  explicit CoordinatorServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace elastra::coordinator
