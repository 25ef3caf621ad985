// StreamMesh: see stream_mesh.h.
#include "collectives/gloo/stream_mesh.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>

#include <gloo/transport/tcp/address.h>

#include "collectives/gloo/gloo_mesh.h"
#include "collectives/gloo/stream_mesh_internal.h"
#include "collectives/wire_bytes.h"
#include "common/logging.h"

namespace elastra {
namespace {

using stream_mesh_internal::kHelloBytes;
using stream_mesh_internal::kHelloMagic;

// A store wait for a peer's address looks at Interrupt() this often.
constexpr std::chrono::milliseconds kStoreSlice{100};
// Accepted connections waiting for their hello, beyond the world size, at most.
constexpr size_t kMaxPending = 64;
// An address record's optional tail: the abstract name of the rank's Unix listening socket.
constexpr char kUnixTag = 'u';
// The send buffer of a Unix stream socket (the kernel caps it at net.core.wmem_max): a Unix
// stream is flow-controlled by the sender's buffer alone, whose default of 208 KiB made a
// megabyte's transfer a dozen round trips through the scheduler.
constexpr int kUnixSendBuffer = 4 << 20;

uint32_t Fnv1a(const std::string& s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) {
    h ^= c;
    h *= 16777619u;
  }
  return h;
}

// With `reset`, a reset instead of an orderly close: a peer blocked on this socket fails at
// once (and what it had not read yet is lost, which only a broken communicator may do).
void CloseSocket(int fd, bool reset) {
  if (fd < 0) return;
  if (reset) {
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  }
  ::close(fd);
}

// TCP_NODELAY on a TCP socket (a header must not wait for more), a larger send buffer on a
// Unix one.
void Tune(int fd, int family) {
  if (family == AF_UNIX) {
    const int bytes = kUnixSendBuffer;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
    return;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// The abstract Unix socket address of `name` (no file: it lives in the network namespace).
socklen_t UnixAddress(const std::string& name, sockaddr_un* address) {
  std::memset(address, 0, sizeof(*address));
  address->sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof(address->sun_path) - 1);
  std::memcpy(address->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

}  // namespace

StreamMesh::StreamMesh(int rank, int size, std::string hostname, KeyValueStore* store,
                       std::string prefix, bool local_streams)
    : rank_(rank),
      size_(size),
      hostname_(std::move(hostname)),
      local_streams_(local_streams),
      store_(store),
      prefix_(std::move(prefix)),
      nonce_(Fnv1a(prefix_)),
      fds_(size, -1) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

StreamMesh::~StreamMesh() {
  Close(/*reset=*/false);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void StreamMesh::Interrupt() {
  if (interrupted_.exchange(true)) return;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    ssize_t rc = ::write(wake_fd_, &one, sizeof(one));
    (void)rc;
  }
}

void StreamMesh::Close(bool reset) {
  Interrupt();
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  closed_ = true;
  for (int& fd : fds_) {
    CloseSocket(fd, reset);
    fd = -1;
  }
  for (Pending& p : pending_) CloseSocket(p.fd, reset);
  pending_.clear();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (unix_fd_ >= 0) ::close(unix_fd_);
  listen_fd_ = unix_fd_ = -1;
  connected_ = 0;
  local_ = 0;
}

int StreamMesh::connected_peers() const { return connected_.load(); }

std::string StreamMesh::Where(int peer) const {
  return "stream " + prefix_ + " rank " + std::to_string(rank_) + " <-> " + std::to_string(peer);
}

Status StreamMesh::Exchange(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                            Clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return broken_;
  if (closed_ || interrupted_) return AbortedError("stream " + prefix_ + ": interrupted");
  if (wake_fd_ < 0) return UnavailableError("stream " + prefix_ + ": no eventfd to wake it");
  ++in_exchange_;
  Status s = ExchangeLocked(ops, tag, deadline);
  --in_exchange_;
  if (!s.ok()) broken_ = s;
  return s;
}

Status StreamMesh::EnsureListening(Clock::time_point deadline) {
  if (listen_fd_ >= 0) return OkStatus();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(hostname_.c_str(), nullptr, &hints, &found); rc != 0) {
    return UnavailableError("stream " + prefix_ + ": resolving '" + hostname_ +
                            "': " + ::gai_strerror(rc));
  }
  Status failure = UnavailableError("stream " + prefix_ + ": no address of '" + hostname_ + "'");
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      failure = UnavailableError(wire::Errno("socket"));
      continue;
    }
    sockaddr_storage ss{};
    std::memcpy(&ss, a->ai_addr, a->ai_addrlen);
    if (ss.ss_family == AF_INET) {
      reinterpret_cast<sockaddr_in&>(ss).sin_port = 0;
    } else if (ss.ss_family == AF_INET6) {
      reinterpret_cast<sockaddr_in6&>(ss).sin6_port = 0;
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), a->ai_addrlen) != 0 ||
        ::listen(fd, std::min(size_, SOMAXCONN)) != 0) {
      failure =
          UnavailableError("stream " + prefix_ + ": " + wire::Errno("listening on " + hostname_));
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) return failure;
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return UnavailableError(wire::Errno("getsockname"));
  }
  StatusOr<std::string> record =
      EncodeAddressRecord({gloo::transport::tcp::Address(bound).bytes()});
  if (!record.ok()) return record.status().WithContext("stream " + prefix_);
  own_host_ = record->substr(0, record->size() - 2);  // the record less its port
  if (local_streams_) ListenLocally(&record.value());
  StatusOr<std::vector<std::string>> set =
      store_->SetAndGet({{prefix_ + "s/" + std::to_string(rank_), std::move(record).value()}}, {},
                        TimeoutUntil(deadline));
  if (!set.ok()) {
    return PeerLostError("stream " + prefix_ +
                         ": publishing the address: " + set.status().ToString());
  }
  return OkStatus();
}

