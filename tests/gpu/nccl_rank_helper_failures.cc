// nccl_rank_helper's failure scenarios (see nccl_rank_helper.cc): a rank that never joins (hang),
// a rank SIGKILLed mid-loop (kill), a hung collective interrupted and shrunk (interrupt), and
// memory that must not grow over many communicators (leak).
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu/nccl_rank_helper.h"

namespace elastra {

// Rank 1 never joins a collective: rank 0 sees kTimedOut on one communicator, then Abort() from
// another thread breaks a collective that would hang for 30 s on a second one.
int ScenarioHang(const Args& a, KeyValueStore& store) {
  NcclOptions o{&store, a.prefix + "a/", a.rank, a.size, 0, a.timeout, Ms(60000)};
  auto first = CreateNcclCommunicator(o);
  REQUIRE_OK(first.status());
  o.prefix = a.prefix + "b/";
  auto second = CreateNcclCommunicator(o);
  REQUIRE_OK(second.status());
  if (a.rank != 0) {
    REQUIRE_OK(store.Get(a.prefix + "rank0_done", Ms(120000)).status());
    (*first)->Abort();
    (*second)->Abort();
    return 0;
  }
  DeviceBuffer<float> buf(1024);
  auto t0 = Clock::now();
  Status s = (*first)->Allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum, Ms(1000));
  auto ms = std::chrono::duration_cast<Ms>(Clock::now() - t0).count();
  EXPECT_TRUE_H(s.code() == StatusCode::kTimedOut, "want kTimedOut, got %s", s.ToString().c_str());
  EXPECT_TRUE_H(ms >= 950 && ms < 2500, "timeout after %lld ms, want ~1000", (long long)ms);
  t0 = Clock::now();
  s = (*first)->Allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum, Ms(1000));
  ms = std::chrono::duration_cast<Ms>(Clock::now() - t0).count();
  EXPECT_TRUE_H(s.code() == StatusCode::kTimedOut && ms < 200,
                "broken communicator must fail fast with the same code: %s after %lld ms",
                s.ToString().c_str(), (long long)ms);

  NcclCommunicator* victim = second->get();
  std::thread aborter([victim] {
    std::this_thread::sleep_for(Ms(500));
    victim->Abort();
  });
  t0 = Clock::now();
  s = victim->Allreduce(buf.get(), 1024, DataType::kFloat32, ReduceOp::kSum, Ms(30000));
  ms = std::chrono::duration_cast<Ms>(Clock::now() - t0).count();
  aborter.join();
  EXPECT_TRUE_H(s.code() == StatusCode::kAborted, "want kAborted, got %s", s.ToString().c_str());
  EXPECT_TRUE_H(ms < 5000, "Abort() took %lld ms to break the call", (long long)ms);
  s = victim->Barrier(Ms(1000));
  EXPECT_TRUE_H(s.code() == StatusCode::kAborted, "after abort: %s", s.ToString().c_str());
  std::printf("hang: timeout detected, abort broke the hung call after %lld ms\n", (long long)ms);
  // Release the communicators (ncclCommAbort ends the hung kernel) before `buf` is freed: cudaFree
  // synchronizes the device and would wait for that kernel forever.
  first->reset();
  second->reset();
  REQUIRE_OK(store.Set(a.prefix + "rank0_done", "1"));
  return g_failures == 0 ? 0 : 1;
}

namespace {

// Whether the device drains within `limit`: cudaDeviceSynchronize on a helper thread. A kernel
// that still spins on a dead peer would block it, and any cudaFree, forever; then the process
// cannot even free its buffers, so it exits here (code 5) instead of hanging.
void RequireDeviceDrains(Ms limit, const char* after) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([done] {
    cudaDeviceSynchronize();
    done->store(true);
  }).detach();
  const auto end = Clock::now() + limit;
  while (!done->load() && Clock::now() < end) std::this_thread::sleep_for(Ms(10));
  if (!done->load()) {
    std::fprintf(stderr, "FAIL rank %d: the device did not drain within %lld ms after %s\n", g_rank,
                 static_cast<long long>(limit.count()), after);
    std::fflush(nullptr);
    std::_Exit(5);
  }
}

}  // namespace

