// Device state on a real GPU: DeviceBuffer, a TensorCollection whose shards live in device memory
// (the worker's staging calls), and a checkpoint of device shards through a pinned staging image,
// read back from disk. Every test skips where this process sees no CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "elastra/device_buffer.h"
#include "elastra/tensor_collection.h"
#include "worker/collection_adapter.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "state/tensor_collection_access.h"

namespace elastra {
namespace {

#define SKIP_WITHOUT_GPU()                                               \
  do {                                                                   \
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";   \
  } while (0)

size_t FreeDeviceBytes() {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
  return free_bytes;
}

TEST(DeviceBufferGpuTest, AllocatesZeroedAndCopiesBothWays) {
  SKIP_WITHOUT_GPU();
  auto b = DeviceBuffer::Allocate(0, 1 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->size(), 1u << 20);
  EXPECT_EQ(b->device(), 0);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, b->data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);  // cudaMalloc, not managed memory

  std::vector<uint32_t> out(1 << 18, 7);
  ASSERT_TRUE(b->CopyToHost(out.data(), out.size() * 4).ok());
  for (uint32_t v : out) ASSERT_EQ(v, 0u);
  std::vector<uint32_t> in(1000);
  std::iota(in.begin(), in.end(), 1);
  ASSERT_TRUE(b->CopyFromHost(in.data(), in.size() * 4, 4096).ok());
  std::vector<uint32_t> back(1000);
  ASSERT_TRUE(b->CopyToHost(back.data(), back.size() * 4, 4096).ok());
  EXPECT_EQ(back, in);
  ASSERT_TRUE(CopyDeviceToHost(back.data(), static_cast<char*>(b->data()) + 4096, 8, 0).ok());
  EXPECT_EQ(back[0], 1u);
  EXPECT_EQ(back[1], 2u);

  // Out of range: refused, nothing written.
  EXPECT_EQ(b->CopyFromHost(in.data(), 8, (1 << 20) - 4).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(b->CopyToHost(out.data(), (1 << 20) + 1).code(), StatusCode::kInvalidArgument);
  // Moves transfer ownership; Reset frees.
  DeviceBuffer moved = std::move(*b);
  EXPECT_EQ(b->data(), nullptr);
  EXPECT_EQ(moved.size(), 1u << 20);
  moved.Reset();
  EXPECT_EQ(moved.data(), nullptr);

  EXPECT_EQ(DeviceBuffer::Allocate(CudaDeviceCount(), 16).status().code(),
            StatusCode::kUnavailable);
  EXPECT_EQ(DeviceBuffer::Allocate(0, size_t{1} << 50).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(DeviceBufferGpuTest, RepeatedAllocationsLeaveDeviceMemoryFlat) {
  SKIP_WITHOUT_GPU();
  { auto warm = DeviceBuffer::Allocate(0, 64 << 20); }  // context creation is not a leak
  const size_t before = FreeDeviceBytes();
  for (int i = 0; i < 200; ++i) {
    auto b = DeviceBuffer::Allocate(0, 64 << 20);
    ASSERT_TRUE(b.ok()) << b.status();
  }
  const size_t after = FreeDeviceBytes();
  EXPECT_LE(before > after ? before - after : 0, size_t{8} << 20)
      << "free device memory went from " << before << " to " << after;
}

TEST(DeviceBufferGpuTest, PinsAndUnpinsHostMemory) {
  SKIP_WITHOUT_GPU();
  void* p = std::aligned_alloc(4096, 1 << 20);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(PinHostMemory(p, 1 << 20).ok());
  unsigned int flags = 0;
  EXPECT_EQ(cudaHostGetFlags(&flags, p), cudaSuccess);  // only pinned memory has flags
  UnpinHostMemory(p);
  EXPECT_NE(cudaHostGetFlags(&flags, p), cudaSuccess);
  cudaGetLastError();
  UnpinHostMemory(p);  // not pinned any more: a no-op
  std::free(p);
}

TensorCollection MakeState() {
  TensorCollection c;
  EXPECT_TRUE(c.AddTensor("w", {64, 48}, DataType::kFloat64).ok());
  EXPECT_TRUE(c.AddTensor("b", {100}, DataType::kFloat32).ok());
  EXPECT_TRUE(c.AddScalar("data.cursor", 11).ok());
  auto w = c.View<double>("w");
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25 * static_cast<double>(i);
  auto b = c.View<float>("b");
  for (size_t i = 0; i < b.size(); ++i) b[i] = -1.0f * static_cast<float>(i);
  return c;
}

TEST(DeviceStateGpuTest, ShardsMoveToTheDeviceAndBack) {
  SKIP_WITHOUT_GPU();
  TensorCollection c = MakeState();
  ASSERT_TRUE(c.SetDevice(0).ok());
  const size_t free_before = FreeDeviceBytes();
  ASSERT_TRUE(c.MoveToDevice().ok());
  EXPECT_TRUE(c.tensor("w").on_device);
  EXPECT_TRUE(c.tensor("w").data.empty());  // the host copy is given back
  EXPECT_EQ(c.tensor("w").bytes(), 64u * 48 * 8);
  EXPECT_EQ(c.SetDevice(0).code(), StatusCode::kFailedPrecondition);
  auto dw = c.DeviceView<double>("w");
  ASSERT_EQ(dw.size(), 64u * 48);
  cudaPointerAttributes attr{};
  ASSERT_EQ(cudaPointerGetAttributes(&attr, dw.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_DEATH(c.View<double>("w"), "use DeviceView");

  // A kernel-side change (here a memcpy into the device shard) is what commits copy out.
  const double v = 42.5;
  ASSERT_EQ(cudaMemcpy(dw.data() + 7, &v, sizeof(v), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<double> commit(dw.size());
  ASSERT_TRUE(c.CopyToHost(c.tensor("w"), commit.data()).ok());
  EXPECT_EQ(commit[7], 42.5);
  EXPECT_EQ(commit[8], 2.0);

  ASSERT_TRUE(TensorCollectionAccess::MoveToHost(c).ok());
  EXPECT_FALSE(c.tensor("w").on_device);
  EXPECT_EQ(c.View<double>("w")[7], 42.5);
  EXPECT_EQ(c.View<float>("b")[3], -3.0f);
  ASSERT_TRUE(c.MoveToDevice().ok());
  ASSERT_TRUE(TensorCollectionAccess::MoveToHost(c, /*keep_values=*/false).ok());
  EXPECT_EQ(c.View<double>("w")[7], 0.0);  // for a caller that overwrites them (rollback)
  EXPECT_EQ(c.tensor("w").bytes(), 64u * 48 * 8);

  ASSERT_TRUE(c.MoveToDevice().ok());
  TensorCollectionAccess::ReleaseShards(c);
  EXPECT_EQ(c.bytes(), 0u);
  EXPECT_GE(FreeDeviceBytes() + (1 << 20), free_before);  // parking gives the memory back
}

TEST(DeviceStateGpuTest, CheckpointOfDeviceShardsThroughPinnedStaging) {
  SKIP_WITHOUT_GPU();
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("elastra_devckpt_" + std::to_string(getpid()));
  fs::remove_all(root);
  TensorCollection c = MakeState();
  ASSERT_TRUE(c.SetDevice(0).ok());
  ASSERT_TRUE(c.MoveToDevice().ok());

  int pins = 0;
  checkpoint::WriterOptions o;
  o.root = root.string();
  o.copy_from_device = [](std::byte* dst, const std::byte* src, size_t n) {
    return CopyDeviceToHost(dst, src, n, 0);
  };
  o.pin_staging = [&pins](void* p, size_t n) {
    ++pins;
    return PinHostMemory(p, n);
  };
  o.unpin_staging = [](void* p) { UnpinHostMemory(p); };
  checkpoint::ShardDescriptor d;
  {
    auto w = checkpoint::CheckpointWriter::Create(o);
    ASSERT_TRUE(w.ok()) << w.status();
    auto written = (*w)->Write({"job", 3, 1}, checkpoint::ViewOf(c));
    ASSERT_TRUE(written.ok()) << written.status();
    d = *written;
  }
  EXPECT_EQ(pins, 1);
  ASSERT_TRUE(
      checkpoint::CommitCheckpoint({Env::Default(), root.string(), 3}, {"job", 3, 1},
                                   {}, {d})
          .ok());

  // Load into a fresh host collection and compare with the original values.
  TensorCollection loaded_state = MakeState();
  for (auto& t : TensorCollectionAccess::Tensors(loaded_state)) {
    std::fill(t.data.begin(), t.data.end(), 0);
  }
  auto loaded = checkpoint::LoadLatest(Env::Default(), root.string(),
                                       checkpoint::RequestsFor(loaded_state));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_TRUE(checkpoint::RestoreInto(std::move(*loaded), &loaded_state).ok());
  TensorCollection expected = MakeState();
  EXPECT_EQ(std::memcmp(loaded_state.View<double>("w").data(), expected.View<double>("w").data(),
                        64 * 48 * 8),
            0);
  EXPECT_EQ(loaded_state.View<float>("b")[99], -99.0f);
  EXPECT_EQ(loaded_state.GetScalar("data.cursor"), 11);
  // A device collection refuses a load straight into device shards.
  auto again = checkpoint::LoadLatest(Env::Default(), root.string(),
                                      checkpoint::RequestsFor(c));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(checkpoint::RestoreInto(std::move(*again), &c).code(),
            StatusCode::kFailedPrecondition);
  fs::remove_all(root);
}

}  // namespace
}  // namespace elastra
