// The GPT example's data: see gpt_data.h.
#include "examples/gpt/gpt_data.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>

namespace gpt {

elastra::StatusOr<Corpus> Corpus::Load(const std::string& path, int seq_len, uint64_t seed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return elastra::NotFoundError("cannot read the text " + path);
  Corpus c;
  c.text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  c.seq_len_ = seq_len;
  c.seed_ = seed;
  c.windows_ = seq_len > 0 ? (static_cast<int64_t>(c.text_.size()) - 1) / seq_len : 0;
  if (c.windows_ < 2) {
    return elastra::InvalidArgumentError(path + " has fewer than two windows of " +
                                         std::to_string(seq_len + 1) + " bytes");
  }
  return c;
}

int64_t Corpus::WindowOf(int64_t k) {
  const int64_t epoch = k / windows_;
  if (epoch != epoch_) {
    perm_.resize(windows_);
    std::iota(perm_.begin(), perm_.end(), 0);
    // The same shuffle in every process: mt19937_64 and a Fisher-Yates of our own (std::shuffle's
    // use of the engine is the library's choice).
    std::mt19937_64 rng(seed_ * 1000003ULL + static_cast<uint64_t>(epoch));
    for (int64_t i = windows_ - 1; i > 0; --i) {
      std::swap(perm_[i], perm_[static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1))]);
    }
    epoch_ = epoch;
  }
  return perm_[k % windows_];
}

void Corpus::Sample(int64_t k, int64_t* out) {
  const int64_t begin = WindowOf(k) * seq_len_;
  for (int i = 0; i <= seq_len_; ++i) out[i] = text_[begin + i];
}

double Corpus::UnigramEntropy() const {
  std::vector<double> count(256, 0.0);
  for (uint8_t b : text_) count[b] += 1;
  double h = 0;
  for (double n : count) {
    if (n > 0) h -= n / text_.size() * std::log(n / text_.size());
  }
  return h;
}

}  // namespace gpt
