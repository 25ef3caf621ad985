// A cereal binary output archive that appends to a std::string: the bytes of
// cereal::BinaryOutputArchive (every arithmetic value as it lies in memory, a 64-bit length
// before each string and container), without the std::ostream under it, whose per-field virtual
// writes and buffer growth cost more than the bytes at the coordinator's rate of messages (a
// NewGeneration to each of 16,384 members per change: docs/scale.md). BoundedInputArchive reads
// what it writes. Not thread-safe: one archive, one string, one thread.
#pragma once

#include <cereal/cereal.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace elastra::proto {

class StringOutputArchive
    : public cereal::OutputArchive<StringOutputArchive, cereal::AllowEmptyClassElision> {
 public:
  // Appends to `*out`, which must outlive the archive.
  explicit StringOutputArchive(std::string* out)
      : cereal::OutputArchive<StringOutputArchive, cereal::AllowEmptyClassElision>(this),
        out_(out) {}

  void saveBinary(const void* data, size_t n) {
    out_->append(static_cast<const char*>(data), n);
  }

 private:
  std::string* out_;
};

template <class T>
inline typename std::enable_if<std::is_arithmetic<T>::value, void>::type
CEREAL_SAVE_FUNCTION_NAME(StringOutputArchive& ar, const T& t) {
  ar.saveBinary(std::addressof(t), sizeof(t));
}

template <class T>
inline void CEREAL_SAVE_FUNCTION_NAME(StringOutputArchive& ar, const cereal::NameValuePair<T>& t) {
  ar(t.value);
}

template <class T>
inline void CEREAL_SAVE_FUNCTION_NAME(StringOutputArchive& ar, const cereal::SizeTag<T>& t) {
  ar(t.size);
}

template <class T>
inline void CEREAL_SAVE_FUNCTION_NAME(StringOutputArchive& ar, const cereal::BinaryData<T>& bd) {
  ar.saveBinary(bd.data, static_cast<size_t>(bd.size));
}

}  // namespace elastra::proto

CEREAL_REGISTER_ARCHIVE(elastra::proto::StringOutputArchive)
// What reads it (cereal pairs archives when it checks load/save_minimal functions).
#include "common/bounded_archive.h"
namespace cereal::traits::detail {
template <>
struct get_input_from_output<elastra::proto::StringOutputArchive> {
  using type = elastra::proto::BoundedInputArchive;
};
}  // namespace cereal::traits::detail
