// Device-to-device resharding over NCCL (ExecuteDeviceReshard): a grow, a shrink and a 3-D
// reshape with a permutation, each with one process per worker (device_reshard_helper) on one GPU.
// The helpers check every byte of the new shards themselves. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "elastra/device_buffer.h"
#include "tests/gpu/file_kv_store.h"
#include "tests/gpu/rank_process.h"

namespace elastra {
namespace {

void RunScenario(const std::string& scenario, int workers) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  const std::string dir = testing::MakeTempDir("elastra_devreshard");
  std::vector<pid_t> pids;
  for (int r = 0; r < workers; ++r) {
    pids.push_back(testing::SpawnRank(ELASTRA_DEVICE_RESHARD_HELPER,
                                      {scenario, std::to_string(r), std::to_string(workers), dir},
                                      r));
  }
  auto codes = testing::WaitRanks(pids, std::chrono::steady_clock::now() + std::chrono::seconds(90));
  for (int r = 0; r < workers; ++r) EXPECT_EQ(codes[r], 0) << scenario << " worker " << r;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST(DeviceReshardGpuTest, GrowDpToTp) { RunScenario("grow", 3); }
TEST(DeviceReshardGpuTest, ShrinkTpToPp) { RunScenario("shrink", 3); }
TEST(DeviceReshardGpuTest, ReshapeDpTpToPpTpPermuted) { RunScenario("reshape", 4); }

}  // namespace
}  // namespace elastra