void StreamMesh::ListenLocally(std::string* record) {
  std::random_device random;
  const uint64_t nonce = (static_cast<uint64_t>(random()) << 32) ^ random() ^ ::getpid();
  char name[64];
  std::snprintf(name, sizeof(name), "elastra-stream/%016llx/%d",
                static_cast<unsigned long long>(nonce), rank_);
  sockaddr_un address;
  const socklen_t len = UnixAddress(name, &address);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), len) != 0 ||
      ::listen(fd, std::min(size_, SOMAXCONN)) != 0) {
    LOG(WARNING) << "stream " << prefix_ << " rank " << rank_
                 << ": no Unix socket, peers on this host connect over TCP: "
                 << std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return;
  }
  unix_fd_ = fd;
  record->push_back(kUnixTag);
  record->append(name);
}

Status StreamMesh::ConnectTo(const std::vector<int>& lower, Clock::time_point deadline) {
  std::vector<std::string> keys;
  for (int peer : lower) keys.push_back(prefix_ + "s/" + std::to_string(peer));
  if (keys.empty()) return OkStatus();
  StatusOr<std::vector<std::string>> records =
      GetInSlices(store_, keys, deadline, kStoreSlice, [this] { return interrupted_.load(); });
  if (records.status().code() == StatusCode::kAborted) {
    return AbortedError("stream " + prefix_ + ": interrupted");
  }
  if (records.status().code() == StatusCode::kTimedOut) {
    return TimedOutError("stream " + prefix_ + " rank " + std::to_string(rank_) +
                         ": a peer did not publish its address in time");
  }
  if (!records.ok()) {
    return PeerLostError("stream " + prefix_ + ": rendezvous: " + records.status().ToString());
  }
  for (size_t i = 0; i < lower.size(); ++i) {
    ELASTRA_RETURN_IF_ERROR(ConnectOne(lower[i], (*records)[i], deadline));
  }
  return OkStatus();
}

