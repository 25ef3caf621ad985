#include "launch/route.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace elastra::launch {

StatusOr<TcpEndpoint> ParseTcpEndpoint(const std::string& address) {
  constexpr std::string_view kScheme = "tcp://";
  auto bad = [&](const std::string& why) {
    return InvalidArgumentError("the coordinator address '" + address + "' " + why);
  };
  if (address.rfind(kScheme, 0) != 0) return bad("is not tcp://HOST:PORT");
  std::string rest = address.substr(kScheme.size());
  // ZeroMQ's "tcp://SOURCE;HOST:PORT" names the local end first: the peer is after the ';'.
  if (size_t semicolon = rest.find(';'); semicolon != std::string::npos) {
    rest = rest.substr(semicolon + 1);
  }
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos) return bad("has no port");
  std::string host = rest.substr(0, colon);
  const std::string port_text = rest.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad("has an IPv6 host without brackets (tcp://[ADDRESS]:PORT)");
  }
  if (host.empty() || host == "*") return bad("names no host to connect to");
  int port = 0;
  const char* end = port_text.data() + port_text.size();
  auto [ptr, ec] = std::from_chars(port_text.data(), end, port);
  if (port_text.empty() || ec != std::errc() || ptr != end || port < 1 || port > 65535) {
    return bad("has no port in 1..65535");
  }
  return TcpEndpoint{host, port};
}

StatusOr<std::string> LocalAddressFor(const std::string& coordinator_address) {
  auto endpoint = ParseTcpEndpoint(coordinator_address);
  if (!endpoint.ok()) return endpoint.status();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint->port);
  const int rc = getaddrinfo(endpoint->host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return UnavailableError("cannot resolve '" + endpoint->host + "': " + gai_strerror(rc));
  }
  std::string why = "no address";
  std::string local;
  // The first address the host has a route to, in getaddrinfo's (RFC 6724) order.
  for (addrinfo* a = found; a != nullptr && local.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::string("socket: ") + std::strerror(errno);
      continue;
    }
    sockaddr_storage self{};
    socklen_t len = sizeof(self);
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
    } else if (getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len) != 0) {
      why = std::string("getsockname: ") + std::strerror(errno);
    } else {
      char text[INET6_ADDRSTRLEN] = {0};
      const void* bytes =
          self.ss_family == AF_INET6
              ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(&self)->sin6_addr)
              : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(&self)->sin_addr);
      if (inet_ntop(self.ss_family, bytes, text, sizeof(text)) != nullptr) local = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  if (local.empty()) {
    return UnavailableError("no route from this host to " + endpoint->host + " (" + why + ")");
  }
  return local;
}

}  // namespace elastra::launch
