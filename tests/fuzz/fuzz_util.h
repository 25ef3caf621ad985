// What the fuzz targets share (docs/hardening.md): quiet logs and a reader of the input's bytes.
// Each target defines LLVMFuzzerTestOneInput; libFuzzer links it in the clang fuzz build
// (ELASTRA_FUZZ=ON) and replay_main.cc in every other build, where ctest replays the committed
// corpus (tests/fuzz/corpus/<target>) as a regression test.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "common/logging.h"

namespace elastra::fuzz {

// Sends every log line nowhere except fatal ones (a CHECK that fails), which go to stderr. The
// lines are still formatted, so the code that builds them runs under the fuzzer too.
inline void QuietLogs() {
  static const bool once = [] {
    logging::SetMinSeverity(logging::Severity::kDebug);
    logging::SetSink([](logging::Severity severity, const std::string& line) {
      if (severity == logging::Severity::kFatal) std::fprintf(stderr, "%s\n", line.c_str());
    });
    return true;
  }();
  (void)once;
}

// Reads an input from the front. Past the end every read yields zeros or empty bytes, so a
// target never has to check the length.
class Input {
 public:
  Input(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  uint8_t Byte() { return empty() ? 0 : static_cast<uint8_t>(data_[pos_++]); }
  uint16_t U16() {
    const uint16_t lo = Byte();
    return static_cast<uint16_t>(lo | (Byte() << 8));
  }
  // The next `n` bytes (fewer at the end).
  std::string_view Bytes(size_t n) {
    n = std::min(n, size_ - std::min(pos_, size_));
    std::string_view out(data_ + pos_, n);
    pos_ += n;
    return out;
  }
  // The next bytes up to `separator` (consumed, not returned), or the rest.
  std::string_view Until(std::string_view separator) {
    std::string_view rest(data_ + std::min(pos_, size_), size_ - std::min(pos_, size_));
    const size_t at = rest.find(separator);
    if (at == std::string_view::npos) {
      pos_ = size_;
      return rest;
    }
    pos_ += at + separator.size();
    return rest.substr(0, at);
  }
  std::string_view Rest() { return Bytes(size_); }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace elastra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
