// A cereal binary input archive that never trusts a length it reads. Every size tag (the element
// count before a string or container) is checked against the bytes left in the frame and a fixed
// cap before cereal allocates, so a malformed or hostile frame costs at most its own size.
// Decoding errors are thrown as cereal::Exception and turned into kCorrupt by the codec.
#pragma once

#include <cereal/cereal.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace elastra::proto {

// No decoded container may claim more elements than this, whatever the frame size: an element
// takes at least one byte of the frame but may take far more memory once decoded. A string's
// length is bounded by the bytes left alone (a byte of frame is a byte of memory), so a payload
// or a blob may fill the frame.
inline constexpr uint64_t kMaxDecodedElements = 1u << 20;

class BoundedInputArchive
    : public cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision> {
 public:
  BoundedInputArchive(const char* data, size_t size)
      : cereal::InputArchive<BoundedInputArchive, cereal::AllowEmptyClassElision>(this),
        data_(data),
        size_(size) {}

  void loadBinary(void* out, size_t n) {
    if (n == 0) return;  // an empty string or container: nothing to copy (out may be null)
    if (n > size_ - pos_) {
      throw cereal::Exception("truncated: need " + std::to_string(n) + " bytes, " +
                              std::to_string(size_ - pos_) + " left");
    }
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
  }

  // Called for every size tag before the container is sized.
  template <class T>
  void loadSize(T& size) {
    uint64_t raw = 0;
    loadBinary(&raw, sizeof(raw));
    if (raw > size_ - pos_) {
      throw cereal::Exception("length " + std::to_string(raw) + " exceeds the " +
                              std::to_string(size_ - pos_) + " bytes left in the frame");
    }
    if (raw > kMaxDecodedElements) {
      throw cereal::Exception("length " + std::to_string(raw) + " exceeds the limit of " +
                              std::to_string(kMaxDecodedElements) + " elements");
    }
    size = static_cast<T>(raw);
  }

  // A string's length tag: bounded by the bytes left only (see kMaxDecodedElements).
  size_t LoadStringSize() {
    uint64_t raw = 0;
    loadBinary(&raw, sizeof(raw));
    if (raw > size_ - pos_) {
      throw cereal::Exception("string of " + std::to_string(raw) + " bytes exceeds the " +
                              std::to_string(size_ - pos_) + " bytes left in the frame");
    }
    return static_cast<size_t>(raw);
  }

  size_t remaining() const { return size_ - pos_; }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

template <class T>
inline typename std::enable_if<std::is_arithmetic<T>::value && !std::is_same<T, bool>::value,
                               void>::type
CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, T& t) {
  ar.loadBinary(std::addressof(t), sizeof(t));
}

// A bool travels as one byte, 0 or 1. Any other byte is a malformed frame: copied into a bool it
// would be a value the type cannot hold (undefined behaviour wherever it is read).
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, bool& b) {
  uint8_t v = 0;
  ar.loadBinary(&v, sizeof(v));
  if (v > 1) throw cereal::Exception("bool byte " + std::to_string(v) + " is neither 0 nor 1");
  b = v == 1;
}

// Preferred to cereal's template for std::string: the same encoding (a 64-bit length, then the
// bytes), without the container cap.
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, std::string& s) {
  s.resize(ar.LoadStringSize());
  ar.loadBinary(s.data(), s.size());
}

template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}

template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::SizeTag<T>& t) {
  ar.loadSize(t.size);
}

template <class T>
inline void CEREAL_LOAD_FUNCTION_NAME(BoundedInputArchive& ar, cereal::BinaryData<T>& bd) {
  ar.loadBinary(bd.data, static_cast<size_t>(bd.size));
}

}  // namespace elastra::proto

CEREAL_REGISTER_ARCHIVE(elastra::proto::BoundedInputArchive)
#include <cereal/archives/binary.hpp>
// Tie the input archive to cereal's binary output archive (one direction only: BinaryOutputArchive
// already maps back to cereal's own BinaryInputArchive).
namespace cereal::traits::detail {
template <>
struct get_output_from_input<elastra::proto::BoundedInputArchive> {
  using type = cereal::BinaryOutputArchive;
};
}  // namespace cereal::traits::detail
