#include "elastra/data_type.h"

namespace elastra {

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt64: return 8;
    case DataType::kUint8: return 1;
  }
  return 0;
}

const char* DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt64: return "int64";
    case DataType::kUint8: return "uint8";
  }
  return "unknown";
}

}  // namespace elastra
