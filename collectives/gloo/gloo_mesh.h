// MeshContext: a gloo context whose pairs are connected sparsely. Private to the Gloo backend (it
// includes gloo headers).
//
// gloo's rendezvous::Context::connectFullMesh connects every rank to every other: n - 1 pairs
// (and sockets) per rank, and a store rendezvous in which every rank reads every rank's key of
// n addresses (O(n^2) store reads and O(n^3) bytes per generation). A MeshContext connects, at
// build, only the pairs to BuildPeers(rank, size) = {rank +- 2^k mod n : 2^k < n}: at most
// 2 ceil(log2 n) peers, symmetric, holding the ring neighbours and every partner of the binomial
// tree, the dissemination barrier and recursive doubling (gloo_algorithms.h).
//
// Its rendezvous is one store call per rank (KeyValueStore::SetAndGet) over address records
// (common/mesh_peers.h). In this gloo (libgloo 0.0~git20220518) every tcp pair listens on a
// socket of its own, bound to the device's address with a port the kernel picks: a rank's pair
// addresses differ only in their port, and no peer can derive it. So each rank publishes one
// record, the host once and a 2-byte port per build peer in BuildPeers() order, in parts of 4
// pairs (a few keys instead of one per pair), and reads from each peer's record the one part
// holding its pair: at 16,384 ranks 7 keys set and 27 read of 13 bytes each, where a key per
// pair set 27 and read 27 of 39 bytes. O(1) store messages, O(log n) bytes a rank.
//
// Other pairs are connected on demand by both ends (EnsurePairs): each publishes its address for
// the pair under a key naming both ranks (a record of one pair), reads the other's, and
// connects; so state moves connect only the peers of their transfer plan. A pair, once
// connected, stays until the context closes.
//
// Deadlock freedom. gloo's Pair::connect blocks the listening end until the other end connects
// (the connecting end needs only the peer's listening socket, which exists from the moment its
// address is published). Each caller publishes every address it needs first. Build then connects
// every build pair at once, one thread each: no connect waits for another of its rank. (In one
// thread, in increasing peer order, rank r finished only after the ranks below it reached it: a
// chain as long as the world, 110 ms of a 16-rank build on the 2-core VM against 15-25 ms at
// once.) EnsurePairs connects in increasing peer order: a rank X blocked on Y means Y has not
// reached X yet and is blocked on some Z < X, and such a chain cannot close into a cycle.
//
// Thread-safe: EnsurePairs may run on several threads at once (a pair that another thread is
// connecting is waited for), and InterruptConnects() from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>
#include <gloo/transport/pair.h>

#include "collectives/kv_store.h"
#include "common/mesh_peers.h"

namespace elastra {

// A part of an address record (common/mesh_peers.h) from gloo tcp addresses (Address::bytes()
// of the pairs, in order): a family tag, the host's address once, each pair's port.
// kInvalidArgument when they are not tcp listening addresses of one host differing only in their
// port (another family, another host, or a sequence number set: a gloo whose pairs share one
// listening socket, which this encoding does not describe).
StatusOr<std::string> EncodeAddressRecord(const std::vector<std::vector<char>>& addresses);

// Entry `entry` of a part of `entries` pairs, as the gloo tcp address Pair::connect takes.
// kCorrupt when `value` is not such a part (empty, another size, an unknown family tag).
StatusOr<std::vector<char>> DecodeAddressRecord(std::string_view value, int entries, int entry);

class MeshContext : public gloo::Context {
 public:
  using Clock = std::chrono::steady_clock;

  // `store` is not owned and must outlive the context; `prefix` names its keys.
  MeshContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
              KeyValueStore* store, std::string prefix);
  ~MeshContext() override;

  // Creates and connects the pairs to BuildPeers() by `deadline`. Throws StoreError when the
  // store fails or times out, gloo::IoException when a connection does, like connectFullMesh.
  void Build(Clock::time_point deadline);

  // Connects the pairs to `peers` not connected yet (both ends must call it for a pair, each in
  // its own time), by `deadline`. Throws CallInterrupted once InterruptConnects() was called (or
  // when it interrupts a connect in progress), StoreError or gloo::IoException as Build does.
  void EnsurePairs(const std::vector<int>& peers, Clock::time_point deadline);

  // Wakes every EnsurePairs in progress (a store wait within 100 ms, a blocked connect at once, by
  // closing that pair) and makes later ones throw CallInterrupted. Idempotent.
  void InterruptConnects();

  // Connected pairs (for tests and benchmarks: the peers this rank holds a socket to).
  int connected_pairs() const;

  // Every pair created so far (connected or not). After InterruptConnects() no pair is created.
  std::vector<gloo::transport::Pair*> ExistingPairs() const;

 private:
  enum class PairState { kNone, kConnecting, kConnected, kFailed };

  // Creates the pair to `peer` with connect timeout about `timeout` (gloo waits 5 x the pair's);
  // returns its address (gloo's bytes).
  std::vector<char> CreatePair(int peer, std::chrono::milliseconds timeout);
  // Connects the created pair to `peer` at `address`; CallInterrupted when interrupted meanwhile.
  void ConnectPair(int peer, const std::vector<char>& address);
  // Connects the created pairs to `peers` at `addresses` (the same order), all at once; the
  // first error is thrown once every connect returned.
  void ConnectPairsAtOnce(const std::vector<int>& peers,
                          const std::vector<std::vector<char>>& addresses);
  // The key of `from`'s address for its pair with `to` (a pair connected on demand).
  std::string PairKey(int from, int to) const;
  // The gloo address in the value of `key`, entry `entry` of `entries`; throws StoreError
  // (kCorrupt) when the value is no address record.
  static std::vector<char> AddressIn(const std::string& value, const std::string& key, int entries,
                                     int entry);

  KeyValueStore* const store_;
  const std::string prefix_;

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<PairState> state_;  // guarded by mu_, one per rank
  bool interrupted_ = false;      // guarded by mu_
};

}  // namespace elastra