// Allreduces in a loop until the test SIGKILLs the last rank; survivors report the error and
// recover as a worker does: Interrupt() (NCCL 2.28.7+ revokes the world when NCCL reports no
// error; an error releases it, NCCL would never shrink it), Quiesce(), then shrink
// (NCCL_SHRINK_ABORT) when every survivor can, otherwise abort and re-init. Exit 0: either worked;
// 3: a shrink NCCL should have accepted failed but abort + re-init worked; 5: the device did not
// drain although NCCL stopped the kernels; other: failure.
int ScenarioKill(const Args& a, KeyValueStore& store) {
  NcclOptions o{&store, a.prefix, a.rank, a.size, 0, a.timeout, Ms(60000)};
  auto made = CreateNcclCommunicator(o);
  REQUIRE_OK(made.status());
  std::unique_ptr<NcclCommunicator> world = std::move(made).value();
  const size_t kCount = 1024;
  DeviceBuffer<float> buf(kCount);
  std::vector<float> in(kCount, static_cast<float>(a.rank + 1));
  const float want = a.size * (a.size + 1) / 2.0f;
  Status err;
  for (int i = 0; i < 1000000; ++i) {
    buf.Upload(in);
    err = world->Allreduce(buf.get(), kCount, DataType::kFloat32, ReduceOp::kSum);
    if (!err.ok()) break;
    auto out = buf.Download();
    EXPECT_TRUE_H(out[0] == want && out[kCount - 1] == want, "iteration %d: %g", i, out[0]);
    if (g_failures) return 1;
    if (i == 3) REQUIRE_OK(store.Set(a.prefix + "looping/" + std::to_string(a.rank), "1"));
  }
  std::printf("rank %d: allreduce loop ended with %s\n", a.rank, err.ToString().c_str());
  REQUIRE_OK(store.Set(a.prefix + "error/" + std::to_string(a.rank),
                       StatusCodeName(err.code())));
  if (err.code() != StatusCode::kPeerLost && err.code() != StatusCode::kTimedOut) return 2;

  const int lost = a.size - 1;
  // NCCL 2.28 refuses to shrink a communicator whose state is an error: over sockets the proxy
  // usually sees the killed rank's connections close (kPeerLost above), and a revoke does not
  // clear the proxy's error. The survivors agree, as the worker does: shrink only when every one
  // of them can, otherwise abort and start afresh.
  const bool error_before = !world->CanMakeChild();
  world->Interrupt();
  const Status settled = world->Quiesce(Ms(10000));
  std::printf(
      "rank %d: NCCL state before interrupt %s; ncclCommRevoke %s; revoked %d; "
      "quiesce: %s\n",
      a.rank, error_before ? "not shrinkable" : "ok",
      NcclRevokeAvailable() ? "available" : "missing", world->revoked() ? 1 : 0,
      settled.ToString().c_str());
  // Broken with the error the loop ended with (a timed-out call stays kTimedOut), or kPeerLost.
  EXPECT_TRUE_H(world->health().code() == StatusCode::kPeerLost ||
                    world->health().code() == err.code(),
                "health after interrupt: %s", world->health().ToString().c_str());
  if (settled.ok()) {
    // NCCL reports success: either revoked and quiescent (its streams drained: the kernel is
    // over), or no revoke in this libnccl (the kernel may still spin until the shrink).
    EXPECT_TRUE_H(world->CanMakeChild(), "quiescent but NCCL refuses a child");
    if (NcclRevokeAvailable()) {
      EXPECT_TRUE_H(world->revoked(), "ncclCommRevoke exists but the world was not revoked");
      RequireDeviceDrains(Ms(10000), "the revoke");
    }
  } else if (settled.code() != StatusCode::kTimedOut) {
    // Released with ncclCommAbort, which ends the kernels before it returns.
    EXPECT_TRUE_H(!world->CanMakeChild(), "released world offers a child");
    RequireDeviceDrains(Ms(10000), "the release");
  }
  REQUIRE_OK(store.Set(a.prefix + "can_shrink/" + std::to_string(a.rank),
                       world->CanMakeChild() ? "1" : "0"));
  bool all_can = true;
  for (int r = 0; r < lost; ++r) {
    auto v = store.Get(a.prefix + "can_shrink/" + std::to_string(r), Ms(60000));
    REQUIRE_OK(v.status());
    all_can = all_can && *v == "1";
  }
  // The survivors drop the old world, start NCCL afresh and check an allreduce on the new one:
  // 0 when it sums right, 1 otherwise.
  auto reinit = [&]() -> int {
    world->Abort();
    world.reset();
    NcclOptions again{&store, a.prefix + "reinit/", a.rank, a.size - 1, 0, a.timeout, Ms(60000)};
    auto fresh = CreateNcclCommunicator(again);
    REQUIRE_OK(fresh.status());
    auto sum = SumOf(**fresh, a.rank + 1);
    REQUIRE_OK(sum.status());
    EXPECT_TRUE_H(*sum == (a.size - 1) * a.size / 2, "after re-init: %" PRId64, *sum);
    return g_failures == 0 ? 0 : 1;
  };
  if (!all_can) {
    std::printf(
        "rank %d: a survivor's world cannot be shrunk (NCCL error or still in progress); "
        "abort + re-init\n",
        a.rank);
    return reinit();
  }
  auto t0 = Clock::now();
  auto small = world->Shrink({lost});
  const auto shrink_ms = std::chrono::duration_cast<Ms>(Clock::now() - t0).count();
  if (small.ok()) {
    std::printf("rank %d: world %s and shrunk (abort) in %lld ms\n", a.rank,
                world->revoked() ? "revoked" : "not revoked", (long long)shrink_ms);
    EXPECT_TRUE_H(world->health().code() == StatusCode::kAborted,
                  "parent after abortive shrink: %s", world->health().ToString().c_str());
    NcclCommunicator& comm = **small;
    EXPECT_TRUE_H(comm.size() == a.size - 1 && comm.rank() == a.rank, "shrunk %d/%d",
                  comm.rank(), comm.size());
    for (int i = 0; i < 20; ++i) {
      auto sum = SumOf(comm, a.rank + 1);
      REQUIRE_OK(sum.status());
      EXPECT_TRUE_H(*sum == (a.size - 1) * a.size / 2, "after shrink: %" PRId64, *sum);
    }
    return g_failures == 0 ? 0 : 1;
  }
  std::fprintf(stderr, "FAIL rank %d: Shrink after the loss: %s (after %lld ms); trying re-init\n",
               a.rank, small.status().ToString().c_str(), (long long)shrink_ms);
  return reinit() == 0 ? 3 : 1;  // the shrink all had agreed on failed: exit 3
}

