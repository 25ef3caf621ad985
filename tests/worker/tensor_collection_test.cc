#include "elastra/tensor_collection.h"

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

}  // namespace
}  // namespace elastra
