#include "elastra/tensor_collection.h"

#include <vector>

#include "elastra/device_buffer.h"
#include "state/tensor_collection_access.h"

#include <gtest/gtest.h>

namespace elastra {
namespace {

TEST(TensorCollection, RegistersTensorsAndScalars) {
  TensorCollection c;
  ASSERT_TRUE(c.AddTensor("w", {3, 4}, DataType::kFloat64).ok());
  ASSERT_TRUE(c.AddTensor("b", {4}, DataType::kFloat32).ok());
  ASSERT_TRUE(c.AddScalar("cursor", 7).ok());
  EXPECT_EQ(c.bytes(), 3 * 4 * 8 + 4 * 4u);
  auto w = c.View<double>("w");
  ASSERT_EQ(w.size(), 12u);
  for (double x : w) EXPECT_EQ(x, 0.0);
  w[5] = 2.5;
  EXPECT_EQ(c.View<double>("w")[5], 2.5);
  EXPECT_EQ(c.GetScalar("cursor"), 7);
  c.SetScalar("cursor", 9);
  EXPECT_EQ(c.GetScalar("cursor"), 9);
}

TEST(TensorCollection, RefusesBadRegistrations) {
  TensorCollection c;
  ASSERT_TRUE(c.AddTensor("w", {2}, DataType::kFloat32).ok());
  EXPECT_EQ(c.AddTensor("w", {2}, DataType::kFloat32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AddTensor("", {2}, DataType::kFloat32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AddTensor("neg", {2, -1}, DataType::kFloat32).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.AddTensor("huge", {1 << 30, 1 << 30}, DataType::kFloat64).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(c.AddScalar("s", 1).ok());
  EXPECT_EQ(c.AddScalar("s", 2).code(), StatusCode::kInvalidArgument);
}

TEST(TensorCollection, SignatureTellsDifferentRegistrationsApart) {
  TensorCollection a, b, c;
  ASSERT_TRUE(a.AddTensor("w", {2, 3}, DataType::kFloat32).ok());
  ASSERT_TRUE(b.AddTensor("w", {2, 3}, DataType::kFloat32).ok());
  ASSERT_TRUE(c.AddTensor("w", {3, 2}, DataType::kFloat32).ok());
  EXPECT_EQ(a.Signature(), b.Signature());
  EXPECT_NE(a.Signature(), c.Signature());
  b.View<float>("w")[0] = 1.0f;  // values do not matter
  EXPECT_EQ(a.Signature(), b.Signature());
}

TEST(TensorCollectionDeathTest, WrongViewTypeIsAProgrammingError) {
  TensorCollection c;
  ASSERT_TRUE(c.AddTensor("w", {2}, DataType::kFloat32).ok());
  EXPECT_DEATH(c.View<double>("w"), "float32");
  EXPECT_DEATH(c.View<float>("missing"), "unknown tensor");
}

// Without a device (this build or this machine) SetDevice refuses clearly and the collection
// stays a host collection; the worker's staging calls are no-ops for it.
TEST(TensorCollection, HostCollectionStagingIsANoOp) {
  TensorCollection c;
  ASSERT_TRUE(c.AddTensor("w", {2, 3}, DataType::kFloat64).ok());
  c.View<double>("w")[4] = 1.5;
  ASSERT_TRUE(c.SetDevice(-1).ok());
  EXPECT_EQ(c.device(), -1);
  if (CudaDeviceCount() == 0) {
    Status s = c.SetDevice(0);
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
    EXPECT_EQ(c.device(), -1);
  }
  ASSERT_TRUE(c.MoveToDevice().ok());
  ASSERT_TRUE(TensorCollectionAccess::MoveToHost(c).ok());
  EXPECT_FALSE(c.tensor("w").on_device);
  EXPECT_EQ(c.View<double>("w")[4], 1.5);
  std::vector<double> copy(6, -1.0);
  ASSERT_TRUE(c.CopyToHost(c.tensor("w"), copy.data()).ok());
  EXPECT_EQ(copy[4], 1.5);
  EXPECT_EQ(copy[0], 0.0);
  TensorCollectionAccess::ReleaseShards(c);
  EXPECT_EQ(c.bytes(), 0u);
  EXPECT_TRUE(c.region("w").empty());
}

TEST(TensorCollectionDeathTest, ViewsOfTheWrongMemoryAreProgrammingErrors) {
  TensorCollection c;
  ASSERT_TRUE(c.AddTensor("w", {2}, DataType::kFloat32).ok());
  EXPECT_DEATH(c.DeviceView<float>("w"), "in host memory: use View");
}

TEST(DeviceBuffer, WithoutADeviceAllocationFailsClearly) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present (tests/gpu covers it)";
  auto b = DeviceBuffer::Allocate(0, 1024);
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable) << b.status();
  EXPECT_EQ(DeviceBuffer::Allocate(-1, 16).status().code(), StatusCode::kInvalidArgument);
  DeviceBuffer empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.data(), nullptr);
  int x = 0;
  EXPECT_FALSE(empty.CopyFromHost(&x, sizeof(x)).ok());
  EXPECT_FALSE(PinHostMemory(&x, sizeof(x)).ok());
  std::vector<int> big(16);
  EXPECT_FALSE(CopyDeviceToHost(big.data(), big.data(), 64, 0).ok());
}

}  // namespace
}  // namespace elastra
