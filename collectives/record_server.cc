// RecordServer and FetchRecords: see record_server.h.
#include "collectives/record_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "collectives/wire_bytes.h"
#include "common/logging.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kRequestMagic = 0x454c5251;  // "ELRQ"
constexpr uint32_t kReplyMagic = 0x454c5250;    // "ELRP"
constexpr size_t kRequestHeader = 10;           // magic, key length (u16), wait (u32 ms)
constexpr size_t kReplyHeader = 9;              // magic, found (u8), value length (u32)
constexpr size_t kMaxKeyBytes = 1024;
constexpr uint32_t kMaxValueBytes = 1u << 20;
constexpr uint32_t kMaxWaitMs = 60000;
// What a client's poll waits at most before it looks at `cancelled` again.
constexpr std::chrono::milliseconds kSlice{100};

// The generation of a key "g<N>/...", or nullopt.
std::optional<uint64_t> GenerationOf(const std::string& key) {
  if (key.size() < 3 || key[0] != 'g') return std::nullopt;
  uint64_t g = 0;
  size_t i = 1;
  for (; i < key.size() && key[i] >= '0' && key[i] <= '9'; ++i) g = g * 10 + (key[i] - '0');
  if (i == 1 || i >= key.size() || key[i] != '/') return std::nullopt;
  return g;
}

}  // namespace

// One connection: its request as it arrives, then its reply as it leaves.
struct RecordServer::Client {
  int fd = -1;
  std::string in;        // the request read so far
  std::string key;       // once the request is whole
  Clock::time_point deadline{};
  bool waiting = false;  // the request is whole and its key absent
  std::string out;       // the reply being written
  size_t written = 0;
};

StatusOr<std::unique_ptr<RecordServer>> RecordServer::Start(const std::string& bind_ipv4) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  if (::inet_pton(AF_INET, bind_ipv4.c_str(), &address.sin_addr) != 1) {
    return InvalidArgumentError("record server: '" + bind_ipv4 + "' is no IPv4 address");
  }
  if (address.sin_addr.s_addr == htonl(INADDR_ANY)) {
    return InvalidArgumentError("record server: the wildcard address " + bind_ipv4 +
                                " cannot be advertised to peers");
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("record server: " + wire::Errno("socket"));
  socklen_t len = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd, SOMAXCONN) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &len) != 0) {
    const std::string why = wire::Errno("listening");
    ::close(fd);
    return UnavailableError("record server on " + bind_ipv4 + ": " + why);
  }
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    ::close(fd);
    return UnavailableError("record server: " + wire::Errno("eventfd"));
  }
  std::unique_ptr<RecordServer> server(
      new RecordServer(fd, wake, PackEndpoint(address.sin_addr.s_addr, address.sin_port)));
  try {
    server->thread_ = std::thread([s = server.get()] { s->Loop(); });
  } catch (const std::system_error& e) {
    return UnavailableError(std::string("record server: no thread: ") + e.what());
  }
  return server;
}

RecordServer::RecordServer(int listen_fd, int wake_fd, std::string endpoint)
    : listen_fd_(listen_fd), wake_fd_(wake_fd), endpoint_(std::move(endpoint)) {}

RecordServer::~RecordServer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void RecordServer::Put(const std::string& key, std::string value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const auto g = GenerationOf(key); g && *g > newest_generation_) {
      newest_generation_ = *g;
      for (auto it = records_.begin(); it != records_.end();) {
        const auto old = GenerationOf(it->first);
        it = old && *old + 1 < newest_generation_ ? records_.erase(it) : std::next(it);
      }
    }
    records_[key] = std::move(value);
  }
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

bool RecordServer::Get(const std::string& key, std::string* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return false;
  if (value != nullptr) *value = it->second;
  return true;
}

size_t RecordServer::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return records_.size();
}

void RecordServer::Answer(Client& c, bool found, const std::string& value) {
  c.waiting = false;
  c.out.assign(kReplyHeader, '\0');
  auto* h = reinterpret_cast<uint8_t*>(c.out.data());
  wire::Put<uint32_t>(h, kReplyMagic);
  h[4] = found ? 1 : 0;
  wire::Put<uint32_t>(h + 5, found ? static_cast<uint32_t>(value.size()) : 0);
  if (found) c.out += value;
}