namespace {

size_t RssBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<size_t>(resident) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

Status StoreBarrier(KeyValueStore& store, const std::string& name, int rank, int size) {
  ELASTRA_RETURN_IF_ERROR(store.Set(name + "/" + std::to_string(rank), "1"));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(name + "/" + std::to_string(r));
  return store.Wait(keys, Ms(60000));
}

}  // namespace

// Interrupt() breaks a hung collective without releasing the handle, and the survivors shrink it:
// rank size-1 never joins the allreduce (it waits, then aborts its own communicator); the others'
// allreduce is interrupted from another thread after 300 ms (it must end with kPeerLost, long
// before its 20 s timeout). NCCL reports no error (the silent rank is alive), so with NCCL 2.28.7+
// the world is revoked: once Quiesce() returns, the hung kernel is over (the device drains). Then
// they shrink the interrupted world with NCCL_SHRINK_ABORT and allreduce on the result. The worker
// does the same in a recovery.
int ScenarioInterrupt(const Args& a, KeyValueStore& store) {
  NcclOptions o{&store, a.prefix, a.rank, a.size, 0, Ms(20000), Ms(60000)};
  auto made = CreateNcclCommunicator(o);
  REQUIRE_OK(made.status());
  std::unique_ptr<NcclCommunicator> world = std::move(made).value();
  // One allreduce with every rank first: NCCL connects peers at their first collective, and an
  // allreduce interrupted while connecting leaves the world in ncclInProgress, which NCCL refuses
  // to shrink. A worker's world has run steps before a failure.
  {
    auto warm = SumOf(*world, 1);
    REQUIRE_OK(warm.status());
    EXPECT_TRUE_H(*warm == a.size, "warm-up allreduce %" PRId64, *warm);
  }
  const int silent = a.size - 1;
  if (a.rank == silent) {
    REQUIRE_OK(store.Set(a.prefix + "silent_ready", "1"));
    auto done = store.Get(a.prefix + "survivors_done", Ms(60000));
    world->Abort();
    return done.ok() ? 0 : 4;
  }
  DeviceBuffer<float> buf(4096);
  buf.Upload(std::vector<float>(4096, 1.0f));
  std::thread interrupter([&] {
    std::this_thread::sleep_for(Ms(300));
    world->Interrupt();
  });
  const auto t0 = Clock::now();
  Status s = world->Allreduce(buf.get(), 4096, DataType::kFloat32, ReduceOp::kSum);
  const auto waited = std::chrono::duration_cast<Ms>(Clock::now() - t0).count();
  interrupter.join();
  std::printf("rank %d: interrupted allreduce ended after %lld ms with %s\n", a.rank,
              static_cast<long long>(waited), s.ToString().c_str());
  EXPECT_TRUE_H(s.code() == StatusCode::kPeerLost, "interrupted allreduce: %s",
                s.ToString().c_str());
  EXPECT_TRUE_H(waited < 10000, "interrupt took %lld ms", static_cast<long long>(waited));
  EXPECT_TRUE_H(world->health().code() == StatusCode::kPeerLost, "health after interrupt: %s",
                world->health().ToString().c_str());
  // Later calls fail fast with the same status.
  EXPECT_TRUE_H(world->Barrier(Ms(20000)).code() == StatusCode::kPeerLost, "barrier after interrupt");
  const Status settled = world->Quiesce(Ms(10000));
  std::printf("rank %d: ncclCommRevoke %s; revoked %d; quiesce: %s\n", a.rank,
              NcclRevokeAvailable() ? "available" : "missing", world->revoked() ? 1 : 0,
              settled.ToString().c_str());
  REQUIRE_OK(settled);
  EXPECT_TRUE_H(world->health().code() == StatusCode::kPeerLost, "health after quiesce: %s",
                world->health().ToString().c_str());
  if (NcclRevokeAvailable()) {
    EXPECT_TRUE_H(world->revoked(), "ncclCommRevoke exists but the world was not revoked");
    // The revoke drained NCCL's streams (its abort flag ended the kernel) before NCCL reported
    // ncclSuccess again: nothing runs on the device any more, before any shrink or abort.
    RequireDeviceDrains(Ms(10000), "the revoke");
  }
  EXPECT_TRUE_H(world->CanMakeChild(), "NCCL reports an error on the interrupted world");
  auto small = world->Shrink({silent}, /*abort=*/true);
  REQUIRE_OK(small.status());
  EXPECT_TRUE_H(world->health().code() == StatusCode::kAborted, "parent after the shrink: %s",
                world->health().ToString().c_str());
  EXPECT_TRUE_H((*small)->size() == a.size - 1 && (*small)->rank() == a.rank, "shrunk %d/%d",
                (*small)->rank(), (*small)->size());
  auto sum = SumOf(**small, a.rank + 1);
  REQUIRE_OK(sum.status());
  EXPECT_TRUE_H(*sum == (a.size - 1) * a.size / 2, "after shrink: %" PRId64, *sum);
  REQUIRE_OK(StoreBarrier(store, a.prefix + "shrunk", a.rank, a.size - 1));
  if (a.rank == 0) REQUIRE_OK(store.Set(a.prefix + "survivors_done", "1"));
  return g_failures == 0 ? 0 : 1;
}

