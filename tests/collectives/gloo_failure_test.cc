// Failure behaviour of the Gloo backend: a SIGKILLed rank (one process per rank, file store),
// a timeout on one rank, Abort() from another thread, and destruction after Abort().
// The only timing bounds are liveness bounds: "within 2x the call timeout", or "before the
// call's own (long) timeout".
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
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

constexpr milliseconds kCallTimeout{500};

// One rank of the kill test, in its own process: allreduce in a loop, announce progress, and when
// a call fails write "<code> <monotonic ns>" under result/<rank>. Returns the exit code.
int AllreduceUntilFailure(const std::string& dir, int rank, int size) {
  testing::FileKeyValueStore store(dir);
  GlooOptions options;
  options.store = &store;
  options.prefix = "kill/";
  options.rank = rank;
  options.size = size;
  options.timeout = kCallTimeout;
  options.connect_timeout = milliseconds(10000);
  auto comm = CreateGlooCommunicator(options);
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

TEST(GlooFailure, SigkilledRankTurnsIntoPeerLostOrTimedOutOnEverySurvivor) {
  constexpr int kSize = 4;
  constexpr int kVictim = 2;
  TempDir dir;
  testing::FileKeyValueStore store(dir.path());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kSize; ++rank) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(AllreduceUntilFailure(dir.path(), rank, kSize));
    pids.push_back(pid);
  }
  std::vector<std::string> progress;
  for (int rank = 0; rank < kSize; ++rank) progress.push_back("progress/" + std::to_string(rank));
  Status running = store.Wait(progress, milliseconds(15000));
  int64_t killed_at = 0;
  if (running.ok()) {
    killed_at = NowNs();
    ::kill(pids[kVictim], SIGKILL);
  } else {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
  }
  for (int rank = 0; rank < kSize; ++rank) {
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pids[rank], &wstatus, 0), pids[rank]);
    if (rank == kVictim) continue;
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        << "rank " << rank << " status " << wstatus;
  }
  ASSERT_TRUE(running.ok()) << running;
  for (int rank = 0; rank < kSize; ++rank) {
    if (rank == kVictim) continue;
    auto result = store.Get("result/" + std::to_string(rank), milliseconds(0));
    ASSERT_TRUE(result.ok()) << "rank " << rank << ": " << result.status();
    int code = -1;
    long long at = 0;
    ASSERT_EQ(std::sscanf(result->c_str(), "%d %lld", &code, &at), 2);
    EXPECT_TRUE(code == static_cast<int>(StatusCode::kPeerLost) ||
                code == static_cast<int>(StatusCode::kTimedOut))
        << "rank " << rank << " code " << code;
    const auto latency = std::chrono::nanoseconds(at - killed_at);
    std::printf("rank %d: %s %.1f ms after SIGKILL\n", rank, StatusCodeName(static_cast<StatusCode>(code)),
                latency.count() / 1e6);
    EXPECT_LE(latency, 2 * kCallTimeout)
        << "rank " << rank << " noticed after "
        << std::chrono::duration_cast<milliseconds>(latency).count() << " ms";
  }
}

TEST(GlooFailure, TimeoutOnOneRankReachesItsPeersAsPeerLost) {
  // Rank 2 never posts its send. Rank 0 times out after 300 ms (kTimedOut, then fails fast with
  // it); rank 1, blocked on rank 0 with a 20 s timeout, must hear about it at once as kPeerLost.
  InMemoryKeyValueStore store;
  constexpr milliseconds kLong{20000};
  std::atomic<bool> done{false};
  testing::Spawn(&store, "timeout/", 3, [&](Communicator& comm) {
    int64_t v = 0;
    if (comm.rank() == 0) {
      Status s = comm.Recv(&v, 8, 2, 0, milliseconds(300));
      EXPECT_EQ(s.code(), StatusCode::kTimedOut) << s;
      Status again = comm.Barrier();
      EXPECT_EQ(again.code(), StatusCode::kTimedOut) << again;
    } else if (comm.rank() == 1) {
      const auto start = Clock::now();
      Status s = comm.Recv(&v, 8, 0, 0, kLong);
      EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
      EXPECT_LT(Clock::now() - start, kLong / 2);
      done = true;
    } else {
      while (!done) std::this_thread::sleep_for(milliseconds(5));
      Status s = comm.Recv(&v, 8, 0, 0, kLong);
      EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
    }
  });
}