bool RecordServer::ReadRequest(Client& c) {
  char buf[kRequestHeader + kMaxKeyBytes];
  for (;;) {
    const size_t want =
        c.in.size() < kRequestHeader
            ? kRequestHeader - c.in.size()
            : kRequestHeader +
                  wire::Get<uint16_t>(reinterpret_cast<const uint8_t*>(c.in.data()) + 4) -
                  c.in.size();
    if (want == 0) break;
    const ssize_t n = ::recv(c.fd, buf, want, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return true;  // gone before asking
    c.in.append(buf, static_cast<size_t>(n));
    if (c.in.size() == kRequestHeader) {
      const auto* h = reinterpret_cast<const uint8_t*>(c.in.data());
      if (wire::Get<uint32_t>(h) != kRequestMagic || wire::Get<uint16_t>(h + 4) == 0 ||
          wire::Get<uint16_t>(h + 4) > kMaxKeyBytes) {
        return true;  // not a request of ours
      }
    }
  }
  const auto* h = reinterpret_cast<const uint8_t*>(c.in.data());
  c.key = c.in.substr(kRequestHeader);
  c.deadline =
      Clock::now() + std::chrono::milliseconds(std::min(wire::Get<uint32_t>(h + 6), kMaxWaitMs));
  std::string value;
  if (Get(c.key, &value)) {
    Answer(c, true, value);
  } else {
    c.waiting = true;
  }
  return false;
}

bool RecordServer::WriteReply(Client& c) {
  while (c.written < c.out.size()) {
    const ssize_t n =
        ::send(c.fd, c.out.data() + c.written, c.out.size() - c.written, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n <= 0) return true;
    c.written += static_cast<size_t>(n);
  }
  return true;
}

void RecordServer::Loop() {
  std::vector<Client> clients;
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) break;
    }
    // Waiting clients whose key came or whose time is up get their answer.
    const auto now = Clock::now();
    Clock::time_point next = now + std::chrono::seconds(1);
    for (Client& c : clients) {
      if (!c.waiting) continue;
      std::string value;
      if (Get(c.key, &value)) {
        Answer(c, true, value);
      } else if (now >= c.deadline) {
        Answer(c, false, "");
      } else {
        next = std::min(next, c.deadline);
      }
    }
    waiting_ = static_cast<int>(
        std::count_if(clients.begin(), clients.end(), [](const Client& c) { return c.waiting; }));
    polled.clear();
    polled.push_back({wake_fd_, POLLIN, 0});
    polled.push_back({listen_fd_, POLLIN, 0});
    for (const Client& c : clients) {
      polled.push_back({c.fd, static_cast<short>(c.out.empty() ? POLLIN : POLLOUT), 0});
    }
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
    const int rc = ::poll(polled.data(), polled.size(), std::max<int>(0, wait.count()));
    if (rc < 0 && errno != EINTR) {
      LOG(ERROR) << "record server: " << wire::Errno("poll");
      break;
    }
    if (rc <= 0) continue;
    if (polled[0].revents != 0) {
      uint64_t count;
      (void)!::read(wake_fd_, &count, sizeof(count));
    }
    std::vector<char> done(clients.size(), 0);
    for (size_t i = 0; i < clients.size(); ++i) {
      const short ev = polled[i + 2].revents;
      if (ev == 0) continue;
      Client& c = clients[i];
      if (!c.out.empty()) {
        done[i] = WriteReply(c);
      } else if (c.waiting) {
        // Only a close can come now: the client asked one question.
        char byte;
        if ((ev & (POLLHUP | POLLERR)) != 0 || ::recv(c.fd, &byte, 1, MSG_DONTWAIT) == 0) done[i] = 1;
      } else {
        done[i] = ReadRequest(c);
        if (!done[i] && !c.out.empty()) done[i] = WriteReply(c);
      }
    }
    for (size_t i = clients.size(); i-- > 0;) {
      if (!done[i]) continue;
      ::close(clients[i].fd);
      clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (polled[1].revents != 0) {
      for (;;) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (clients.size() >= static_cast<size_t>(kMaxClients)) {
          ::close(fd);
          continue;
        }
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        Client c;
        c.fd = fd;
        clients.push_back(std::move(c));
      }
    }
  }
  for (Client& c : clients) ::close(c.fd);
}

