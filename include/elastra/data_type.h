// DataType: the element types of tensors, collectives and checkpoints, and the conversions of the
// two 16-bit float types to and from float32. Thread-safe (pure).
#pragma once

#include <cstddef>
#include <cstdint>

namespace elastra {

// The values are stored in checkpoint manifests: never renumber one.
enum class DataType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kInt64 = 2,
  kUint8 = 3,
  kBFloat16 = 4,  // bfloat16: 1 sign, 8 exponent, 7 mantissa bits (as __nv_bfloat16, c10::BFloat16)
  kFloat16 = 5,   // IEEE 754 binary16 (as __half, c10::Half)
  kInt32 = 6,
};

// Bytes per element; 0 for a value outside the enum.
size_t DataTypeSize(DataType type);
// "float32", "float64", "int64", "uint8", "bfloat16", "float16", "int32"; "unknown" for a value
// outside the enum.
const char* DataTypeName(DataType type);
// True for a value of the enum (a number read from outside may be none).
bool IsKnownDataType(int value);
// kBFloat16 and kFloat16: the types whose sums are accumulated in float32 and rounded once.
bool IsHalfType(DataType type);

// bfloat16 <-> float32. To bfloat16 rounds to nearest, ties to even; a NaN stays a (quiet) NaN.
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);
// binary16 <-> float32. To binary16 rounds to nearest, ties to even, with subnormals, overflow to
// infinity, and NaN kept a (quiet) NaN.
uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);

// Widens `count` elements of a half type (IsHalfType) to float32, and narrows them back rounding
// once to nearest-even. CHECK-fails on any other type.
void WidenToFloat(DataType type, const void* in, float* out, size_t count);
void NarrowFromFloat(DataType type, const float* in, void* out, size_t count);

}  // namespace elastra
