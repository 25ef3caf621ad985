// DataType: the element types of tensors, collectives and checkpoints. Thread-safe (pure).
#pragma once

#include <cstddef>

namespace elastra {

enum class DataType : int { kFloat32 = 0, kFloat64 = 1, kInt64 = 2, kUint8 = 3 };

// Bytes per element; 0 for a value outside the enum.
size_t DataTypeSize(DataType type);
// "float32", "float64", "int64", "uint8"; "unknown" for a value outside the enum.
const char* DataTypeName(DataType type);

}  // namespace elastra
