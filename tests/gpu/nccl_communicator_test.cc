// Tests of the NCCL backend. The store and argument tests run everywhere; the rest need a GPU and
// skip without one. Multi-rank tests run one process per rank (nccl_rank_helper), which lets two
// or three ranks share one GPU (see rank_process.h); each helper checks the values itself and
// reports through its exit code, the store and its output.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "collectives/nccl/nccl_communicator.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/rank_process.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;
using testing::FileKeyValueStore;

#define SKIP_WITHOUT_GPU()                                             \
  do {                                                                 \
    if (!NcclDeviceAvailable()) GTEST_SKIP() << "no CUDA device here"; \
  } while (0)

class TempDir {
 public:
  TempDir() : path_(testing::MakeTempDir("elastra_nccl")) {}
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `scenario` as `size` helper processes and returns their exit codes.
std::vector<int> RunRanks(const std::string& scenario, int size, const std::string& dir,
                          Ms deadline, int timeout_ms = 3000) {
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pids.push_back(testing::SpawnRank(
        ELASTRA_NCCL_RANK_HELPER,
        {scenario, std::to_string(r), std::to_string(size), dir, scenario + "/",
         std::to_string(timeout_ms)},
        r));
  }
  return testing::WaitRanks(pids, Clock::now() + deadline);
}

// --- Everywhere ---------------------------------------------------------------------------------

TEST(FileKeyValueStoreTest, GetBlocksUntilAnotherProcessSets) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  FileKeyValueStore store(dir.path());
  auto t0 = Clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    std::this_thread::sleep_for(Ms(200));
    FileKeyValueStore child(dir.path());
    _exit(child.Set("g0/world/nccl_id", std::string("a\0b", 3)).ok() ? 0 : 1);
  }
  auto value = store.Get("g0/world/nccl_id", Ms(5000));
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));
  EXPECT_GE(Clock::now() - t0, Ms(150));
  auto codes = testing::WaitRanks({pid}, Clock::now() + Ms(5000));
  EXPECT_EQ(codes[0], 0);
}

TEST(FileKeyValueStoreTest, GetAndWaitTimeOut) {
  TempDir dir;
  FileKeyValueStore store(dir.path());
  auto t0 = Clock::now();
  auto value = store.Get("missing", Ms(100));
  EXPECT_EQ(value.status().code(), StatusCode::kTimedOut);
  EXPECT_GE(Clock::now() - t0, Ms(100));
  ASSERT_TRUE(store.Set("present", "1").ok());
  EXPECT_EQ(store.Wait({"present", "missing"}, Ms(50)).code(), StatusCode::kTimedOut);
  EXPECT_TRUE(store.Wait({"present"}, Ms(50)).ok());
}

TEST(FileKeyValueStoreTest, AddIsAtomicAcrossThreads) {
  TempDir dir;
  FileKeyValueStore store(dir.path());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) ASSERT_TRUE(store.Add("counter", 2).ok());
    });
  }
  for (auto& t : threads) t.join();
  auto v = store.Add("counter", 0);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 400);
}

TEST(NcclOptionsTest, BadOptionsAreInvalidArgument) {
  InMemoryKeyValueStore store;
  NcclOptions o;
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);  // no store
  o.store = &store;
  o.size = 0;
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  o.size = 2;
  o.rank = 2;
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = -1;
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  o.rank = 0;
  o.device = -1;
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  o.device = 0;
  o.timeout = Ms(0);
  EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
}

// Without a GPU: a clean kUnavailable (never a crash or a hang). With one: a device this process
// cannot see is kInvalidArgument.
TEST(NcclOptionsTest, MissingDeviceIsReported) {
  InMemoryKeyValueStore store;
  NcclOptions o;
  o.store = &store;
  o.prefix = "missing/";
  if (NcclDeviceAvailable()) {
    o.device = 1000;
    EXPECT_EQ(CreateNcclCommunicator(o).status().code(), StatusCode::kInvalidArgument);
  } else {
    auto c = CreateNcclCommunicator(o);
    EXPECT_EQ(c.status().code(), StatusCode::kUnavailable) << c.status();
  }
}

// --- One GPU, in this process -------------------------------------------------------------------

TEST(NcclSingleRankTest, AllreduceValidationAndAbort) {
  SKIP_WITHOUT_GPU();
  InMemoryKeyValueStore store;
  NcclOptions o;
  o.store = &store;
  o.prefix = "single/";
  auto made = CreateNcclCommunicator(o);
  ASSERT_TRUE(made.ok()) << made.status();
  NcclCommunicator& comm = **made;
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_NE(comm.stream(), nullptr);
  EXPECT_TRUE(store.Get("single/nccl_id", Ms(0)).ok());  // the id went through the store

  std::vector<double> host = {1.5, -2.0, 3.25};
  double* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, sizeof(double) * 3), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), sizeof(double) * 3, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE(comm.Allreduce(dev, 3, DataType::kFloat64, ReduceOp::kMax).ok());
  std::vector<double> out(3);
  ASSERT_EQ(cudaMemcpy(out.data(), dev, sizeof(double) * 3, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, host);

  EXPECT_EQ(comm.Allreduce(host.data(), 3, DataType::kFloat64, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Allreduce(nullptr, 3, DataType::kFloat64, ReduceOp::kSum).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Broadcast(dev, 3, DataType::kFloat64, 1).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm.health().ok());
  EXPECT_TRUE(comm.Barrier().ok());

  comm.Abort();
  EXPECT_EQ(comm.Allreduce(dev, 3, DataType::kFloat64, ReduceOp::kSum).code(),
            StatusCode::kAborted);
  EXPECT_EQ(comm.health().code(), StatusCode::kAborted);
  comm.Abort();  // idempotent
  made->reset();
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
}

TEST(NcclSingleRankTest, MissingRankZeroTimesOut) {
  SKIP_WITHOUT_GPU();
  InMemoryKeyValueStore store;
  NcclOptions o;
  o.store = &store;
  o.prefix = "lonely/";
  o.rank = 1;
  o.size = 2;
  o.connect_timeout = Ms(300);
  auto t0 = Clock::now();
  auto made = CreateNcclCommunicator(o);
  EXPECT_EQ(made.status().code(), StatusCode::kTimedOut) << made.status();
  EXPECT_LT(Clock::now() - t0, Ms(5000));  // includes CUDA context creation when run alone
}

// --- Several ranks, one process each ------------------------------------------------------------

class NcclMultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NcclDeviceAvailable()) GTEST_SKIP() << "no CUDA device here";
    ASSERT_FALSE(dir_.path().empty());
  }
  TempDir dir_;
};