TEST(GlooFailure, LostPeerReachesRanksThatWereNotTalkingToIt) {
  // Rank 1 waits on rank 0 (healthy), rank 0 waits on rank 2, and rank 2 goes away. Rank 1 must
  // learn of the failure at once instead of waiting out its 20 s timeout. (This gloo already
  // fails every pending buffer of a context when any of its pairs fails; the backend's own
  // shutdown-on-error is a second line that does not depend on that.)
  InMemoryKeyValueStore store;
  constexpr milliseconds kLong{20000};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      auto comm = testing::Connect(&store, "lost/", rank, 3);
      ASSERT_NE(comm, nullptr);
      int64_t v = 0;
      const auto start = Clock::now();
      if (rank == 2) {
        std::this_thread::sleep_for(milliseconds(200));
        comm.reset();  // closes its connections, as a dying process would
        return;
      }
      Status s = comm->Recv(&v, 8, rank == 0 ? 2 : 0, 0, kLong);
      EXPECT_EQ(s.code(), StatusCode::kPeerLost) << "rank " << rank << ": " << s;
      EXPECT_LT(Clock::now() - start, kLong / 2) << "rank " << rank;
      // Broken: later calls fail fast with the same code.
      EXPECT_EQ(comm->Barrier(kLong).code(), StatusCode::kPeerLost);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooFailure, AbortFromAnotherThreadUnblocksRecv) {
  InMemoryKeyValueStore store;
  constexpr milliseconds kLong{20000};
  testing::Spawn(&store, "abort/", 2, [&](Communicator& comm) {
    int64_t v = 0;
    const auto start = Clock::now();
    if (comm.rank() == 0) {
      std::thread aborter([&] {
        std::this_thread::sleep_for(milliseconds(200));
        comm.Abort();
      });
      Status s = comm.Recv(&v, 8, 1, 3, kLong);
      aborter.join();
      EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
      EXPECT_LT(Clock::now() - start, kLong / 2);
      // Every later call fails fast with kAborted; Abort() is idempotent.
      comm.Abort();
      EXPECT_EQ(comm.Barrier().code(), StatusCode::kAborted);
      EXPECT_EQ(comm.Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).code(),
                StatusCode::kAborted);
    } else {
      // The aborted rank's peer sees the connection go away.
      Status s = comm.Recv(&v, 8, 0, 3, kLong);
      EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
      EXPECT_LT(Clock::now() - start, kLong / 2);
    }
  });
}

// Both allreduce paths: the small exchange (8 KB) and the ring (1 MiB); gloo's own allreduce
// waited out its whole timeout here, its wait for a peer's notification deaf to the abort.
TEST(GlooFailure, AbortBreaksABlockedCollectiveAndDestructionWaitsForIt) {
  constexpr milliseconds kLong{20000};
  for (size_t count : {size_t{1000}, size_t{1} << 17}) {
    InMemoryKeyValueStore store;
    const std::string prefix = "abort_allreduce_" + std::to_string(count) + "/";
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 3; ++rank) {
      threads.emplace_back([&, rank] {
        auto comm = testing::Connect(&store, prefix, rank, 3);
        ASSERT_NE(comm, nullptr);
        if (rank == 2) {
          // Never joins the allreduce; blocked in a Recv that the peers' shutdown breaks.
          int64_t v;
          EXPECT_EQ(comm->Recv(&v, 8, 0, 0, kLong).code(), StatusCode::kPeerLost);
          return;
        }
        std::vector<double> data(count, 1.0);
        Status status;
        const auto start = Clock::now();
        std::thread caller([&] {
          status = comm->Allreduce(data.data(), data.size(), DataType::kFloat64, ReduceOp::kSum,
                                   kLong);
        });
        std::this_thread::sleep_for(milliseconds(200));
        comm->Abort();
        comm.reset();  // must wait for `caller` to leave the context
        caller.join();
        EXPECT_TRUE(status.code() == StatusCode::kAborted ||
                    status.code() == StatusCode::kPeerLost)
            << status;
        EXPECT_LT(Clock::now() - start, kLong / 2) << count << " doubles";
      });
    }
    for (auto& t : threads) t.join();
  }
}

}  // namespace
}  // namespace elastra
