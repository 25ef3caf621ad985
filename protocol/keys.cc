#include "protocol/keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

namespace elastra {
namespace {

constexpr char kZ85Chars[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

int Z85Value(char c) {
  const char* p = std::strchr(kZ85Chars, c);
  if (c == '\0' || p == nullptr) return -1;
  return static_cast<int>(p - kZ85Chars);
}

std::string ErrnoText(int err) { return std::strerror(err); }

std::string DirName(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status WriteAll(int fd, const std::string& contents, const std::string& path) {
  size_t done = 0;
  while (done < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return InternalError("write " + path + ": " + ErrnoText(errno));
    }
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return NotFoundError(path + " does not exist");
    return InternalError("open " + path + ": " + ErrnoText(errno));
  }
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      return InternalError("read " + path + ": " + ErrnoText(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > (1u << 20)) {
      ::close(fd);
      return CorruptError(path + " is larger than 1 MiB; not a key or connection file");
    }
  }
  ::close(fd);
  return out;
}

nlohmann::json KeyPairToJson(const KeyPair& keys) {
  nlohmann::json j;
  j["public"] = keys.public_key;
  if (!keys.secret_key.empty()) j["secret"] = keys.secret_key;
  return j;
}

// Reads {"public": ..., "secret": ...}; secret optional. `what` names the object in errors.
StatusOr<KeyPair> KeyPairFromJson(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) return CorruptError(what + " is not a JSON object");
  KeyPair keys;
  auto pub = j.find("public");
  if (pub == j.end() || !pub->is_string()) {
    return CorruptError(what + " has no \"public\" key string");
  }
  keys.public_key = pub->get<std::string>();
  if (!IsValidZ85Key(keys.public_key)) {
    return CorruptError(what + ": \"public\" is not a 40-character Z85 key");
  }
  auto sec = j.find("secret");
  if (sec != j.end()) {
    if (!sec->is_string()) return CorruptError(what + ": \"secret\" is not a string");
    keys.secret_key = sec->get<std::string>();
    if (!IsValidZ85Key(keys.secret_key)) {
      return CorruptError(what + ": \"secret\" is not a 40-character Z85 key");
    }
  }
  return keys;
}

// A connection file's content as a join file: the worker key pair is required, the admin key
// pair and the pid are dropped.
StatusOr<ConnectionInfo> JoinFileFrom(ConnectionInfo info, const std::string& source) {
  if (info.worker.public_key.empty()) {
    return CorruptError(source + " has no worker key pair (\"worker\"): not a join file");
  }
  if (info.worker.secret_key.empty()) {
    return CorruptError(source + ": \"worker\" has no secret key");
  }
  info.admin = KeyPair{};
  info.pid = 0;
  return info;
}

}  // namespace

StatusOr<KeyPair> GenerateKeyPair() {
  char pub[41] = {0};
  char sec[41] = {0};
  if (zmq_curve_keypair(pub, sec) != 0) {
    return InternalError(std::string("zmq_curve_keypair failed (libzmq built without CURVE?): ") +
                         zmq_strerror(zmq_errno()));
  }
  return KeyPair{std::string(pub, 40), std::string(sec, 40)};
}

bool IsValidZ85Key(const std::string& key) {
  if (key.size() != 40) return false;
  for (size_t i = 0; i < key.size(); i += 5) {
    uint64_t value = 0;
    for (size_t k = 0; k < 5; ++k) {
      int v = Z85Value(key[i + k]);
      if (v < 0) return false;
      value = value * 85 + static_cast<uint64_t>(v);
    }
    if (value > 0xFFFFFFFFull) return false;  // does not decode to 4 bytes
  }
  return true;
}

Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return InternalError("create " + tmp + ": " + ErrnoText(errno));
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  // open() applies the umask; the mode asked for is the mode we want.
  if (::fchmod(fd, static_cast<mode_t>(mode)) != 0) {
    return fail(InternalError("chmod " + tmp + ": " + ErrnoText(errno)));
  }
  Status s = WriteAll(fd, contents, tmp);
  if (!s.ok()) return fail(s);
  if (::fsync(fd) != 0) return fail(InternalError("fsync " + tmp + ": " + ErrnoText(errno)));
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    return InternalError("close " + tmp + ": " + ErrnoText(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return InternalError("rename " + tmp + " -> " + path + ": " + ErrnoText(err));
  }
  // Make the rename itself durable.
  const std::string dir = DirName(path);
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return InternalError("open directory " + dir + ": " + ErrnoText(errno));
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  if (rc != 0 && err != EINVAL) {
    return InternalError("fsync directory " + dir + ": " + ErrnoText(err));
  }
  return OkStatus();
}

Status WriteKeyFile(const std::string& path, const KeyPair& keys) {
  if (!IsValidZ85Key(keys.public_key)) {
    return InvalidArgumentError("public key is not a 40-character Z85 key");
  }
  if (!keys.secret_key.empty() && !IsValidZ85Key(keys.secret_key)) {
    return InvalidArgumentError("secret key is not a 40-character Z85 key");
  }
  return WriteFileAtomically(path, KeyPairToJson(keys).dump(2) + "\n", 0600);
}

StatusOr<KeyPair> ParseKeyFile(std::string_view text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return CorruptError(source + " is not valid JSON");
  return KeyPairFromJson(j, "key file " + source);
}

StatusOr<KeyPair> ReadKeyFile(const std::string& path) {
  ELASTRA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseKeyFile(text, path);
}

Status WriteConnectionInfo(const std::string& path, const ConnectionInfo& info) {
  if (info.address.empty()) return InvalidArgumentError("connection info has no address");
  if (!IsValidZ85Key(info.server_public)) {
    return InvalidArgumentError("server public key is not a 40-character Z85 key");
  }
  nlohmann::json j;
  j["address"] = info.address;
  j["job"] = info.job;
  j["server_public"] = info.server_public;
  if (!info.admin.public_key.empty()) j["admin"] = KeyPairToJson(info.admin);
  if (!info.worker.public_key.empty()) j["worker"] = KeyPairToJson(info.worker);
  j["pid"] = info.pid;
  if (!info.http.empty()) j["http"] = info.http;
  return WriteFileAtomically(path, j.dump(2) + "\n", 0600);
}

StatusOr<ConnectionInfo> ReadConnectionInfo(const std::string& path) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no coordinator connection file at " + path +
                           " (is a coordinator running with this state directory?)");
    }
    return text.status();
  }
  return ParseConnectionInfo(*text, path);
}

