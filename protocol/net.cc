#include "protocol/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

namespace elastra {
namespace {

std::string ToDotted(const in_addr& a) {
  char buf[INET_ADDRSTRLEN] = {0};
  if (inet_ntop(AF_INET, &a, buf, sizeof(buf)) == nullptr) return "";
  return buf;
}

std::optional<uint32_t> ParseDotted(const std::string& s) {
  in_addr a{};
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

// A socket closed when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Connects a TCP socket to `address`:`port` within `timeout`; the reason when it cannot.
Status TryConnect(const std::string& address, int port, std::chrono::milliseconds timeout) {
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1) {
    return InvalidArgumentError("not an IPv4 address");
  }
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0) return OkStatus();
  if (errno != EINPROGRESS) return UnavailableError(std::strerror(errno));
  pollfd p{fd.get(), POLLOUT, 0};
  int rc;
  do {
    rc = poll(&p, 1, static_cast<int>(timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return TimedOutError("no answer within " + std::to_string(timeout.count()) + " ms");
  if (rc < 0) return InternalError(std::string("poll: ") + std::strerror(errno));
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) return UnavailableError(std::strerror(err));
  return OkStatus();
}

}  // namespace

StatusOr<TcpEndpoint> ParseTcpEndpoint(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("'" + endpoint + "' is not tcp://HOST:PORT (" + why + ")");
  };
  if (endpoint.rfind(scheme, 0) != 0) return bad("no tcp:// scheme");
  std::string rest = endpoint.substr(scheme.size());
  // ZeroMQ's "tcp://SOURCE;HOST:PORT" names the local end first: the peer is after the ';'.
  if (size_t semicolon = rest.find(';'); semicolon != std::string::npos) {
    rest = rest.substr(semicolon + 1);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad("no host or no port");
  TcpEndpoint out;
  out.host = rest.substr(0, colon);
  const std::string port = rest.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return bad("port is not a number");
  }
  out.port = std::stoi(port);
  if (out.port > 65535) return bad("port above 65535");
  return out;
}

StatusOr<std::string> ResolveIpv4(const std::string& host) {
  if (ParseDotted(host)) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return NotFoundError("host '" + host + "' resolves to no IPv4 address" +
                         (rc != 0 ? std::string(" (") + gai_strerror(rc) + ")" : std::string()));
  }
  std::string out = ToDotted(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr);
  freeaddrinfo(res);
  if (out.empty()) return NotFoundError("host '" + host + "' resolves to no IPv4 address");
  return out;
}

StatusOr<std::string> LocalAddressToward(const std::string& host) {
  ELASTRA_ASSIGN_OR_RETURN(std::string address, ResolveIpv4(host));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);  // any port: a UDP connect() only picks the route
  inet_pton(AF_INET, address.c_str(), &to.sin_addr);
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return InternalError(std::string("socket: ") + std::strerror(errno));
  if (connect(fd.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    return UnavailableError("no route from this host to " + host + " (" + address +
                            "): " + std::strerror(errno));
  }
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return InternalError(std::string("getsockname: ") + std::strerror(errno));
  }
  std::string out = ToDotted(local.sin_addr);
  // 0.0.0.0 as the destination means this host; the kernel then leaves the source unset.
  if (out.empty() || out == "0.0.0.0") return std::string("127.0.0.1");
  return out;
}

std::vector<Ipv4Interface> LocalIpv4Interfaces() {
  std::vector<Ipv4Interface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    if ((i->ifa_flags & IFF_UP) == 0 || (i->ifa_flags & IFF_LOOPBACK) != 0) continue;
    Ipv4Interface entry;
    entry.name = i->ifa_name;
    entry.address = ToDotted(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr);
    entry.netmask = i->ifa_netmask != nullptr
                        ? ToDotted(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr)
                        : "255.255.255.255";
    if (entry.address.empty() || entry.address.rfind("127.", 0) == 0) continue;
    out.push_back(std::move(entry));
  }
  freeifaddrs(list);
  return out;
}

bool IsOneOf(const std::string& address, const std::vector<Ipv4Interface>& interfaces) {
  for (const auto& i : interfaces) {
    if (i.address == address) return true;
  }
  return false;
}

std::vector<std::string> OrderBySubnet(const std::vector<std::string>& candidates,
                                       const std::vector<Ipv4Interface>& interfaces) {
  std::vector<std::string> near, far, unparsed;
  for (const auto& c : candidates) {
    const auto address = ParseDotted(c);
    if (!address) {
      unparsed.push_back(c);
      continue;
    }
    bool shared = false;
    for (const auto& i : interfaces) {
      const auto mine = ParseDotted(i.address);
      const auto mask = ParseDotted(i.netmask);
      if (mine && mask && (*mine & *mask) == (*address & *mask)) shared = true;
    }
    (shared ? near : far).push_back(c);
  }
  near.insert(near.end(), far.begin(), far.end());
  near.insert(near.end(), unparsed.begin(), unparsed.end());
  return near;
}

StatusOr<std::string> FirstAccepting(const std::vector<std::string>& hosts, int port,
                                     std::chrono::milliseconds timeout_each) {
  if (hosts.empty()) return InvalidArgumentError("no address to try");
  std::string why;
  for (const auto& host : hosts) {
    Status s = TryConnect(host, port, timeout_each);
    if (s.ok()) return host;
    why += (why.empty() ? "" : "; ") + host + ":" + std::to_string(port) + ": " + s.message();
  }
  return UnavailableError("no address accepted a connection (" + why + ")");
}

}  // namespace elastra
