// Failure behaviour of the Gloo backend: a SIGKILLed rank (one process per rank, file store),
// a timeout on one rank, a lost peer, Abort() from another thread, destruction after Abort(), and
// an abort that must leave another communicator on the same gloo device alone.
// No test sleeps before acting: a test that breaks a blocked call first waits until the call is
// in a wait (testing::WaitUntilBlocked). The only timing bounds are liveness bounds: "within 2x
// the call timeout", or "well before the call's own (long) timeout".
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "file_kv_store.h"
#include "gloo_test_util.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;  // CLOCK_MONOTONIC: comparable across processes

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "elastra_gloo_XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

constexpr milliseconds kCallTimeout{2000};
// The timeout of calls that must be broken by something else; the bound "well before" it is
// kLong / 2.
constexpr milliseconds kLong{20000};

using testing::ConnectAll;
using testing::WaitUntilBlocked;

// A kill test's rank in its own process: its communicator under `prefix` over the file store.
StatusOr<std::unique_ptr<Communicator>> ConnectKillTestRank(testing::FileKeyValueStore* store,
                                                            const std::string& prefix, int rank,
                                                            int size) {
  GlooOptions options;
  options.store = store;
  options.prefix = prefix;
  options.rank = rank;
  options.size = size;
  options.timeout = kCallTimeout;
  options.connect_timeout = milliseconds(10000);
  return CreateGlooCommunicator(options);
}

// One rank of the kill test, in its own process: allreduce in a loop, announce progress, and when
// a call fails write "<code> <monotonic ns>" under result/<rank>. Returns the exit code.
int AllreduceUntilFailure(const std::string& dir, int rank, int size) {
  testing::FileKeyValueStore store(dir);
  auto comm = ConnectKillTestRank(&store, "kill/", rank, size);
  if (!comm.ok()) return 10;
  std::vector<float> data(1 << 16);
  const auto give_up = Clock::now() + std::chrono::seconds(15);
  for (int iter = 0; Clock::now() < give_up; ++iter) {
    std::fill(data.begin(), data.end(), static_cast<float>(rank + 1));
    Status status = (*comm)->Allreduce(data.data(), data.size(), DataType::kFloat32,
                                       ReduceOp::kSum);
    if (!status.ok()) {
      const int64_t at = NowNs();
      // Later calls fail fast with the same code.
      Status again = (*comm)->Barrier();
      if (again.code() != status.code()) return 11;
      (void)store.Set("result/" + std::to_string(rank),
                      std::to_string(static_cast<int>(status.code())) + " " + std::to_string(at));
      return 0;
    }
    if (data[0] != static_cast<float>(size * (size + 1) / 2)) return 12;
    if (iter == 20) (void)store.Set("progress/" + std::to_string(rank), "1");
  }
  return 13;  // nobody failed
}

// Runs `rank_main` for kSize ranks in processes of their own, SIGKILLs rank `victim` once every
// rank made progress, and checks that every survivor failed with kPeerLost or kTimedOut within
// twice the call timeout of the kill (the ranks report it under result/<rank>).
void KillOneRankAndCheckTheSurvivors(int (*rank_main)(const std::string&, int, int), int size,
                                     int victim) {
  TempDir dir;
  testing::FileKeyValueStore store(dir.path());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(rank_main(dir.path(), rank, size));
    pids.push_back(pid);
  }
  std::vector<std::string> progress;
  for (int rank = 0; rank < size; ++rank) progress.push_back("progress/" + std::to_string(rank));
  Status running = store.Wait(progress, milliseconds(15000));
  int64_t killed_at = 0;
  if (running.ok()) {
    killed_at = NowNs();
    ::kill(pids[victim], SIGKILL);
  } else {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
  }
  for (int rank = 0; rank < size; ++rank) {
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pids[rank], &wstatus, 0), pids[rank]);
    if (rank == victim) continue;
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        << "rank " << rank << " status " << wstatus;
  }
  ASSERT_TRUE(running.ok()) << running;
  for (int rank = 0; rank < size; ++rank) {
    if (rank == victim) continue;
    auto result = store.Get("result/" + std::to_string(rank), milliseconds(0));
    ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
    int code = -1;
    long long at = 0;
    ASSERT_EQ(std::sscanf(result->c_str(), "%d %lld", &code, &at), 2);
    EXPECT_TRUE(code == static_cast<int>(StatusCode::kPeerLost) ||
                code == static_cast<int>(StatusCode::kTimedOut))
        << "rank " << rank << " code " << code;
    const auto latency = std::chrono::nanoseconds(at - killed_at);
    std::printf("rank %d: %s %.1f ms after SIGKILL\n", rank,
                StatusCodeName(static_cast<StatusCode>(code)), latency.count() / 1e6);
    EXPECT_LE(latency, 2 * kCallTimeout)
        << "rank " << rank << " noticed after "
        << std::chrono::duration_cast<milliseconds>(latency).count() << " ms";
  }
}

