// What the checkpoint engine's tests share: a temporary directory, a small one-rank training
// state that knows its own load requests and how to compare a load against itself, saving and
// committing it, and raw file access for damaging a checkpoint on purpose.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/env.h"
#include "checkpoint/format.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"

namespace elastra::checkpoint {

// A fresh directory under the system's temporary directory, removed with the object.
class TempDir {
 public:
  TempDir() {
    path_ = std::filesystem::temp_directory_path() /
            ("elastra_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

// A small replicated training state: a 2-D float matrix, a float64 vector, an int64 vector.
struct State {
  std::vector<float> w;
  std::vector<double> b;
  std::vector<int64_t> counts;
  int64_t step = 0;
  int64_t cursor = 0;

  explicit State(int seed, size_t rows = 64, size_t cols = 48) : w(rows * cols), b(100), counts(7) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(seed * 1000 + i);
    for (size_t i = 0; i < b.size(); ++i) b[i] = seed + 0.5 * i;
    for (size_t i = 0; i < counts.size(); ++i) counts[i] = seed * 10 + i;
    step = seed;
    cursor = seed * 32;
    rows_ = rows;
    cols_ = cols;
  }

  StateView View() const {
    StateView v;
    auto add = [&](const std::string& name, std::vector<int64_t> shape, DataType dt,
                   const void* p, size_t n) {
      TensorShard t;
      t.name = name;
      t.shape = shape;
      t.dtype = dt;
      t.region = Box::Whole(shape);
      t.data = {static_cast<const std::byte*>(p), n};
      v.tensors.push_back(t);
    };
    add("w", {static_cast<int64_t>(rows_), static_cast<int64_t>(cols_)}, DataType::kFloat32,
        w.data(), w.size() * 4);
    add("b", {100}, DataType::kFloat64, b.data(), b.size() * 8);
    add("counts", {7}, DataType::kInt64, counts.data(), counts.size() * 8);
    v.scalars = {{"elastra.step", step}, {"data.cursor", cursor}};
    return v;
  }

  std::vector<RegionRequest> Requests() const {
    const std::vector<int64_t> ws = {static_cast<int64_t>(rows_), static_cast<int64_t>(cols_)};
    return {{"w", {Box::Whole(ws)}, ws, DataType::kFloat32},
            {"b", {Box::Whole({100})}, {100}, DataType::kFloat64},
            {"counts", {Box::Whole({7})}, {7}, DataType::kInt64}};
  }

  // True when `loaded` holds exactly this state.
  bool Matches(const LoadedState& loaded) const {
    if (loaded.regions.size() != 3) return false;
    auto same = [](const HostBytes& got, const void* p, size_t n) {
      return got.size() == n && std::memcmp(got.data(), p, n) == 0;
    };
    int64_t s = -1, c = -1;
    for (const auto& [name, value] : loaded.scalars) {
      if (name == "elastra.step") s = value;
      if (name == "data.cursor") c = value;
    }
    return same(loaded.regions[0], w.data(), w.size() * 4) &&
           same(loaded.regions[1], b.data(), b.size() * 8) &&
           same(loaded.regions[2], counts.data(), counts.size() * 8) && s == step &&
           c == cursor && loaded.step == step;
  }

  size_t rows_, cols_;
};

// Writes `state` as a one-rank checkpoint at step state.step and commits it.
Status SaveAndCommit(Env* env, const std::string& root, const State& state, int keep = 5,
                     uint64_t chunk = kDefaultChunkBytes);

// The directory of the checkpoint of `step` (generation 1) under `root`.
std::string DirOf(const std::string& root, int64_t step);

// XORs the byte at `offset` of `path` with 0x5a (a gtest failure when the file cannot be opened).
void FlipByte(const std::string& path, uint64_t offset);

// A file's bytes (empty when it cannot be read).
std::vector<std::byte> ReadAll(const std::string& path);

// Replaces a file's contents with `bytes`.
void WriteAll(const std::string& path, const std::string& bytes);

// True when a file under `root` has ".tmp" in its name.
bool HasTmpFiles(const std::string& root);

}  // namespace elastra::checkpoint
