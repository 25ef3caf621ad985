#include "file_kv_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace elastra::testing {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(2);

}  // namespace

std::string FileKeyValueStore::PathOf(const std::string& key) const {
  // Hex keeps any key ('/' included) a plain file name.
  static const char* kHex = "0123456789abcdef";
  std::string name;
  for (unsigned char c : key) {
    name += kHex[c >> 4];
    name += kHex[c & 15];
  }
  return dir_ + "/k" + name;
}

bool FileKeyValueStore::Read(const std::string& key, std::string* value) const {
  std::ifstream in(PathOf(key), std::ios::binary);
  if (!in) return false;
  std::ostringstream out;
  out << in.rdbuf();
  *value = out.str();
  return true;
}

Status FileKeyValueStore::Set(const std::string& key, const std::string& value) {
  static std::atomic<int> counter{0};
  const std::string tmp = dir_ + "/tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) return InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), PathOf(key).c_str()) != 0) {
    return InternalError("cannot rename " + tmp);
  }
  return OkStatus();
}

StatusOr<std::string> FileKeyValueStore::Get(const std::string& key,
                                             std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string value;
  while (!Read(key, &value)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return TimedOutError("key '" + key + "' did not appear");
    }
    std::this_thread::sleep_for(kPoll);
  }
  return value;
}

Status FileKeyValueStore::Wait(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& key : keys) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto value = Get(key, std::max(left, std::chrono::milliseconds(0)));
    if (!value.ok()) return value.status();
  }
  return OkStatus();
}

StatusOr<int64_t> FileKeyValueStore::Add(const std::string& key, int64_t delta) {
  const std::string lock_path = dir_ + "/lock";
  const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return InternalError("cannot open " + lock_path);
  ::flock(fd, LOCK_EX);
  std::string value;
  int64_t current = Read(key, &value) && !value.empty() ? std::stoll(value) : 0;
  current += delta;
  Status status = Set(key, std::to_string(current));
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (!status.ok()) return status;
  return current;
}

}  // namespace elastra::testing
