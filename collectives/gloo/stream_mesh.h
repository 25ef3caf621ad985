// StreamMesh: the byte streams of a Gloo communicator's ExchangeV(), over TCP sockets of its own.
// Private to the Gloo backend.
//
// Why its own sockets. A gloo pair sends and receives one contiguous buffer per message, so a
// state move's strided rectangles were packed into a staging buffer on the sender and unpacked
// from one on the receiver: four copies of each byte (pack, into the kernel, out of it, unpack)
// where a contiguous message takes two, about a fifth of a reshard's CPU time on loopback
// (docs/resharding.md). gloo has no scatter-gather transfer, and its sockets are its own. Here
// every transfer is a list of memory segments that sendmsg(2) gathers from and recvmsg(2)
// scatters into, IOV_MAX segments a call: each byte is copied into the kernel and out of it, and
// nowhere else.
//
// Connections. Each rank that exchanges anything listens on one socket of its own (bound to the
// communicator's host, a port the kernel picks) and publishes its address under
// `prefix + "s/" + rank` (an address record of one entry, common/mesh_peers.h) the first time it
// exchanges. Of two ranks that exchange, the higher connects to the lower and introduces itself
// (a hello: magic, its rank, the world size and a hash of the prefix); the lower accepts while it
// exchanges and refuses any other caller. A connect needs only the peer's listening socket, not
// its accept, so no order of calls can deadlock: every rank publishes before it waits for anyone.
// So a rank holds sockets to the peers of its transfers only, and a connection stays until the
// mesh is closed.
//
// Peers on one host. A rank also listens on a Unix stream socket with an abstract name (random,
// so no other process guesses it; abstract names live in the network namespace) and appends the
// name to its record. A peer whose record has the same host address connects there, and over TCP
// when that fails (another network namespace: a namespace-cluster host). A Unix stream copies
// the same bytes into and out of the kernel without TCP's segments, acknowledgements and
// loopback interrupts, a large part of the CPU time of a transfer between ranks of one machine.
//
// Messages. Per call, each (peer, direction) with bytes is one message: a 16-byte header
// (magic, the call's tag, the byte count), then the bytes. The receiver reads the header before
// any byte of the payload and fails with kInternal when its tag or size is not what it expects
// (both sides must derive the same exchange from the same plan): nothing lands in its memory
// then. It never reads past a message, so the next call's bytes wait in the socket.
//
// Errors: kPeerLost (a connection reset or closed, or the store failing), kTimedOut (the
// deadline), kAborted (Interrupt()), kInternal (a mismatched header). After any of them the mesh
// is broken and returns the same status; the communicator closes it (Close()) with a reset, so
// peers fail at once. Thread-safe: Exchange() calls run one at a time; Interrupt() from any
// thread; Close() waits for an Exchange() in progress (Interrupt() it first).
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/kv_store.h"
#include "elastra/communicator.h"

namespace elastra {

class StreamMesh {
 public:
  using Clock = std::chrono::steady_clock;

  // `store` is not owned and must outlive the mesh; `hostname` is the address to listen on and
  // advertise (GlooOptions::hostname). Opens nothing until the first Exchange().
  // `local_streams`: peers on this host connect through a Unix socket (see the header comment).
  StreamMesh(int rank, int size, std::string hostname, KeyValueStore* store, std::string prefix,
             bool local_streams = true);
  ~StreamMesh();
  StreamMesh(const StreamMesh&) = delete;
  StreamMesh& operator=(const StreamMesh&) = delete;

  // Runs every transfer of `ops` (checked by the caller: valid peers, no null segment with
  // bytes) by `deadline`. See the header comment for the errors.
  Status Exchange(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                  Clock::time_point deadline);

  // Wakes an Exchange() in progress (it returns kAborted) and makes later ones return kAborted
  // at once. Idempotent; never blocks.
  void Interrupt();

