// The checkpoint tests' shared helpers. See checkpoint_test_util.h.
#include "tests/checkpoint/checkpoint_test_util.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

namespace elastra::checkpoint {

namespace fs = std::filesystem;

Status SaveAndCommit(Env* env, const std::string& root, const State& state, int keep,
                     uint64_t chunk) {
  WriterOptions o;
  o.env = env;
  o.root = root;
  o.chunk_bytes = chunk;
  auto writer = CheckpointWriter::Create(o);
  if (!writer.ok()) return writer.status();
  CheckpointId id{"job", state.step, 1};
  auto d = (*writer)->Write(id, state.View());
  if (!d.ok()) return d.status();
  CommitOptions c;
  c.env = env;
  c.root = root;
  c.keep_last = keep;
  auto dir = CommitCheckpoint(c, id, Layout{1, 1, 1}, {*d});
  return dir.ok() ? OkStatus() : dir.status();
}

std::string DirOf(const std::string& root, int64_t step) {
  return JoinPath(root, CheckpointDirName(step, 1));
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f.good()) << path;
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::vector<std::byte> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool HasTmpFiles(const std::string& root) {
  for (auto& e : fs::recursive_directory_iterator(root)) {
    if (e.path().filename().string().find(".tmp") != std::string::npos) return true;
  }
  return false;
}

}  // namespace elastra::checkpoint