TEST(GlooFailure, SigkilledRankTurnsIntoPeerLostOrTimedOutOnEverySurvivor) {
  KillOneRankAndCheckTheSurvivors(AllreduceUntilFailure, /*size=*/4, /*victim=*/2);
}

// One rank of the ExchangeV kill test: 256 KiB to and from each ring neighbour in a loop, each
// stream cut in two segments, with the same report as AllreduceUntilFailure.
int ExchangeVUntilFailure(const std::string& dir, int rank, int size) {
  testing::FileKeyValueStore store(dir);
  auto comm = ConnectKillTestRank(&store, "killv/", rank, size);
  if (!comm.ok()) return 10;
  constexpr size_t kBytes = 256 << 10;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  std::vector<uint8_t> out(kBytes, static_cast<uint8_t>(rank)), in_next(kBytes), in_prev(kBytes);
  auto halves = [](std::vector<uint8_t>& v) {
    return std::vector<IoSegment>{{v.data(), v.size() / 3},
                                  {v.data() + v.size() / 3, v.size() - v.size() / 3}};
  };
  const auto give_up = Clock::now() + std::chrono::seconds(15);
  for (int iter = 0; Clock::now() < give_up; ++iter) {
    Status status = (*comm)->ExchangeV({{true, next, halves(out)},
                                        {true, prev, halves(out)},
                                        {false, next, halves(in_next)},
                                        {false, prev, halves(in_prev)}},
                                       static_cast<uint32_t>(iter), kCallTimeout);
    if (!status.ok()) {
      const int64_t at = NowNs();
      Status again = (*comm)->ExchangeV({{false, next, halves(in_next)}}, 0, kCallTimeout);
      if (again.code() != status.code()) return 11;
      (void)store.Set("result/" + std::to_string(rank),
                      std::to_string(static_cast<int>(status.code())) + " " + std::to_string(at));
      return 0;
    }
    if (in_next[kBytes - 1] != next || in_prev[0] != prev) return 12;
    if (iter == 20) (void)store.Set("progress/" + std::to_string(rank), "1");
  }
  return 13;  // nobody failed
}

// The same for ExchangeV's own sockets: every survivor, neighbour of the victim or not, fails
// within twice the call timeout.
TEST(GlooFailure, SigkilledRankBreaksExchangeVOnEverySurvivor) {
  KillOneRankAndCheckTheSurvivors(ExchangeVUntilFailure, /*size=*/4, /*victim=*/1);
}

TEST(GlooFailure, TimeoutOnOneRankReachesItsPeersAsPeerLost) {
  // Rank 2 never posts its send. Rank 0 times out after 300 ms (kTimedOut, then fails fast with
  // it); rank 1, blocked on rank 0 with a long timeout, must hear about it at once as kPeerLost.
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "timeout/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  std::atomic<bool> rank1_done{false};
  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    int64_t v = 0;
    ASSERT_TRUE(WaitUntilBlocked(*comms[1]));  // rank 1 is blocked on us before we time out
    Status s = comms[0]->Recv(&v, 8, 2, 0, milliseconds(300));
    EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s;
    EXPECT_EQ(comms[0]->Barrier().code(), StatusCode::kTimedOut);
  });
  threads.emplace_back([&] {
    int64_t v = 0;
    const auto start = Clock::now();
    Status s = comms[1]->Recv(&v, 8, 0, 0, kLong);
    EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
    EXPECT_LT(Clock::now() - start, kLong / 2);
    rank1_done = true;
    rank1_done.notify_all();
  });
  threads.emplace_back([&] {
    int64_t v = 0;
    rank1_done.wait(false);
    EXPECT_EQ(comms[2]->Recv(&v, 8, 0, 0, kLong).code(), StatusCode::kPeerLost);
  });
  for (auto& t : threads) t.join();
}

