// The address `elastra agent` gives its workers without --address: the local address of the route
// to the coordinator (launch/route.h).
#include "launch/route.h"

#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <set>
#include <string>

namespace elastra::launch {
namespace {

TEST(LaunchRoute, ParsesTcpEndpoints) {
  auto v4 = ParseTcpEndpoint("tcp://10.0.0.5:5555");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "10.0.0.5");
  EXPECT_EQ(v4->port, 5555);
  auto v6 = ParseTcpEndpoint("tcp://[fd00::2]:7");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "fd00::2");
  EXPECT_EQ(v6->port, 7);
  auto name = ParseTcpEndpoint("tcp://head-node:65535");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "head-node");
  // ZeroMQ's source-address form: the peer is after the ';'.
  auto sourced = ParseTcpEndpoint("tcp://eth1;10.0.0.5:5555");
  ASSERT_TRUE(sourced.ok()) << sourced.status();
  EXPECT_EQ(sourced->host, "10.0.0.5");

  for (const char* bad : {"ipc:///tmp/x", "10.0.0.5:5555", "tcp://10.0.0.5", "tcp://:5555",
                          "tcp://*:5555", "tcp://10.0.0.5:0", "tcp://10.0.0.5:65536",
                          "tcp://10.0.0.5:port", "tcp://fd00::2:5555", ""}) {
    auto r = ParseTcpEndpoint(bad);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status();
  }
}

TEST(LaunchRoute, ACoordinatorOnLoopbackIsReachedFromLoopback) {
  auto local = LocalAddressFor("tcp://127.0.0.1:5555");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(*local, "127.0.0.1");
  auto other = LocalAddressFor("tcp://127.0.0.2:5555");  // all of 127/8 is loopback
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->rfind("127.", 0), 0u) << *other;
}

TEST(LaunchRoute, MalformedOrUnresolvableAddressesAreErrors) {
  EXPECT_EQ(LocalAddressFor("tcp://*:5555").status().code(), StatusCode::kInvalidArgument);
  auto unknown = LocalAddressFor("tcp://no-such-host.invalid:5555");
  EXPECT_EQ(unknown.status().code(), StatusCode::kUnavailable) << unknown.status();
  EXPECT_NE(unknown.status().message().find("no-such-host.invalid"), std::string::npos)
      << unknown.status();
}

// The addresses of this host's interfaces, as text.
std::set<std::string> InterfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char text[NI_MAXHOST] = {0};
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (getnameinfo(a->ifa_addr, len, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) == 0) {
      std::string s = text;
      out.insert(s.substr(0, s.find('%')));  // without an IPv6 scope
    }
  }
  freeifaddrs(list);
  return out;
}

TEST(LaunchRoute, ARemoteCoordinatorIsReachedFromAnInterfaceOfThisHost) {
  // 198.51.100.1 (TEST-NET-2) is never a host of ours: with a route there (a default route) the
  // answer is the address of the interface it leaves by; without one, kUnavailable.
  auto local = LocalAddressFor("tcp://198.51.100.1:5555");
  if (!local.ok()) {
    EXPECT_EQ(local.status().code(), StatusCode::kUnavailable) << local.status();
    GTEST_SKIP() << "this host has no route to 198.51.100.1: " << local.status();
  }
  EXPECT_NE(*local, "127.0.0.1");
  const std::set<std::string> mine = InterfaceAddresses();
  EXPECT_TRUE(mine.count(*local)) << *local << " is not an address of this host";
}

// In a network namespace of its own with only loopback up, a process has no route anywhere else:
// the unreachable case, made certain rather than hoped for.
TEST(LaunchRoute, AnUnreachableCoordinatorIsUnavailable) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe_fds[0]);
    auto say = [&](const std::string& s) {
      (void)!write(pipe_fds[1], s.data(), s.size());
      _exit(0);
    };
    if (unshare(CLONE_NEWNET) != 0) say(std::string("skip: unshare: ") + std::strerror(errno));
    const int fd = socket(AF_INET, SOCK_DGRAM, 0);
    ifreq lo{};
    std::strncpy(lo.ifr_name, "lo", IFNAMSIZ - 1);
    if (ioctl(fd, SIOCGIFFLAGS, &lo) != 0) say("skip: SIOCGIFFLAGS");
    lo.ifr_flags |= IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &lo) != 0) say("skip: cannot bring lo up");
    close(fd);
    auto loopback = LocalAddressFor("tcp://127.0.0.1:5555");
    auto far = LocalAddressFor("tcp://198.51.100.1:5555");
    say((loopback.ok() ? *loopback : loopback.status().ToString()) + "\n" +
        std::to_string(static_cast<int>(far.status().code())) + "\n" + far.status().message());
  }
  close(pipe_fds[1]);
  std::string got;
  char buf[512];
  for (ssize_t n; (n = read(pipe_fds[0], buf, sizeof(buf))) > 0;) got.append(buf, n);
  close(pipe_fds[0]);
  waitpid(pid, nullptr, 0);
  if (got.rfind("skip: ", 0) == 0) GTEST_SKIP() << "no network namespace here: " << got;
  const size_t first = got.find('\n');
  const size_t second = got.find('\n', first + 1);
  ASSERT_NE(second, std::string::npos) << got;
  EXPECT_EQ(got.substr(0, first), "127.0.0.1");
  EXPECT_EQ(got.substr(first + 1, second - first - 1),
            std::to_string(static_cast<int>(StatusCode::kUnavailable)))
      << got;
  const std::string message = got.substr(second + 1);
  EXPECT_NE(message.find("no route from this host to 198.51.100.1"), std::string::npos) << message;
}

}  // namespace
}  // namespace elastra::launch
