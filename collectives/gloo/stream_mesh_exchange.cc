// StreamMesh's transfers (see stream_mesh.h): ExchangeLocked() and its phases. The connections
// they use are made in stream_mesh.cc.
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <map>
#include <utility>

#include "collectives/gloo/stream_mesh.h"
#include "collectives/gloo/stream_mesh_internal.h"
#include "collectives/wire_bytes.h"

namespace elastra {
namespace {

using stream_mesh_internal::kHeaderBytes;
using stream_mesh_internal::kHeaderMagic;
using stream_mesh_internal::kMaxIov;

// Advances `iov` past `n` bytes: whole entries consumed move `first` on, a partial one is cut.
void Advance(std::vector<iovec>& iov, size_t& first, size_t n) {
  while (n > 0 && first < iov.size()) {
    iovec& v = iov[first];
    if (n < v.iov_len) {
      v.iov_base = static_cast<uint8_t*>(v.iov_base) + n;
      v.iov_len -= n;
      return;
    }
    n -= v.iov_len;
    ++first;
  }
  while (first < iov.size() && iov[first].iov_len == 0) ++first;
}

}  // namespace

// One poll(2) round's entries, and whom each is for.
struct StreamMesh::PollSet {
  std::vector<pollfd> polled;
  std::vector<int> owner;  // per polled entry: the flow's peer, -1 the wake fd, -2 the listener,
                           // -3 - i pending_[i]
};

Status StreamMesh::ExchangeLocked(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                                  Clock::time_point deadline) {
  std::vector<Flow> flows = PlanFlows(ops, tag);
  if (flows.empty()) return OkStatus();
  ELASTRA_RETURN_IF_ERROR(EnsureListening(deadline));
  // The lower peers not connected yet this rank connects to; the higher ones connect to it.
  std::vector<int> lower;
  for (const Flow& f : flows) {
    if (fds_[f.peer] < 0 && f.peer < rank_) lower.push_back(f.peer);
  }
  lower.erase(std::unique(lower.begin(), lower.end()), lower.end());  // flows come by peer
  ELASTRA_RETURN_IF_ERROR(ConnectTo(lower, deadline));

  PollSet set;
  size_t left = flows.size();
  while (left > 0) {
    FillPollSet(flows, &set);
    const int rc = ::poll(set.polled.data(), set.polled.size(),
                          static_cast<int>(TimeoutUntil(deadline).count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return InternalError("stream " + prefix_ + ": " + wire::Errno("poll"));
    if (set.polled[0].revents != 0 || interrupted_) {
      return AbortedError("stream " + prefix_ + ": interrupted");
    }
    if (rc == 0) {
      if (Clock::now() < deadline) continue;
      return TimedOut(flows, tag);
    }
    ELASTRA_RETURN_IF_ERROR(ServeIncoming(set));
    ELASTRA_RETURN_IF_ERROR(MoveReady(set, flows, tag, &left));
  }
  return OkStatus();
}

std::vector<StreamMesh::Flow> StreamMesh::PlanFlows(const std::vector<VectoredTransfer>& ops,
                                                    uint32_t tag) {
  std::map<std::pair<int, bool>, Flow> by_key;
  for (const VectoredTransfer& op : ops) {
    Flow& f = by_key[{op.peer, op.send}];
    f.peer = op.peer;
    f.send = op.send;
    for (const IoSegment& s : op.segments) {
      if (s.bytes == 0) continue;
      f.bytes += s.bytes;
      if (!f.iov.empty() && static_cast<uint8_t*>(f.iov.back().iov_base) + f.iov.back().iov_len ==
                                static_cast<uint8_t*>(s.data)) {
        f.iov.back().iov_len += s.bytes;  // follows the previous segment in memory
      } else {
        f.iov.push_back({s.data, s.bytes});
      }
    }
  }
  std::vector<Flow> flows;
  for (auto& [key, f] : by_key) {
    if (f.bytes == 0) continue;
    if (f.send) {
      wire::Put<uint32_t>(f.header, kHeaderMagic);
      wire::Put<uint32_t>(f.header + 4, tag);
      wire::Put<uint64_t>(f.header + 8, f.bytes);
    }
    flows.push_back(std::move(f));
  }
  return flows;
}

void StreamMesh::FillPollSet(const std::vector<Flow>& flows, PollSet* set) const {
  std::vector<pollfd>& polled = set->polled;
  std::vector<int>& owner = set->owner;
  polled.clear();
  owner.clear();
  polled.push_back({wake_fd_, POLLIN, 0});
  owner.push_back(-1);
  bool awaits_higher = false;
  std::map<int, short> events;  // by peer
  for (const Flow& f : flows) {
    if (f.done()) continue;
    if (fds_[f.peer] < 0) {
      awaits_higher = true;
      continue;
    }
    events[f.peer] |= f.send ? POLLOUT : POLLIN;
  }
  for (const auto& [peer, ev] : events) {
    polled.push_back({fds_[peer], ev, 0});
    owner.push_back(peer);
  }
  if (awaits_higher) {
    for (int listener : {listen_fd_, unix_fd_}) {
      if (listener < 0) continue;
      polled.push_back({listener, POLLIN, 0});
      owner.push_back(-2);
    }
    for (size_t i = 0; i < pending_.size(); ++i) {
      polled.push_back({pending_[i].fd, POLLIN, 0});
      owner.push_back(-3 - static_cast<int>(i));
    }
  }
}

Status StreamMesh::TimedOut(const std::vector<Flow>& flows, uint32_t tag) const {
  for (const Flow& f : flows) {
    if (f.done()) continue;
    return TimedOutError(Where(f.peer) + ": exchange (tag " + std::to_string(tag) +
                         ") timed out " +
                         (fds_[f.peer] < 0 ? std::string("waiting for the peer to connect")
                          : f.send         ? "sending"
                                           : "receiving"));
  }
  return TimedOutError("stream " + prefix_ + ": exchange timed out");
}

Status StreamMesh::ServeIncoming(const PollSet& set) {
  const std::vector<pollfd>& polled = set.polled;
  const std::vector<int>& owner = set.owner;
  std::vector<int> accepting;
  std::vector<size_t> identified;
  for (size_t i = 1; i < polled.size(); ++i) {
    if (polled[i].revents == 0) continue;
    if (owner[i] == -2) {
      accepting.push_back(polled[i].fd);
    } else if (owner[i] <= -3) {
      const size_t at = static_cast<size_t>(-3 - owner[i]);
      if (ReadHello(pending_[at])) identified.push_back(at);
    }
  }
  for (auto it = identified.rbegin(); it != identified.rend(); ++it) {
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(*it));
  }
  for (int listener : accepting) ELASTRA_RETURN_IF_ERROR(AcceptPending(listener));
  return OkStatus();
}

Status StreamMesh::MoveReady(const PollSet& set, std::vector<Flow>& flows, uint32_t tag,
                             size_t* left) {
  const std::vector<pollfd>& polled = set.polled;
  const std::vector<int>& owner = set.owner;
  for (size_t i = 1; i < polled.size(); ++i) {
    if (owner[i] < 0 || polled[i].revents == 0) continue;
    const int peer = owner[i];
    const int fd = polled[i].fd;
    const bool hangup = (polled[i].revents & (POLLERR | POLLHUP)) != 0;
    for (Flow& f : flows) {
      if (f.peer != peer || f.done()) continue;
      if (!f.send && (polled[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      if (f.send && (polled[i].revents & (POLLOUT | POLLHUP | POLLERR)) == 0) continue;
      ELASTRA_RETURN_IF_ERROR(Pump(f, fd, tag));
      if (f.done()) --*left;
      if (hangup && !f.done() && f.send) {
        return PeerLostError(Where(peer) + ": the connection was reset");
      }
    }
  }
  return OkStatus();
}

Status StreamMesh::Pump(Flow& f, int fd, uint32_t tag) const {
  const int peer = f.peer;
  while (!f.done()) {
    ssize_t n;
    if (f.send) {
      iovec parts[kMaxIov];
      size_t count = 0;
      if (f.header_done < kHeaderBytes) {
        parts[count++] = {f.header + f.header_done, kHeaderBytes - f.header_done};
      }
      for (size_t k = f.first; k < f.iov.size() && count < kMaxIov; ++k) {
        parts[count++] = f.iov[k];
      }
      msghdr m{};
      m.msg_iov = parts;
      m.msg_iovlen = count;
      n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    } else if (f.header_done < kHeaderBytes) {
      n = ::recv(fd, f.header + f.header_done, kHeaderBytes - f.header_done, 0);
    } else {
      msghdr m{};
      m.msg_iov = f.iov.data() + f.first;
      m.msg_iovlen = std::min(kMaxIov, f.iov.size() - f.first);
      n = ::recvmsg(fd, &m, 0);
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) return PeerLostError(Where(peer) + ": " + wire::Errno(f.send ? "send" : "receive"));
    if (n == 0) {
      return PeerLostError(Where(peer) + ": the peer closed the connection");
    }
    size_t moved = static_cast<size_t>(n);
    if (f.header_done < kHeaderBytes) {
      const size_t h = std::min(moved, kHeaderBytes - f.header_done);
      f.header_done += h;
      moved -= h;
      if (!f.send && f.header_done == kHeaderBytes) {
        const uint32_t magic = wire::Get<uint32_t>(f.header),
                       their_tag = wire::Get<uint32_t>(f.header + 4);
        const uint64_t bytes = wire::Get<uint64_t>(f.header + 8);
        if (magic != kHeaderMagic || their_tag != tag || bytes != f.bytes) {
          return InternalError(
              Where(peer) + ": the peer sends " + std::to_string(bytes) + " bytes with tag " +
              std::to_string(their_tag) + ", this rank expects " + std::to_string(f.bytes) +
              " with tag " + std::to_string(tag) +
              (magic != kHeaderMagic ? " (no message header: a corrupt stream)" : "") +
              ": the two sides planned different exchanges");
        }
      }
    }
    Advance(f.iov, f.first, moved);
  }
  return OkStatus();
}

}  // namespace elastra
