// RecordServer and FetchRecords: a worker's rendezvous records served by the worker itself.
//
// Why. A generation's Gloo world is built over address records (common/mesh_peers.h): each rank
// publishes its build pairs' ports and reads, from each of its 2 ceil(log2 N) build peers, the
// part that holds its pair. Through the coordinator's key-value store that is N requests and
// about 30 N keys per change on the coordinator's one thread, most of what a change costs it at
// thousands of workers (docs/scale.md). But every record is read only by its owner's build
// peers, and the coordinator knows where each worker listens: it hands each worker the
// endpoints of its build peers with the generation (NewGeneration::build_peers), each worker
// keeps its own records in its RecordServer, and the peers read them from there
// (PeerRecordStore). The coordinator serves none of it.
//
// The wire, one request per TCP connection: the client sends a request (magic, the key, how
// long the server may hold it waiting for the key); the server answers (magic, found or not, the
// value) once the key is there or that time is up, then closes. Records are rendezvous data
// (hosts and ports of listening sockets), as in the coordinator's store: not secret, and no more
// exposed than the gloo connections they lead to. A request that does not parse, or more than
// kMaxClients connections at once, are dropped.
//
// Thread-safe. The server runs one thread of its own (poll over the listening socket, the
// connections and an eventfd).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/kv_store.h"
#include "common/mesh_peers.h"
#include "elastra/status.h"

namespace elastra {

// An IPv4 endpoint as 6 bytes: the address, then the port, both in network order (what
// NewGeneration::build_peers packs, one per build peer).
// (PackEndpoint and EndpointString in common/mesh_peers.h.)
inline constexpr size_t kEndpointBytes = kRendezvousEndpointBytes;

class RecordServer {
 public:
  static constexpr int kMaxClients = 1024;

  // Listens on `bind_ipv4` (a dotted quad), a port the kernel picks. kInvalidArgument for an
  // address that is not one, or 0.0.0.0 (peers could not reach it by that address);
  // kUnavailable when the socket, the bind or the thread fails.
  static StatusOr<std::unique_ptr<RecordServer>> Start(const std::string& bind_ipv4);
  ~RecordServer();  // stops the thread; waiting clients see the connection close
  RecordServer(const RecordServer&) = delete;
  RecordServer& operator=(const RecordServer&) = delete;

  // PackEndpoint of the listening socket.
  const std::string& endpoint() const { return endpoint_; }

  // Stores `value` under `key` and answers the clients waiting for it. A key of generation N
  // ("g<N>/...", as the coordinator's store names them) drops every key of generations before
  // N - 1: a worker builds one generation at a time, and the one before may still be read by a
  // slow peer.
  void Put(const std::string& key, std::string value);
  // The value of `key` if present (for tests and the local side of PeerRecordStore).
  bool Get(const std::string& key, std::string* value) const;
  size_t size() const;
  // Requests held waiting for their key (for tests: that a client waits, before the key comes).
  int waiting() const { return waiting_.load(); }

 private:
  struct Client;
  RecordServer(int listen_fd, int wake_fd, std::string endpoint);
  void Loop();
  // Reads what `c` sent; true when it is to be dropped.
  bool ReadRequest(Client& c);
  // Writes what is left of `c`'s reply; true when it is done (or broken).
  bool WriteReply(Client& c);
  void Answer(Client& c, bool found, const std::string& value);

  const int listen_fd_;
  const int wake_fd_;
  const std::string endpoint_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> records_;  // guarded by mu_
  uint64_t newest_generation_ = 0;              // guarded by mu_
  bool stop_ = false;                           // guarded by mu_
  std::atomic<int> waiting_{0};
  std::thread thread_;
};

// Reads `keys[i]` from the RecordServer at packed endpoint `endpoints[i]`, all at once, each
// waiting on its server until the key is there, at most until `timeout`. Returns the values in
// order. kTimedOut naming the first key missing at the deadline; kPeerLost when a server cannot
// be reached or breaks the protocol; kAborted as soon as `cancelled` (checked every 100 ms, may
// be empty) says so.
StatusOr<std::vector<std::string>> FetchRecords(const std::vector<std::string>& endpoints,
                                                const std::vector<std::string>& keys,
                                                std::chrono::milliseconds timeout,
                                                const std::function<bool()>& cancelled);

}  // namespace elastra
