#include "elastra/data_type.h"

#include <bit>

#include "common/logging.h"

namespace elastra {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat64:
      return 8;
    case DataType::kInt64:
      return 8;
    case DataType::kUint8:
      return 1;
    case DataType::kBFloat16:
      return 2;
    case DataType::kFloat16:
      return 2;
    case DataType::kInt32:
      return 4;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kInt64:
      return "int64";
    case DataType::kUint8:
      return "uint8";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kFloat16:
      return "float16";
    case DataType::kInt32:
      return "int32";
  }
  return "unknown";
}

bool IsKnownDataType(int value) { return DataTypeSize(static_cast<DataType>(value)) != 0; }

bool IsHalfType(DataType type) { return type == DataType::kBFloat16 || type == DataType::kFloat16; }

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry into the
  // exponent is the right result (up to infinity).
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // infinity or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
  const int exponent = static_cast<int>(abs >> 23) - 127;
  if (exponent < -25) return sign;  // below half the smallest subnormal: rounds to zero
  uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
  // Bits of the 24-bit mantissa dropped: 13 for a normal half, more for a subnormal one.
  const int shift = exponent < -14 ? 13 + (-14 - exponent) : 13;
  const uint32_t kept = mantissa >> shift;
  const uint32_t rest = mantissa & ((1u << shift) - 1u);
  const uint32_t half_way = 1u << (shift - 1);
  uint32_t rounded = kept + ((rest > half_way || (rest == half_way && (kept & 1u))) ? 1u : 0u);
  if (exponent < -14) return static_cast<uint16_t>(sign | rounded);  // subnormal (may carry up)
  // Normal: rounded holds the implicit bit at bit 10; a carry to bit 11 bumps the exponent.
  const uint32_t biased = static_cast<uint32_t>(exponent + 15);
  return static_cast<uint16_t>(sign + (biased << 10) + rounded - 0x400u);
}

float HalfToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
  if (mantissa == 0) return std::bit_cast<float>(sign);
  // Subnormal: value = mantissa * 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

void WidenToFloat(DataType type, const void* in, float* out, size_t count) {
  const auto* h = static_cast<const uint16_t*>(in);
  if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) out[i] = BFloat16ToFloat(h[i]);
  } else if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) out[i] = HalfToFloat(h[i]);
  } else {
    CHECK(false) << "WidenToFloat of " << DataTypeName(type);
  }
}

void NarrowFromFloat(DataType type, const float* in, void* out, size_t count) {
  auto* h = static_cast<uint16_t*>(out);
  if (type == DataType::kBFloat16) {
    for (size_t i = 0; i < count; ++i) h[i] = FloatToBFloat16(in[i]);
  } else if (type == DataType::kFloat16) {
    for (size_t i = 0; i < count; ++i) h[i] = FloatToHalf(in[i]);
  } else {
    CHECK(false) << "NarrowFromFloat to " << DataTypeName(type);
  }
}

}  // namespace elastra
