// A single-member etcd for a test: its own data directory (under the test's folder), its own free
// ports on 127.0.0.1, started from ELASTRA_ETCD (default /usr/bin/etcd, Debian's etcd-server that
// launch/install_deps.sh installs) and SIGKILLed by its own pid when the object goes. Start() waits
// until the member answers a range request. etcd missing is a failure, not a skip: the installer
// provides it and it needs no root (unlike the namespace cluster).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "journal/etcd_client.h"

namespace elastra::journal {

class EtcdServer {
 public:
  EtcdServer() = default;
  ~EtcdServer() { Stop(); }
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // The etcd binary tests use, or empty with why in `why` when there is none.
  static std::string Binary(std::string* why) {
    const char* env = std::getenv("ELASTRA_ETCD");
    std::string path = env != nullptr ? env : "/usr/bin/etcd";
    if (access(path.c_str(), X_OK) != 0) {
      *why = "no etcd at " + path +
             " (install Debian's etcd-server: launch/install_deps.sh; or set ELASTRA_ETCD)";
      return "";
    }
    return path;
  }

  // Starts a member with its data in `dir`/etcd and waits until it answers. Empty on success,
  // else why not (with the end of etcd's log). `extra` goes on etcd's command line.
  std::string Start(const std::string& dir, const std::vector<std::string>& extra = {}) {
    std::string why;
    const std::string binary = Binary(&why);
    if (binary.empty()) return why;
    for (int attempt = 0; attempt < 5; ++attempt) {  // a free port taken meanwhile: new ports
      const int client_port = FreePort();
      const int peer_port = FreePort();
      url_ = "http://127.0.0.1:" + std::to_string(client_port);
      const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port);
      log_ = dir + "/etcd.log";
      std::vector<std::string> args = {binary,
                                       "--name",
                                       "t",
                                       "--data-dir",
                                       dir + "/etcd-" + std::to_string(attempt),
                                       "--listen-client-urls",
                                       url_,
                                       "--advertise-client-urls",
                                       url_,
                                       "--listen-peer-urls",
                                       peer,
                                       "--initial-advertise-peer-urls",
                                       peer,
                                       "--initial-cluster",
                                       "t=" + peer,
                                       "--initial-cluster-state",
                                       "new"};
      args.insert(args.end(), extra.begin(), extra.end());
      pid_ = fork();
      if (pid_ == 0) {
        const int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
          dup2(fd, 1);
          dup2(fd, 2);
        }
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        execv(argv[0], argv.data());
        _exit(127);
      }
      if (pid_ < 0) return "fork failed";
      if (WaitUntilServing()) return "";
      Stop();
    }
    return "etcd did not start; its log ends: " + LogTail();
  }

  // SIGKILLs the member (by its pid) and reaps it.
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

  const std::string& url() const { return url_; }

  // A free TCP port on 127.0.0.1 (etcd's here; a test's coordinators' too).
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t n = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n);
    close(fd);
    return ntohs(a.sin_port);
  }

 private:
  // Polls the member with a range request until it answers or exits; 30 s at most (a loaded
  // machine), far above the second it takes.
  bool WaitUntilServing() {
    EtcdOptions o;
    o.endpoints = url_;
    o.connect_timeout = std::chrono::milliseconds(200);
    o.request_timeout = std::chrono::milliseconds(2000);
    auto client = EtcdClient::Create(o);
    if (!client.ok()) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if ((*client)->Range("/health-probe", "").ok()) return true;
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // between polls only
    }
    return false;
  }

  std::string LogTail() const {
    std::ifstream in(log_);
    std::string text((std::istreambuf_iterator<char>(in)), {});
    return text.size() > 2000 ? text.substr(text.size() - 2000) : text;
  }

  pid_t pid_ = -1;
  std::string url_;
  std::string log_;
};

}  // namespace elastra::journal
