// Helpers for the Gloo tests: run one function per rank on its own thread (gloo's
// BaseTest::spawn), each rank with a connected communicator; know that a call is blocked.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/kv_store.h"

namespace elastra::testing {

inline std::unique_ptr<Communicator> Connect(KeyValueStore* store, const std::string& prefix,
                                             int rank, int size,
                                             std::chrono::milliseconds timeout =
                                                 std::chrono::milliseconds(10000)) {
  GlooOptions options;
  options.store = store;
  options.prefix = prefix;
  options.rank = rank;
  options.size = size;
  options.timeout = timeout;
  options.connect_timeout = std::chrono::milliseconds(10000);
  auto comm = CreateGlooCommunicator(options);
  EXPECT_TRUE(comm.ok()) << comm.status();
  if (!comm.ok()) return nullptr;
  return std::move(comm).value();
}

// Connects `size` ranks under `prefix` and runs fn(comm) on each, one thread per rank.
inline void Spawn(KeyValueStore* store, const std::string& prefix, int size,
                  const std::function<void(Communicator&)>& fn,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([=, &fn] {
      auto comm = Connect(store, prefix, rank, size, timeout);
      ASSERT_NE(comm, nullptr);
      EXPECT_EQ(comm->rank(), rank);
      EXPECT_EQ(comm->size(), size);
      fn(*comm);
    });
  }
  for (auto& t : threads) t.join();
}

// Connects `size` ranks under `prefix`, one thread per rank. Null where a rank failed (the
// failure is already reported).
inline std::vector<std::unique_ptr<Communicator>> ConnectAll(
    KeyValueStore* store, const std::string& prefix, int size,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  std::vector<std::unique_ptr<Communicator>> comms(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] { comms[rank] = Connect(store, prefix, rank, size, timeout); });
  }
  for (auto& t : threads) t.join();
  return comms;
}

// Returns once calls of `comm` are in at least `waits` waits (a call on another thread is
// blocked on a peer): knowledge that the call is blocked, where a sleep would only guess. False
// when that has not happened within `limit`, which only a broken test or backend causes.
inline bool WaitUntilBlocked(const Communicator& comm, int waits = 1,
                             std::chrono::milliseconds limit = std::chrono::seconds(20)) {
  const auto give_up = std::chrono::steady_clock::now() + limit;
  while (GlooWaitsInFlightForTesting(comm) < waits) {
    if (std::chrono::steady_clock::now() > give_up) {
      ADD_FAILURE() << "no call of rank " << comm.rank() << " blocked within " << limit.count()
                    << " ms";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace elastra::testing