StatusOr<std::vector<std::string>> FetchRecords(const std::vector<std::string>& endpoints,
                                                const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout,
                                                const std::function<bool()>& cancelled) {
  struct Fetch {
    int fd = -1;
    std::string out;  // the request
    size_t written = 0;
    std::string in;   // the reply so far
    bool done = false;
  };
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<Fetch> fetches(keys.size());
  auto close_all = [&] {
    for (Fetch& f : fetches) {
      if (f.fd >= 0) ::close(f.fd);
      f.fd = -1;
    }
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    Fetch& f = fetches[i];
    if (endpoints[i].size() != kEndpointBytes || keys[i].empty() ||
        keys[i].size() > kMaxKeyBytes) {
      close_all();
      return InvalidArgumentError("fetching record '" + keys[i] + "': bad endpoint or key");
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    std::memcpy(&a.sin_addr, endpoints[i].data(), 4);
    std::memcpy(&a.sin_port, endpoints[i].data() + 4, 2);
    f.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (f.fd < 0 ||
        (::connect(f.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS)) {
      const std::string why = wire::Errno("connect");
      close_all();
      return PeerLostError("record '" + keys[i] + "' at " + EndpointString(endpoints[i]) + ": " +
                           why);
    }
    int one = 1;
    ::setsockopt(f.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count();
    f.out.assign(kRequestHeader, '\0');
    auto* h = reinterpret_cast<uint8_t*>(f.out.data());
    wire::Put<uint32_t>(h, kRequestMagic);
    wire::Put<uint16_t>(h + 4, static_cast<uint16_t>(keys[i].size()));
    wire::Put<uint32_t>(h + 6, static_cast<uint32_t>(std::clamp<int64_t>(wait, 1, kMaxWaitMs)));
    f.out += keys[i];
  }
  std::vector<pollfd> polled(keys.size());
  size_t left = keys.size();
  while (left > 0) {
    if (cancelled && cancelled()) {
      close_all();
      return AbortedError("fetching records: cancelled");
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    for (size_t i = 0; i < fetches.size(); ++i) {
      const Fetch& f = fetches[i];
      polled[i] = {f.done ? -1 : f.fd,
                   static_cast<short>(f.written < f.out.size() ? POLLOUT : POLLIN), 0};
    }
    const auto wait = std::min(std::chrono::ceil<std::chrono::milliseconds>(deadline - now), kSlice);
    const int rc = ::poll(polled.data(), polled.size(), static_cast<int>(wait.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      close_all();
      return InternalError("fetching records: " + wire::Errno("poll"));
    }
    for (size_t i = 0; i < fetches.size(); ++i) {
      Fetch& f = fetches[i];
      if (f.done || polled[i].revents == 0) continue;
      auto lost = [&](const std::string& why) {
        close_all();
        return PeerLostError("record '" + keys[i] + "' at " + EndpointString(endpoints[i]) + ": " +
                             why);
      };
      if (f.written < f.out.size()) {
        const ssize_t n =
            ::send(f.fd, f.out.data() + f.written, f.out.size() - f.written, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (n <= 0) return lost(wire::Errno("send"));
        f.written += static_cast<size_t>(n);
        continue;
      }
      char buf[4096];
      const ssize_t n = ::recv(f.fd, buf, sizeof(buf), 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n < 0) return lost(wire::Errno("receive"));
      if (n == 0) return lost("the server closed the connection before answering");
      f.in.append(buf, static_cast<size_t>(n));
      if (f.in.size() < kReplyHeader) continue;
      const auto* h = reinterpret_cast<const uint8_t*>(f.in.data());
      const uint32_t bytes = wire::Get<uint32_t>(h + 5);
      if (wire::Get<uint32_t>(h) != kReplyMagic || h[4] > 1 || bytes > kMaxValueBytes) {
        return lost("not a record server's reply");
      }
      if (f.in.size() < kReplyHeader + bytes) continue;
      if (h[4] == 0) {  // not there at the server's deadline, which is ours
        close_all();
        return TimedOutError("record '" + keys[i] + "' did not appear at " +
                             EndpointString(endpoints[i]) + " in time");
      }
      f.in.erase(0, kReplyHeader);
      f.in.resize(bytes);
      f.done = true;
      ::close(f.fd);
      f.fd = -1;
      --left;
    }
    if (left > 0 && Clock::now() >= deadline) break;
  }
  if (left > 0) {
    for (size_t i = 0; i < fetches.size(); ++i) {
      if (fetches[i].done) continue;
      close_all();
      return TimedOutError("record '" + keys[i] + "' did not appear at " +
                           EndpointString(endpoints[i]) + " in time");
    }
  }
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (Fetch& f : fetches) values.push_back(std::move(f.in));
  return values;
}

}  // namespace elastra
