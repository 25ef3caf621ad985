// Gloo communicators for n ranks that are threads of one process, for tests and benchmarks.
// Header-only, without gtest.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"

namespace elastra::testing {

// Connects n thread-ranks under `prefix`. Empty when any rank failed to connect. `own_devices`:
// each rank gets a gloo device (an I/O thread) of its own, as separate processes would.
// `local_streams`: GlooOptions::local_streams (ExchangeV through Unix sockets on one host).
inline std::vector<std::unique_ptr<Communicator>> ConnectThreadRanks(
    KeyValueStore* store, const std::string& prefix, int n, std::chrono::milliseconds timeout,
    std::chrono::milliseconds connect_timeout, bool own_devices = false,
    bool local_streams = true) {
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<std::thread> threads;
  for (int w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      GlooOptions o;
      o.store = store;
      o.prefix = prefix;
      o.rank = w;
      o.size = n;
      o.timeout = timeout;
      o.connect_timeout = connect_timeout;
      o.own_device = own_devices;
      o.local_streams = local_streams;
      auto comm = CreateGlooCommunicator(o);
      if (comm.ok()) comms[w] = std::move(comm).value();
    });
  }
  for (auto& t : threads) t.join();
  if (!std::all_of(comms.begin(), comms.end(), [](const auto& c) { return c != nullptr; })) {
    return {};
  }
  return comms;
}

}  // namespace elastra::testing
