// protocol/net.h: endpoints parse or are refused, the route to loopback (and to this host's own
// addresses) starts where a peer can reach it, candidates on a shared subnet come first, and the
// probe picks the first address that accepts a connection, naming every one that did not.
#include "protocol/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace elastra {
namespace {

using std::chrono::milliseconds;

TEST(NetParseTcpEndpoint, SplitsHostAndPort) {
  auto e = ParseTcpEndpoint("tcp://10.1.2.3:5555");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host, "10.1.2.3");
  EXPECT_EQ(e->port, 5555);
  e = ParseTcpEndpoint("tcp://node-7.cluster:0");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host, "node-7.cluster");
  EXPECT_EQ(e->port, 0);
  // ZeroMQ's source-address form: the peer is after the ';'.
  e = ParseTcpEndpoint("tcp://eth1;10.1.2.3:5555");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->host, "10.1.2.3");
}

TEST(NetParseTcpEndpoint, RefusesWhatIsNotTcpHostPort) {
  for (const char* bad : {"", "10.1.2.3:5555", "ipc:///tmp/x", "tcp://:5555", "tcp://host",
                          "tcp://host:", "tcp://host:port", "tcp://host:70000", "tcp://h:123456"}) {
    auto e = ParseTcpEndpoint(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(NetResolveIpv4, DottedQuadsAreThemselvesAndUnknownNamesAreNotFound) {
  EXPECT_EQ(ResolveIpv4("127.0.0.1").value(), "127.0.0.1");
  auto localhost = ResolveIpv4("localhost");
  ASSERT_TRUE(localhost.ok()) << localhost.status();
  EXPECT_EQ(localhost->rfind("127.", 0), 0u) << *localhost;
  auto missing = ResolveIpv4("no-such-host.invalid");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-host.invalid"), std::string::npos);
}

TEST(NetLocalAddressToward, LoopbackCoordinatorKeepsTheWorkerOnLoopback) {
  EXPECT_EQ(LocalAddressToward("127.0.0.1").value(), "127.0.0.1");
  EXPECT_EQ(LocalAddressToward("localhost").value().rfind("127.", 0), 0u);
  // A coordinator bound to every interface of this host, named by its wildcard address.
  EXPECT_EQ(LocalAddressToward("0.0.0.0").value(), "127.0.0.1");
}

TEST(NetLocalAddressToward, RouteToAnAddressOfThisHostStartsThere) {
  const auto interfaces = LocalIpv4Interfaces();
  if (interfaces.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 interface";
  for (const auto& i : interfaces) {
    EXPECT_NE(i.address.rfind("127.", 0), 0u) << "loopback listed: " << i.address;
    EXPECT_FALSE(i.netmask.empty());
    auto local = LocalAddressToward(i.address);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(*local, i.address) << "interface " << i.name;
    EXPECT_TRUE(IsOneOf(i.address, interfaces));
  }
  EXPECT_FALSE(IsOneOf("127.0.0.1", interfaces));
}

TEST(NetLocalAddressToward, UnknownHostIsNotFound) {
  auto local = LocalAddressToward("no-such-host.invalid");
  ASSERT_FALSE(local.ok());
  EXPECT_EQ(local.status().code(), StatusCode::kNotFound);
}

TEST(NetOrderBySubnet, SharedSubnetsFirstOtherwiseAsGiven) {
  const std::vector<Ipv4Interface> mine = {{"eth0", "10.1.0.5", "255.255.0.0"},
                                           {"ib0", "192.168.7.20", "255.255.255.0"}};
  const std::vector<std::string> candidates = {"172.17.0.1", "192.168.7.1", "not-an-address",
                                               "10.2.0.9", "10.1.200.3"};
  EXPECT_EQ(OrderBySubnet(candidates, mine),
            (std::vector<std::string>{"192.168.7.1", "10.1.200.3", "172.17.0.1", "10.2.0.9",
                                      "not-an-address"}));
  // No interface: the order given.
  EXPECT_EQ(OrderBySubnet({"10.2.0.9", "10.1.0.1"}, {}),
            (std::vector<std::string>{"10.2.0.9", "10.1.0.1"}));
}

// A TCP socket listening on 127.0.0.1, on a port of the kernel's choice.
class Listener {
 public:
  Listener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = 0;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
    socklen_t len = sizeof(a);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(NetFirstAccepting, PicksTheFirstAddressThatAccepts) {
  Listener listener;
  // 127.0.0.2 is loopback too, but nothing listens there: refused at once.
  auto picked = FirstAccepting({"127.0.0.2", "127.0.0.1"}, listener.port(), milliseconds(2000));
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(*picked, "127.0.0.1");
}

TEST(NetFirstAccepting, NamesEveryAddressWhenNoneAccepts) {
  Listener listener;
  auto picked =
      FirstAccepting({"127.0.0.2", "127.0.0.3", "bogus"}, listener.port(), milliseconds(2000));
  ASSERT_FALSE(picked.ok());
  EXPECT_EQ(picked.status().code(), StatusCode::kUnavailable);
  for (const char* host : {"127.0.0.2", "127.0.0.3", "bogus"}) {
    EXPECT_NE(
        picked.status().message().find(std::string(host) + ":" + std::to_string(listener.port())),
        std::string::npos)
        << picked.status();
  }
  EXPECT_EQ(FirstAccepting({}, listener.port(), milliseconds(10)).status().code(),
            StatusCode::kInvalidArgument);
}

// In a network namespace of its own with only loopback up, a process has no route anywhere else:
// the unreachable case, made certain rather than hoped for.
TEST(NetLocalAddressToward, NoRouteIsUnavailable) {
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
    auto loopback = LocalAddressToward("127.0.0.1");
    auto far = LocalAddressToward("198.18.0.1");
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
  EXPECT_NE(message.find("no route from this host to 198.18.0.1"), std::string::npos) << message;
}

}  // namespace
}  // namespace elastra