StatusOr<int> StreamMesh::Dial(int peer, const sockaddr* address, socklen_t len,
                               Clock::time_point deadline) {
  const int fd = ::socket(address->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError(Where(peer) + ": " + wire::Errno("socket"));
  auto fail = [&](Status s) {
    ::close(fd);
    return s;
  };
  if (::connect(fd, address, len) != 0 && errno != EINPROGRESS) {
    return fail(PeerLostError(Where(peer) + ": " + wire::Errno("connect")));
  }
  // Wait for the connect (and room for the hello), or the interrupt, or the deadline.
  for (;;) {
    pollfd p[2] = {{fd, POLLOUT, 0}, {wake_fd_, POLLIN, 0}};
    const int rc = ::poll(p, 2, static_cast<int>(TimeoutUntil(deadline).count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return fail(InternalError(Where(peer) + ": " + wire::Errno("poll")));
    if (p[1].revents != 0) return fail(AbortedError(Where(peer) + ": interrupted"));
    if (rc == 0) {
      if (Clock::now() < deadline) continue;
      return fail(TimedOutError(Where(peer) + ": connecting timed out"));
    }
    break;
  }
  int error = 0;
  socklen_t elen = sizeof(error);
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &elen);
  if (error != 0) return fail(PeerLostError(Where(peer) + ": connect: " + std::strerror(error)));
  Tune(fd, address->sa_family);
  return fd;
}

Status StreamMesh::ConnectOne(int peer, const std::string& record, Clock::time_point deadline) {
  auto corrupt = [&](const std::string& why) {
    return PeerLostError(Where(peer) + ": key " + prefix_ + "s/" + std::to_string(peer) +
                         " holds no address: " + why);
  };
  // The TCP part is an address record of one entry; what follows it, the Unix socket's name.
  const bool ipv6 = !record.empty() && record[0] == 6;
  const size_t tcp_bytes = std::min(record.size(), AddressRecordBytes(1, ipv6));
  StatusOr<std::vector<char>> address = DecodeAddressRecord(record.substr(0, tcp_bytes), 1, 0);
  if (!address.ok()) return corrupt(address.status().message());
  const std::string tail = record.substr(tcp_bytes);
  if (!tail.empty() && (tail[0] != kUnixTag || tail.size() < 2)) {
    return corrupt("unknown tail of " + std::to_string(tail.size()) + " bytes");
  }
  int fd = -1;
  bool local = false;
  // A peer on this host (the same address, in this network namespace) through its Unix socket,
  // where it has one and this rank reaches it; else over TCP.
  if (local_streams_ && !tail.empty() && record.compare(0, tcp_bytes - 2, own_host_) == 0) {
    sockaddr_un name;
    const socklen_t len = UnixAddress(tail.substr(1), &name);
    StatusOr<int> dialed = Dial(peer, reinterpret_cast<const sockaddr*>(&name), len, deadline);
    if (dialed.ok()) {
      fd = *dialed;
      local = true;
    } else if (dialed.status().code() != StatusCode::kPeerLost) {
      return dialed.status();  // interrupted or out of time: no second try
    }
  }
  if (fd < 0) {
    const sockaddr_storage ss = gloo::transport::tcp::Address(*address).getSockaddr();
    const socklen_t len = ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    ELASTRA_ASSIGN_OR_RETURN(fd, Dial(peer, reinterpret_cast<const sockaddr*>(&ss), len, deadline));
  }
  uint8_t hello[kHelloBytes];
  wire::Put<uint32_t>(hello, kHelloMagic);
  wire::Put<uint32_t>(hello + 4, static_cast<uint32_t>(rank_));
  wire::Put<uint32_t>(hello + 8, static_cast<uint32_t>(size_));
  wire::Put<uint32_t>(hello + 12, nonce_);
  // A fresh socket's send buffer takes 16 bytes at once.
  if (::send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(hello))) {
    ::close(fd);
    return PeerLostError(Where(peer) + ": " + wire::Errno("sending the hello"));
  }
  fds_[peer] = fd;
  ++connected_;
  if (local) ++local_;
  return OkStatus();
}

Status StreamMesh::AcceptPending(int listener) {
  const int family = listener == unix_fd_ ? AF_UNIX : AF_INET;
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return OkStatus();
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return UnavailableError("stream " + prefix_ + ": " + wire::Errno("accept"));
    }
    if (pending_.size() >= kMaxPending + static_cast<size_t>(size_)) {
      // Callers that never introduce themselves (a flood, a scanner): the newest is refused.
      ::close(fd);
      continue;
    }
    Tune(fd, family);
    Pending p;
    p.fd = fd;
    p.local = family == AF_UNIX;
    pending_.push_back(p);
  }
}

bool StreamMesh::ReadHello(Pending& p) {
  const ssize_t n = ::recv(p.fd, p.hello + p.got, kHelloBytes - p.got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (n <= 0) {  // closed before introducing itself
    ::close(p.fd);
    return true;
  }
  p.got += static_cast<size_t>(n);
  if (p.got < kHelloBytes) return false;
  const uint32_t magic = wire::Get<uint32_t>(p.hello), peer = wire::Get<uint32_t>(p.hello + 4),
                 size = wire::Get<uint32_t>(p.hello + 8), nonce = wire::Get<uint32_t>(p.hello + 12);
  const bool valid = magic == kHelloMagic && size == static_cast<uint32_t>(size_) &&
                     nonce == nonce_ && peer > static_cast<uint32_t>(rank_) &&
                     peer < static_cast<uint32_t>(size_) && fds_[peer] < 0;
  if (!valid) {
    LOG(WARNING) << "stream " << prefix_ << " rank " << rank_
                 << ": refused a connection that is no peer's"
                 << (magic == kHelloMagic ? " (it says rank " + std::to_string(peer) + " of " +
                                                std::to_string(size) + ")"
                                          : std::string(" (no hello)"));
    ::close(p.fd);
    return true;
  }
  fds_[peer] = p.fd;
  ++connected_;
  if (p.local) ++local_;
  return true;
}

}  // namespace elastra
