// FileKeyValueStore: a KeyValueStore in a directory, for ranks that run as separate processes on one
// host (GPU tests, bench_collectives). One file per key, written to a temporary name and renamed,
// so a reader sees a whole value or none. Get polls until the file exists. Add takes an flock.
// Thread-safe and process-safe. Header-only: tests and benchmarks include it directly.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collectives/kv_store.h"

namespace elastra::testing {

class FileKeyValueStore : public KeyValueStore {
 public:
  explicit FileKeyValueStore(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }

  Status Set(const std::string& key, const std::string& value) override {
    static std::atomic<uint64_t> counter{0};
    const std::string path = PathOf(key);
    const std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                            std::to_string(counter.fetch_add(1));
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      out.flush();
      if (!out) return InternalError("cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return InternalError("rename " + tmp + ": " + std::strerror(errno));
    }
    return OkStatus();
  }

  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::string path = PathOf(key);
    while (true) {
      std::ifstream in(path, std::ios::binary);
      if (in) {
        std::ostringstream ss;
        ss << in.rdbuf();
        return ss.str();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return TimedOutError("key '" + key + "' did not appear within " +
                             std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (const auto& key : keys) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      auto value = Get(key, left);
      if (!value.ok()) return value.status();
    }
    return OkStatus();
  }

  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    const std::string lock_path = dir_ + "/.add.lock";
    int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0600);
    if (fd < 0) return InternalError("open " + lock_path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX) != 0) {
      ::close(fd);
      return InternalError("flock " + lock_path + ": " + std::strerror(errno));
    }
    int64_t value = 0;
    {
      std::ifstream in(PathOf(key), std::ios::binary);
      if (in) {
        std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
        if (ec != std::errc() || ptr != s.data() + s.size()) {
          ::flock(fd, LOCK_UN);
          ::close(fd);
          return InvalidArgumentError("key '" + key + "' does not hold an integer");
        }
      }
    }
    value += delta;
    Status s = Set(key, std::to_string(value));
    ::flock(fd, LOCK_UN);
    ::close(fd);
    if (!s.ok()) return s;
    return value;
  }

 private:
  // Keys may hold '/' and other characters that are not file names: %XX-escape them.
  std::string PathOf(const std::string& key) const {
    static const char kHex[] = "0123456789ABCDEF";
    std::string name;
    for (unsigned char c : key) {
      if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
        name.push_back(static_cast<char>(c));
      } else {
        name.push_back('%');
        name.push_back(kHex[c >> 4]);
        name.push_back(kHex[c & 15]);
      }
    }
    if (name.empty() || name[0] == '.') name.insert(0, "%");
    return dir_ + "/" + name;
  }

  std::string dir_;
};

}  // namespace elastra::testing
