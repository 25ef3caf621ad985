// The Gloo backend: CPU collectives over TCP, one gloo context per generation (or group), connected
// full-mesh through a KeyValueStore under a per-generation key prefix.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/kv_store.h"
#include "elastra/communicator.h"

namespace elastra {

struct GlooOptions {
  KeyValueStore* store = nullptr;  // not owned; must outlive Create()
  std::string prefix;              // unique per generation and group, e.g. "g3/world/"
  int rank = 0;
  int size = 1;
  std::string hostname = "127.0.0.1";  // address to bind and advertise
  std::chrono::milliseconds timeout{5000};          // default per-call timeout
  std::chrono::milliseconds connect_timeout{30000}; // rendezvous and full-mesh connect
};

// Builds and connects the context. kTimedOut when peers do not show up within connect_timeout,
// kPeerLost when a connection fails, kInvalidArgument for a bad rank/size/store.
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options);

}  // namespace elastra