TEST_F(NcclMultiProcessTest, CollectivesTwoRanks) {
  auto codes = RunRanks("collectives", 2, dir_.path(), Ms(60000));
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

TEST_F(NcclMultiProcessTest, CollectivesThreeRanks) {
  auto codes = RunRanks("collectives", 3, dir_.path(), Ms(60000));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST_F(NcclMultiProcessTest, SplitAndPlannedShrinkThreeRanks) {
  auto codes = RunRanks("split", 3, dir_.path(), Ms(60000));
  EXPECT_EQ(codes, std::vector<int>({0, 0, 0}));
}

TEST_F(NcclMultiProcessTest, TimeoutAndAbortBreakHungCollectives) {
  auto codes = RunRanks("hang", 2, dir_.path(), Ms(50000));
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

// What a worker's recovery does: an interrupted world (revoked by NCCL 2.28.7+, handle kept)
// shrunk by the survivors; with ncclCommRevoke the device must drain before the shrink (the
// helper checks).
TEST_F(NcclMultiProcessTest, InterruptedWorldIsShrunkBySurvivors) {
  auto codes = RunRanks("interrupt", 3, dir_.path(), Ms(90000));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
}

// SIGKILL the last of three ranks while they loop over allreduces: both survivors must report
// kPeerLost or kTimedOut within twice the collective timeout, then interrupt their world (revoked,
// or released when NCCL reports an error), shrink it or start afresh, and go on.
TEST_F(NcclMultiProcessTest, KilledRankSurvivorsDetectAndShrink) {
  const int kSize = 3;
  const Ms kTimeout(2000);
  FileKeyValueStore store(dir_.path());
  const std::string prefix = "kill/";
  std::vector<pid_t> pids;
  for (int r = 0; r < kSize; ++r) {
    pids.push_back(testing::SpawnRank(
        ELASTRA_NCCL_RANK_HELPER,
        {"kill", std::to_string(r), std::to_string(kSize), dir_.path(), prefix,
         std::to_string(kTimeout.count())},
        r));
  }
  std::vector<std::string> looping;
  for (int r = 0; r < kSize; ++r) looping.push_back(prefix + "looping/" + std::to_string(r));
  Status started = store.Wait(looping, Ms(40000));
  if (!started.ok()) {
    auto codes = testing::WaitRanks(pids, Clock::now());
    FAIL() << "ranks did not start looping: " << started << " exit codes " << codes[0] << ","
           << codes[1] << "," << codes[2];
  }
  ASSERT_EQ(kill(pids[kSize - 1], SIGKILL), 0);
  const auto killed_at = Clock::now();
  for (int r = 0; r < kSize - 1; ++r) {
    auto left = std::chrono::duration_cast<Ms>(killed_at + 2 * kTimeout - Clock::now());
    if (left.count() < 0) left = Ms(0);
    auto code = store.Get(prefix + "error/" + std::to_string(r), left);
    EXPECT_TRUE(code.ok()) << "rank " << r << " did not report the loss within 2x timeout";
    if (code.ok()) {
      EXPECT_TRUE(*code == "kPeerLost" || *code == "kTimedOut") << "rank " << r << ": " << *code;
      std::printf("rank %d saw %s %lld ms after the kill\n", r, code->c_str(),
                  static_cast<long long>(
                      std::chrono::duration_cast<Ms>(Clock::now() - killed_at).count()));
    }
  }
  auto codes = testing::WaitRanks(pids, Clock::now() + Ms(40000));
  EXPECT_EQ(codes[kSize - 1], 128 + SIGKILL);
  // 0: shrink worked, or NCCL refused it (an error on the world) and abort + re-init worked.
  // 3: a shrink NCCL should have accepted failed, abort + re-init worked (a failure).
  // 5: the device did not drain after a revoke or release (a kernel still spins: a failure).
  for (int r = 0; r < kSize - 1; ++r) EXPECT_EQ(codes[r], 0) << "survivor " << r;
}

// Leak check: cycles of init/split/shrink-or-abort on two ranks keep host RSS and device memory
// flat (the helper checks and prints its figures; ELASTRA_LEAK_CYCLES / ELASTRA_LEAK_BUDGET_S).
TEST_F(NcclMultiProcessTest, InitSplitShrinkCyclesDoNotLeak) {
  const char* budget = getenv("ELASTRA_LEAK_BUDGET_S");
  const int budget_s = budget != nullptr ? atoi(budget) : 100;
  auto codes = RunRanks("leak", 2, dir_.path(), Ms(1000 * (budget_s + 60)));
  EXPECT_EQ(codes, std::vector<int>({0, 0}));
}

}  // namespace
}  // namespace elastra