TEST(GlooFailure, LostPeerReachesRanksThatWereNotTalkingToIt) {
  // Rank 1 waits on rank 0 (healthy), rank 0 waits on rank 2, and rank 2 goes away once both are
  // blocked. Rank 1 must learn of the failure at once instead of waiting out its timeout: rank 0
  // breaks and closes its connections.
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "lost/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      int64_t v = 0;
      const auto start = Clock::now();
      Status s = comms[rank]->Recv(&v, 8, rank == 0 ? 2 : 0, 0, kLong);
      EXPECT_EQ(s.code(), StatusCode::kPeerLost) << "rank " << rank << ": " << s;
      EXPECT_LT(Clock::now() - start, kLong / 2) << "rank " << rank;
      // Broken: later calls fail fast with the same code.
      EXPECT_EQ(comms[rank]->Barrier(kLong).code(), StatusCode::kPeerLost);
    });
  }
  ASSERT_TRUE(WaitUntilBlocked(*comms[0]) && WaitUntilBlocked(*comms[1]));
  comms[2].reset();  // closes its connections, as a dying process would
  for (auto& t : threads) t.join();
}

TEST(GlooFailure, AbortFromAnotherThreadUnblocksRecv) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "abort/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  Status aborted_call, peer_call;
  auto peer_start = Clock::now();
  std::thread rank0([&] {
    int64_t v = 0;
    aborted_call = comms[0]->Recv(&v, 8, 1, 3, kLong);
  });
  std::thread rank1([&] {
    int64_t v = 0;
    peer_start = Clock::now();
    peer_call = comms[1]->Recv(&v, 8, 0, 3, kLong);
  });
  ASSERT_TRUE(WaitUntilBlocked(*comms[0]) && WaitUntilBlocked(*comms[1]));
  const auto abort_start = Clock::now();
  comms[0]->Abort();
  rank0.join();
  EXPECT_EQ(aborted_call.code(), StatusCode::kAborted) << aborted_call;
  EXPECT_LT(Clock::now() - abort_start, kLong / 2);
  // Every later call fails fast with kAborted; Abort() is idempotent.
  comms[0]->Abort();
  int64_t v = 0;
  EXPECT_EQ(comms[0]->Barrier().code(), StatusCode::kAborted);
  EXPECT_EQ(comms[0]->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).code(),
            StatusCode::kAborted);
  // The aborted rank's peer sees the connection go away, well before its own timeout.
  rank1.join();
  EXPECT_EQ(peer_call.code(), StatusCode::kPeerLost) << peer_call;
  EXPECT_LT(Clock::now() - peer_start, kLong / 2);
}

TEST(GlooFailure, AbortWithNoCallInFlightStillReachesPeers) {
  // Abort() on an idle communicator closes its connections itself: the peer blocked on it fails
  // at once.
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "abort_idle/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  Status peer_call;
  const auto start = Clock::now();
  std::thread rank1([&] {
    int64_t v = 0;
    peer_call = comms[1]->Recv(&v, 8, 0, 0, kLong);
  });
  ASSERT_TRUE(WaitUntilBlocked(*comms[1]));
  EXPECT_EQ(GlooWaitsInFlightForTesting(*comms[0]), 0);
  comms[0]->Abort();
  rank1.join();
  EXPECT_EQ(peer_call.code(), StatusCode::kPeerLost) << peer_call;
  EXPECT_LT(Clock::now() - start, kLong / 2);
}

TEST(GlooFailure, FirstErrorInterruptsTheOtherCallsInFlight) {
  // Rank 0 receives from ranks 1 and 2 on two threads (as the reshard's per-peer threads do).
  // Rank 1 is healthy but never sends; rank 2 goes away. The Recv from rank 2 fails with
  // kPeerLost, which breaks the communicator, and the Recv from rank 1 must return with it at
  // once instead of waiting out its timeout.
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "first_error/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  Status from1, from2;
  const auto start = Clock::now();
  std::thread t1([&] {
    int64_t v = 0;
    from1 = comms[0]->Recv(&v, 8, 1, 0, kLong);
  });
  std::thread t2([&] {
    int64_t v = 0;
    from2 = comms[0]->Recv(&v, 8, 2, 0, kLong);
  });
  ASSERT_TRUE(WaitUntilBlocked(*comms[0], 2));
  comms[2].reset();
  t1.join();
  t2.join();
  EXPECT_EQ(from2.code(), StatusCode::kPeerLost) << from2;
  EXPECT_EQ(from1.code(), StatusCode::kPeerLost) << from1;
  EXPECT_LT(Clock::now() - start, kLong / 2);
  // Rank 1 hears of it too: rank 0 closed its connections once both calls had left.
  int64_t v = 0;
  EXPECT_EQ(comms[1]->Recv(&v, 8, 0, 0, kLong).code(), StatusCode::kPeerLost);
}