// Cycles of init / split / (planned shrink | abort) / teardown. After warm-up, host RSS and the
// device's free memory must stay flat. Env: ELASTRA_LEAK_CYCLES (200), ELASTRA_LEAK_BUDGET_S (100).
int ScenarioLeak(const Args& a, KeyValueStore& store) {
  const int kWarmup = 5;
  const int max_cycles = getenv("ELASTRA_LEAK_CYCLES") ? atoi(getenv("ELASTRA_LEAK_CYCLES")) : 200;
  const double budget_s =
      getenv("ELASTRA_LEAK_BUDGET_S") ? atof(getenv("ELASTRA_LEAK_BUDGET_S")) : 100.0;
  const size_t kRssTolerance = 32u << 20, kDeviceTolerance = 64u << 20;
  CUDA_CHECK(cudaSetDevice(0));
  DeviceBuffer<int64_t> probe(1);  // the context exists before the baseline
  size_t base_rss = 0, base_free = 0, worst_rss = 0, worst_dev = 0;
  auto start = Clock::now(), measured_start = start;
  int cycle = 0;
  for (; cycle < max_cycles; ++cycle) {
    const std::string p = a.prefix + "c" + std::to_string(cycle) + "/";
    {
      NcclOptions o{&store, p, a.rank, a.size, 0, a.timeout, Ms(60000)};
      auto made = CreateNcclCommunicator(o);
      REQUIRE_OK(made.status());
      NcclCommunicator& world = **made;
      auto sum = SumOf(world, a.rank + 1);
      REQUIRE_OK(sum.status());
      EXPECT_TRUE_H(*sum == a.size * (a.size + 1) / 2, "cycle %d world sum %" PRId64, cycle, *sum);
      auto child = world.Split(0, a.size - 1 - a.rank);
      REQUIRE_OK(child.status());
      EXPECT_TRUE_H((*child)->rank() == a.size - 1 - a.rank, "cycle %d child rank", cycle);
      auto csum = SumOf(**child, a.rank + 1);
      REQUIRE_OK(csum.status());
      EXPECT_TRUE_H(*csum == *sum, "cycle %d child sum", cycle);
      if (cycle % 2 == 0) {
        // Planned shrink: rank 1 leaves once rank 0 has its new communicator.
        if (a.rank == 0) {
          auto small = world.Shrink({1});
          REQUIRE_OK(small.status());
          auto ssum = SumOf(**small, 5);
          REQUIRE_OK(ssum.status());
          EXPECT_TRUE_H(*ssum == 5, "cycle %d shrunk sum", cycle);
        }
        REQUIRE_OK(StoreBarrier(store, p + "shrunk", a.rank, a.size));
        world.Abort();
      } else {
        (*child)->Abort();
        world.Abort();
      }
    }
    REQUIRE_OK(StoreBarrier(store, p + "end", a.rank, a.size));
    if (g_failures) return 1;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t rss = RssBytes();
    // The free memory is the device's, other ranks' included: nobody starts the next cycle's
    // communicators before every rank has measured.
    REQUIRE_OK(StoreBarrier(store, p + "measured", a.rank, a.size));
    if (cycle == kWarmup - 1) {
      base_rss = rss;
      base_free = free_b;
      measured_start = Clock::now();
    } else if (cycle >= kWarmup) {
      worst_rss = std::max(worst_rss, rss > base_rss ? rss - base_rss : 0);
      worst_dev = std::max(worst_dev, base_free > free_b ? base_free - free_b : 0);
    }
    // Rank 0 decides whether to go on, so that both ranks stop after the same cycle.
    const std::string go = p + "go";
    if (a.rank == 0) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      REQUIRE_OK(store.Set(go, elapsed < budget_s ? "1" : "0"));
    }
    auto decision = store.Get(go, Ms(60000));
    REQUIRE_OK(decision.status());
    if (*decision != "1") {
      ++cycle;
      break;
    }
  }
  const int measured = cycle - kWarmup;
  const double secs = std::chrono::duration<double>(Clock::now() - measured_start).count();
  const double per_cycle = measured > 0 ? secs / measured : 0;
  std::printf(
      "{\"leak\":{\"rank\":%d,\"cycles\":%d,\"measured_cycles\":%d,\"sec_per_cycle\":%.3f,"
      "\"rss_growth_bytes\":%zu,\"device_growth_bytes\":%zu,\"est_sec_for_200\":%.1f}}\n",
      a.rank, cycle, measured, per_cycle, worst_rss, worst_dev, per_cycle * 200);
  std::fflush(stdout);
  EXPECT_TRUE_H(measured >= 10, "only %d measured cycles within the budget", measured);
  EXPECT_TRUE_H(worst_rss <= kRssTolerance, "host RSS grew by %zu bytes", worst_rss);
  EXPECT_TRUE_H(worst_dev <= kDeviceTolerance, "device memory grew by %zu bytes", worst_dev);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace elastra