StatusOr<ConnectionInfo> ParseConnectionInfo(std::string_view text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return CorruptError(source + " is not a JSON object; delete it and restart the coordinator");
  }
  ConnectionInfo info;
  auto str = [&](const char* name, std::string* out) -> Status {
    auto it = j.find(name);
    if (it == j.end() || !it->is_string()) {
      return CorruptError(source + " has no string field \"" + name + "\"");
    }
    *out = it->get<std::string>();
    return OkStatus();
  };
  ELASTRA_RETURN_IF_ERROR(str("address", &info.address));
  ELASTRA_RETURN_IF_ERROR(str("job", &info.job));
  ELASTRA_RETURN_IF_ERROR(str("server_public", &info.server_public));
  if (info.address.empty()) return CorruptError(source + ": \"address\" is empty");
  if (!IsValidZ85Key(info.server_public)) {
    return CorruptError(source + ": \"server_public\" is not a 40-character Z85 key");
  }
  for (const char* role : {"admin", "worker"}) {
    auto it = j.find(role);
    if (it == j.end()) continue;
    auto keys = KeyPairFromJson(*it, source + ": \"" + role + "\"");
    if (!keys.ok()) return keys.status();
    (std::string(role) == "admin" ? info.admin : info.worker) = *keys;
  }
  auto pid = j.find("pid");
  if (pid != j.end()) {
    if (!pid->is_number_integer()) return CorruptError(source + ": \"pid\" is not an integer");
    info.pid = pid->get<int64_t>();
  }
  // Optional: only a coordinator started with --http has it. Other unknown fields are ignored.
  auto http = j.find("http");
  if (http != j.end()) {
    if (!http->is_string()) return CorruptError(source + ": \"http\" is not a string");
    info.http = http->get<std::string>();
  }
  return info;
}

Status WriteJoinFile(const std::string& path, const ConnectionInfo& info) {
  if (!IsValidZ85Key(info.worker.public_key) || !IsValidZ85Key(info.worker.secret_key)) {
    return InvalidArgumentError("a join file needs the worker key pair");
  }
  ConnectionInfo join = info;
  join.admin = KeyPair{};  // never in a join file
  nlohmann::json j;
  j["address"] = join.address;
  j["job"] = join.job;
  j["server_public"] = join.server_public;
  j["worker"] = KeyPairToJson(join.worker);
  if (join.address.empty()) return InvalidArgumentError("connection info has no address");
  if (!IsValidZ85Key(join.server_public)) {
    return InvalidArgumentError("server public key is not a 40-character Z85 key");
  }
  return WriteFileAtomically(path, j.dump(2) + "\n", 0600);
}

StatusOr<ConnectionInfo> ReadJoinFile(const std::string& path) {
  auto read = ReadConnectionInfo(path);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no join file at " + path +
                           " (copy <state-dir>/join.json from the coordinator's host)");
    }
    return read.status();
  }
  return JoinFileFrom(*std::move(read), path);
}

StatusOr<ConnectionInfo> ParseJoinFile(std::string_view text, const std::string& source) {
  ELASTRA_ASSIGN_OR_RETURN(ConnectionInfo info, ParseConnectionInfo(text, source));
  return JoinFileFrom(std::move(info), source);
}

}  // namespace elastra