  // Interrupts, waits for an Exchange() in progress to return, then closes every socket: with
  // `reset` (a broken communicator) by a reset (SO_LINGER 0), so that peers reading or writing to
  // this rank fail at once; else in order, so that bytes in flight still arrive. Idempotent; the
  // destructor closes in order.
  void Close(bool reset);

  // Peers this rank holds a connection to.
  int connected_peers() const;
  // Of those, the peers connected through the Unix socket.
  int local_peers() const { return local_.load(); }
  // 1 while an Exchange() is in progress (for tests: GlooWaitsInFlightForTesting), else 0.
  int exchanges_in_flight() const { return in_exchange_.load(); }

 private:
  struct Flow;
  struct Pending;
  struct PollSet;

  // Exchange() under mu_, in phases (stream_mesh_exchange.cc): plan the flows, connect, then
  // poll and move bytes until every flow is done.
  Status ExchangeLocked(const std::vector<VectoredTransfer>& ops, uint32_t tag,
                        Clock::time_point deadline);
  // One flow per (peer, direction) with bytes, its segments in list order, its header written.
  static std::vector<Flow> PlanFlows(const std::vector<VectoredTransfer>& ops, uint32_t tag);
  // What to poll for: the wake fd, the connected peers of unfinished flows, and while a higher
  // peer is still to connect, the listeners and the pending connections.
  void FillPollSet(const std::vector<Flow>& flows, PollSet* set) const;
  // The kTimedOut of an exchange past its deadline, naming the first unfinished flow.
  Status TimedOut(const std::vector<Flow>& flows, uint32_t tag) const;
  // Accepts on the listeners and reads the hellos that poll() found ready.
  Status ServeIncoming(const PollSet& set);
  // Moves bytes on every peer socket that poll() found ready; `left` counts unfinished flows.
  Status MoveReady(const PollSet& set, std::vector<Flow>& flows, uint32_t tag, size_t* left);
  // Sends (receives) on `fd` as much of `f` as the socket takes (gives) now: kPeerLost when the
  // connection broke, kInternal when the peer's header disagrees with `f`.
  Status Pump(Flow& f, int fd, uint32_t tag) const;
  // Listens and publishes the address, once.
  Status EnsureListening(Clock::time_point deadline);
  // Listens on a Unix socket too and appends its name to `record`; on failure (logged) peers on
  // this host connect over TCP.
  void ListenLocally(std::string* record);
  // A connected socket to `address`, or kPeerLost (refused, unreachable), kTimedOut, kAborted.
  StatusOr<int> Dial(int peer, const sockaddr* address, socklen_t len, Clock::time_point deadline);
  // Connects to each of `lower` (ranks below this one) not connected yet.
  Status ConnectTo(const std::vector<int>& lower, Clock::time_point deadline);
  Status ConnectOne(int peer, const std::string& record, Clock::time_point deadline);
  // Accepts what waits on `listener` (identified later by its hello).
  Status AcceptPending(int listener);
  // Reads what it can of a pending connection's hello; true once it is identified (or dropped).
  bool ReadHello(Pending& p);
  std::string Where(int peer) const;

  const int rank_;
  const int size_;
  const std::string hostname_;
  const bool local_streams_;
  KeyValueStore* const store_;
  const std::string prefix_;
  const uint32_t nonce_;  // a hash of prefix_, in every hello

  std::atomic<bool> interrupted_{false};
  std::atomic<int> in_exchange_{0};
  int wake_fd_ = -1;  // an eventfd, readable once interrupted

  mutable std::mutex mu_;  // held by Exchange() and Close(); guards what follows
  int listen_fd_ = -1;
  int unix_fd_ = -1;      // the Unix listening socket, -1 without one
  std::string own_host_;  // this rank's address record less its port
  bool closed_ = false;
  Status broken_;
  std::vector<int> fds_;          // by peer rank, -1 while not connected
  std::vector<Pending> pending_;  // accepted, not yet identified
  std::atomic<int> connected_{0};
  std::atomic<int> local_{0};
};

}  // namespace elastra