// Every collective, each blocked because rank 2 never joins: the small allreduce (8 KB), the ring
// allreduce (1 MiB), broadcast, allgather, reduce-scatter and barrier. gloo's own algorithms
// waited out their whole timeout here, their waits deaf to the abort.
TEST(GlooFailure, AbortBreaksEveryBlockedCollectiveAndDestructionWaitsForIt) {
  const std::vector<std::pair<std::string, std::function<Status(Communicator&)>>> calls = {
      {"small_allreduce",
       [](Communicator& c) {
         std::vector<double> d(1000, 1.0);
         return c.Allreduce(d.data(), d.size(), DataType::kFloat64, ReduceOp::kSum, kLong);
       }},
      {"ring_allreduce",
       [](Communicator& c) {
         std::vector<double> d(size_t{1} << 17, 1.0);
         return c.Allreduce(d.data(), d.size(), DataType::kFloat64, ReduceOp::kSum, kLong);
       }},
      {"broadcast",
       [](Communicator& c) {
         std::vector<double> d(1000, 1.0);
         return c.Broadcast(d.data(), d.size(), DataType::kFloat64, 2, kLong);
       }},
      {"allgather",
       [](Communicator& c) {
         std::vector<double> in(100, 1.0), out(300);
         return c.Allgather(in.data(), out.data(), in.size(), DataType::kFloat64, kLong);
       }},
      {"reduce_scatter",
       [](Communicator& c) {
         std::vector<double> in(300, 1.0), out(100);
         return c.ReduceScatter(in.data(), out.data(), out.size(), DataType::kFloat64,
                                ReduceOp::kSum, kLong);
       }},
      {"barrier", [](Communicator& c) { return c.Barrier(kLong); }},
  };
  for (const auto& [name, call] : calls) {
    SCOPED_TRACE(name);
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, "abort_" + name + "/", 3);
    ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
    // Rank 2 never joins; it is blocked in a Recv that the peers' closing breaks.
    Status rank2;
    std::thread bystander([&] {
      int64_t v;
      rank2 = comms[2]->Recv(&v, 8, 0, 0, kLong);
    });
    std::vector<Status> status(2);
    std::vector<std::thread> callers;
    const auto start = Clock::now();
    for (int rank = 0; rank < 2; ++rank) {
      callers.emplace_back([&, rank, call = call] { status[rank] = call(*comms[rank]); });
    }
    for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(WaitUntilBlocked(*comms[rank]));
    for (int rank = 0; rank < 2; ++rank) {
      comms[rank]->Abort();
      comms[rank].reset();  // must wait for the caller to leave the context
    }
    for (auto& t : callers) t.join();
    bystander.join();
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(status[rank].code() == StatusCode::kAborted ||
                  status[rank].code() == StatusCode::kPeerLost)
          << "rank " << rank << ": " << status[rank];
    }
    EXPECT_LT(Clock::now() - start, kLong / 2);
    EXPECT_EQ(rank2.code(), StatusCode::kPeerLost) << rank2;
  }
}

