#include "tests/cluster/test_programs.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace elastra::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How often a file is read while waiting for a line in it.
constexpr milliseconds kFilePollInterval{10};

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

bool ParseAddress(const std::string& addr, int port, sockaddr_in* out) {
  std::memset(out, 0, sizeof *out);
  out->sin_family = AF_INET;
  out->sin_port = htons(static_cast<uint16_t>(port));
  return inet_pton(AF_INET, addr.c_str(), &out->sin_addr) == 1;
}

int Listen(const std::string& addr, int port, int count) {
  sockaddr_in sa;
  if (!ParseAddress(addr, port, &sa)) {
    std::printf("bad address %s\n", addr.c_str());
    return 2;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || listen(fd, 16) != 0) {
    std::printf("cannot listen on %s:%d: %s\n", addr.c_str(), port, std::strerror(errno));
    return 1;
  }
  std::printf("listening on %s:%d\n", addr.c_str(), port);
  std::fflush(stdout);
  for (int served = 0; count == 0 || served < count; ++served) {
    sockaddr_in peer;
    socklen_t len = sizeof peer;
    int conn = accept4(fd, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR) continue;
      std::printf("accept: %s\n", std::strerror(errno));
      return 1;
    }
    char peer_addr[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &peer.sin_addr, peer_addr, sizeof peer_addr);
    std::string answer = "host=" + Hostname() + " peer=" + peer_addr + "\n";
    ssize_t ignored = write(conn, answer.data(), answer.size());
    (void)ignored;
    close(conn);
    std::printf("served %s", answer.c_str());
    std::fflush(stdout);
  }
  close(fd);
  return 0;
}

int Connect(const std::string& addr, int port, milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  auto left_ms = [&] {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    return static_cast<int>(std::max<int64_t>(0, left));
  };
  sockaddr_in sa;
  if (!ParseAddress(addr, port, &sa)) {
    std::printf("connect failed: bad address %s\n", addr.c_str());
    return 1;
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS) {
    std::printf("connect failed: %s\n", std::strerror(errno));
    return 1;
  }
  struct pollfd pfd = {fd, POLLOUT, 0};
  if (poll(&pfd, 1, left_ms()) != 1) {
    std::printf("connect failed: no answer to the SYN within %lld ms\n",
                static_cast<long long>(timeout.count()));
    return 1;
  }
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    std::printf("connect failed: %s\n", std::strerror(err));
    return 1;
  }
  std::string answer;
  for (;;) {
    pfd = {fd, POLLIN, 0};
    if (poll(&pfd, 1, left_ms()) != 1) {
      std::printf("connect failed: connected, but no answer within %lld ms\n",
                  static_cast<long long>(timeout.count()));
      return 1;
    }
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) break;
    answer.append(buf, n);
  }
  close(fd);
  std::printf("connected: %s", answer.c_str());
  return 0;
}

// The owner process of the SIGKILL test: its parent reads the line it prints, kills it, and
// checks that everything listed disappears.
int HoldCluster(int hosts, const std::string& dir) {
  NamespaceCluster::Options options;
  options.temp_parent = dir;  // this process dies by SIGKILL: the test removes what it leaves
  auto cluster = NamespaceCluster::Create(hosts, options);
  if (!cluster.ok()) {
    std::printf("error %s\n", cluster.status().ToString().c_str());
    return 1;
  }
  std::vector<pid_t> pids = {(*cluster)->SwitchPid()};
  for (int k = 0; k < hosts; ++k) {
    pids.push_back((*cluster)->HolderPid(k));
    auto sleeper = (*cluster)->Spawn(k, {"sleep", "1000"}, {}, dir + "/sleep" + std::to_string(k));
    auto shell = StartShellWithChild(**cluster, k, dir + "/shell" + std::to_string(k),
                                     Clock::now() + std::chrono::seconds(30));
    if (!sleeper.ok() || !shell.ok()) {
      std::printf("error %s %s\n", sleeper.status().ToString().c_str(),
                  shell.status().ToString().c_str());
      return 1;
    }
    pids.insert(pids.end(), {*sleeper, shell->shell, shell->child});
  }
  std::ostringstream line;
  line << "pids";
  for (pid_t pid : pids) line << " " << pid;
  line << " netns";
  for (pid_t pid : pids) {
    struct stat st;
    std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
    line << " " << (stat(path.c_str(), &st) == 0 ? static_cast<long long>(st.st_ino) : -1LL);
  }
  std::printf("%s\n", line.str().c_str());
  std::fflush(stdout);
  for (;;) pause();
}

}  // namespace

std::optional<int> RunTestProgram(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const std::string mode = argv[1];
  if (mode == "--listen" && argc == 5)
    return Listen(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (mode == "--connect" && argc == 5) {
    return Connect(argv[2], std::atoi(argv[3]), milliseconds(std::atoi(argv[4])));
  }
  if (mode == "--hostname") {
    std::printf("%s\n", Hostname().c_str());
    return 0;
  }
  if (mode == "--hold-cluster" && argc == 4) return HoldCluster(std::atoi(argv[2]), argv[3]);
  return std::nullopt;
}

std::string SelfPath() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, n) : std::string();
}

StatusOr<std::string> WaitForLine(const std::string& path, const std::string& prefix,
                                  Clock::time_point deadline) {
  for (;;) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) == 0) return line;
    }
    if (Clock::now() > deadline) {
      std::ifstream again(path);
      std::stringstream all;
      all << again.rdbuf();
      return TimedOutError("no line '" + prefix + "...' in " + path + "; it holds: " + all.str());
    }
    std::this_thread::sleep_for(kFilePollInterval);
  }
}

StatusOr<ShellWithChild> StartShellWithChild(NamespaceCluster& cluster, int host,
                                             const std::string& log_path,
                                             Clock::time_point deadline) {
  ShellWithChild tree;
  ELASTRA_ASSIGN_OR_RETURN(
      tree.shell,
      cluster.Spawn(host, {"bash", "-c", "sleep 1000 & echo \"child $!\"; wait"}, {}, log_path));
  ELASTRA_ASSIGN_OR_RETURN(std::string line, WaitForLine(log_path, "child ", deadline));
  tree.child = std::atoi(line.substr(6).c_str());
  if (tree.child <= 0) return InternalError("bad line from the shell: " + line);
  return tree;
}

}  // namespace elastra::testing
