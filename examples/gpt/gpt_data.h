// The GPT example's data: an English text as bytes (one token per byte, vocabulary 256), cut into
// non-overlapping windows of seq_len + 1 tokens (inputs and the next-token targets). Sample k of
// the run is window perm_e(k mod W) of epoch e = k / W, where W is the number of windows and
// perm_e a shuffle seeded by (seed, e): the data cursor (a sample position in the worker's
// state) names every sample, so a run sees each window exactly once per epoch whatever its
// layout and resizes. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "elastra/status.h"

namespace gpt {

// The default text: fortunes-min's literature quotes (/usr/share/games/fortunes/literature),
// English prose and verse, 53 KB.
inline constexpr char kDefaultText[] = "/usr/share/games/fortunes/literature";

class Corpus {
 public:
  // Reads `path`. kNotFound when it cannot be read; kInvalidArgument when it has fewer than two
  // windows of seq_len + 1 bytes.
  static elastra::StatusOr<Corpus> Load(const std::string& path, int seq_len, uint64_t seed);

  int seq_len() const { return seq_len_; }
  int64_t windows() const { return windows_; }
  // The window of sample `k`: seq_len + 1 tokens.
  int64_t WindowOf(int64_t k);
  // Copies the seq_len + 1 tokens of sample `k` into `out`.
  void Sample(int64_t k, int64_t* out);
  // The entropy of the text's byte distribution in nats: the loss of the best model that ignores
  // context.
  double UnigramEntropy() const;

 private:
  std::vector<uint8_t> text_;
  int seq_len_ = 0;
  int64_t windows_ = 0;
  uint64_t seed_ = 0;
  int64_t epoch_ = -1;  // of perm_
  std::vector<int64_t> perm_;
};

}  // namespace gpt