// Several rounds of every collective and a point-to-point ring on `comms` (ranks as threads),
// checking the results.
void ExpectHealthy(std::vector<std::unique_ptr<Communicator>>& comms, int rounds) {
  const int n = static_cast<int>(comms.size());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      Communicator& c = *comms[rank];
      for (int round = 0; round < rounds; ++round) {
        int64_t x = rank + round;
        ASSERT_TRUE(c.Allreduce(&x, 1, DataType::kInt64, ReduceOp::kSum, kLong).ok());
        EXPECT_EQ(x, n * (n - 1) / 2 + n * round);
        std::vector<double> big(size_t{1} << 15, rank + 1.0);  // 256 KiB: the ring
        ASSERT_TRUE(c.Allreduce(big.data(), big.size(), DataType::kFloat64, ReduceOp::kSum,
                                kLong)
                        .ok());
        EXPECT_EQ(big.front(), n * (n + 1) / 2.0);
        EXPECT_EQ(big.back(), n * (n + 1) / 2.0);
        int64_t b = rank == round % n ? 1000 + round : -1;
        ASSERT_TRUE(c.Broadcast(&b, 1, DataType::kInt64, round % n, kLong).ok());
        EXPECT_EQ(b, 1000 + round);
        std::vector<int64_t> all(n, -1);
        int64_t mine = rank * 10 + round;
        ASSERT_TRUE(c.Allgather(&mine, all.data(), 1, DataType::kInt64, kLong).ok());
        for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], r * 10 + round);
        int64_t out = rank, in = -1;
        std::vector<PointToPoint> ring = {{true, &out, 8, (rank + 1) % n},
                                          {false, &in, 8, (rank + n - 1) % n}};
        ASSERT_TRUE(c.Exchange(ring, 7, kLong).ok());
        EXPECT_EQ(in, (rank + n - 1) % n);
        ASSERT_TRUE(c.Barrier(kLong).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
}

// Two communicators of this process share the one gloo device (same bind address): the old
// generation is aborted while calls block on it and while a call of the new one is in flight.
// The new one must keep working; it would fail (kPeerLost) if the abort touched its sockets.
TEST(GlooSharedDevice, AbortOfOneCommunicatorLeavesAnotherOnTheSameDeviceWorking) {
  InMemoryKeyValueStore store;
  auto old_gen = ConnectAll(&store, "g1/world/", 2);
  auto new_gen = ConnectAll(&store, "g2/world/", 2);
  ASSERT_TRUE(old_gen[0] && old_gen[1] && new_gen[0] && new_gen[1]);
  Status old0, old1, new0;
  int64_t received = -1;
  std::thread t_old0([&] {
    int64_t v;
    old0 = old_gen[0]->Recv(&v, 8, 1, 1, kLong);
  });
  std::thread t_old1([&] {
    int64_t v;
    old1 = old_gen[1]->Recv(&v, 8, 0, 1, kLong);
  });
  std::thread t_new0([&] { new0 = new_gen[0]->Recv(&received, 8, 1, 5, kLong); });
  ASSERT_TRUE(WaitUntilBlocked(*old_gen[0]) && WaitUntilBlocked(*old_gen[1]) &&
              WaitUntilBlocked(*new_gen[0]));
  old_gen[0]->Abort();
  t_old0.join();
  t_old1.join();
  EXPECT_EQ(old0.code(), StatusCode::kAborted) << old0;
  EXPECT_EQ(old1.code(), StatusCode::kPeerLost) << old1;
  old_gen.clear();
  // The new generation's call in flight during the abort completes.
  int64_t payload = 4242;
  Status sent = new_gen[1]->Send(&payload, 8, 0, 5, kLong);
  t_new0.join();
  ASSERT_TRUE(sent.ok()) << sent;
  ASSERT_TRUE(new0.ok()) << new0;
  EXPECT_EQ(received, 4242);
  ExpectHealthy(new_gen, 10);
}

// The old generation broke first (its peer left, so its connections are closed and their fd
// numbers free for reuse); the next generation connects, likely on the same fd numbers; only then
// is the old one aborted. Remembering fd numbers and shutting them down would break the new one.
TEST(GlooSharedDevice, AbortOfABrokenOldGenerationLeavesTheNextOneAlone) {
  InMemoryKeyValueStore store;
  auto old_gen = ConnectAll(&store, "g1/world/", 3);
  ASSERT_TRUE(old_gen[0] && old_gen[1] && old_gen[2]);
  old_gen[2].reset();
  int64_t v = 0;
  EXPECT_EQ(old_gen[0]->Recv(&v, 8, 2, 0, kLong).code(), StatusCode::kPeerLost);
  EXPECT_EQ(old_gen[1]->Recv(&v, 8, 0, 0, kLong).code(), StatusCode::kPeerLost);
  auto new_gen = ConnectAll(&store, "g2/world/", 2);
  ASSERT_TRUE(new_gen[0] && new_gen[1]);
  old_gen[0]->Abort();
  old_gen[1]->Abort();
  EXPECT_EQ(old_gen[0]->Barrier().code(), StatusCode::kAborted);
  ExpectHealthy(new_gen, 5);
  old_gen.clear();
  ExpectHealthy(new_gen, 5);
}

}  // namespace
}  // namespace elastra
