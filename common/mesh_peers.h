// The pairs of a sparse mesh: the ranks a rank connects to when a Gloo world is built
// (collectives/gloo/gloo_mesh.h), every partner of its ring, binomial tree, dissemination
// barrier and recursive doubling; and the keys and sizes of its rendezvous, the address record
// each rank publishes. Shared with the scale simulator (bench/scale), which models the same
// rendezvous without linking Gloo.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

namespace elastra {

// {rank +- 2^k mod size : 2^k < size} without `rank`, ascending: at most 2 ceil(log2 size).
// Into `peers` (cleared first), for callers that work them out for every rank of a world.
inline void BuildPeersInto(int rank, int size, std::vector<int>* peers) {
  peers->clear();
  for (int64_t d = 1; d < size; d <<= 1) {
    peers->push_back(static_cast<int>((rank + d) % size));
    peers->push_back(static_cast<int>(((rank - d) % size + size) % size));
  }
  std::sort(peers->begin(), peers->end());
  peers->erase(std::unique(peers->begin(), peers->end()), peers->end());
  std::erase(*peers, rank);
}

inline std::vector<int> BuildPeers(int rank, int size) {
  std::vector<int> peers;
  BuildPeersInto(rank, size, &peers);
  return peers;
}

// A rank's address record: the listening address of its pair to each build peer, in
// BuildPeers() order, published in parts of at most kAddressRecordPairs pairs, part k under
// AddressRecordKey(prefix, rank, k). A peer reads the one part that holds its own pair. The
// host's address is in every part (the reader of a part needs it), and each key read or written
// costs its name and two 8-byte lengths on the wire: 4 pairs a part is about the least bytes in
// all (docs/collectives.md, "No full mesh").
inline constexpr int kAddressRecordPairs = 4;

inline int AddressRecordParts(int rank, int size) {
  const int peers = static_cast<int>(BuildPeers(rank, size).size());
  return (peers + kAddressRecordPairs - 1) / kAddressRecordPairs;
}

inline std::string AddressRecordKey(const std::string& prefix, int rank, int part) {
  return prefix + "a/" + std::to_string(rank) + "/" + std::to_string(part);
}

// The rank whose record `key` names (AddressRecordKey(prefix, rank, part)), or -1 when `key` is
// no such key of `prefix`.
inline int AddressRecordOwner(const std::string& prefix, const std::string& key) {
  if (key.size() <= prefix.size() + 2 || key.compare(0, prefix.size(), prefix) != 0 ||
      key.compare(prefix.size(), 2, "a/") != 0) {
    return -1;
  }
  int64_t rank = 0;
  size_t i = prefix.size() + 2;
  const size_t first = i;
  for (; i < key.size() && key[i] >= '0' && key[i] <= '9' && i - first < 10; ++i) {
    rank = rank * 10 + (key[i] - '0');
  }
  if (i == first || i >= key.size() || key[i] != '/' || i + 1 == key.size()) return -1;
  for (size_t j = i + 1; j < key.size(); ++j) {
    if (key[j] < '0' || key[j] > '9') return -1;
  }
  return rank <= INT32_MAX ? static_cast<int>(rank) : -1;
}

// Where `owner`'s record holds its pair with `reader`: {part, entry in the part, pairs in the
// part}; {-1, -1, 0} when `reader` is not a build peer of `owner`.
struct AddressRecordSlot {
  int part = -1;
  int entry = -1;
  int entries = 0;
};

inline AddressRecordSlot AddressRecordSlotOf(int owner, int reader, int size) {
  const std::vector<int> peers = BuildPeers(owner, size);
  const auto at = std::lower_bound(peers.begin(), peers.end(), reader);
  if (at == peers.end() || *at != reader) return {};
  const int index = static_cast<int>(at - peers.begin());
  const int part = index / kAddressRecordPairs;
  const int first = part * kAddressRecordPairs;
  return {part, index - first,
          std::min(kAddressRecordPairs, static_cast<int>(peers.size()) - first)};
}

// A worker's rendezvous endpoint (collectives/record_server.h), as JoinRequest::rendezvous and
// NewGeneration::build_peers carry it: an IPv4 address and a port, both in network order.
inline constexpr size_t kRendezvousEndpointBytes = 6;

inline std::string PackEndpoint(uint32_t ip_network_order, uint16_t port_network_order) {
  std::string out(kRendezvousEndpointBytes, '\0');
  std::memcpy(out.data(), &ip_network_order, 4);
  std::memcpy(out.data() + 4, &port_network_order, 2);
  return out;
}

// "a.b.c.d:port" of a packed endpoint, for messages.
inline std::string EndpointString(const std::string& packed) {
  if (packed.size() != kRendezvousEndpointBytes) return "(bad endpoint)";
  in_addr a;
  std::memcpy(&a, packed.data(), 4);
  uint16_t port;
  std::memcpy(&port, packed.data() + 4, 2);
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &a, text, sizeof(text));
  return std::string(text) + ":" + std::to_string(ntohs(port));
}

// The bytes of a part of `entries` pairs (collectives/gloo/gloo_mesh.cc encodes it): a family
// tag, the host's address (IPv4: 4 bytes; IPv6: 16 and its flow label and scope, 8), and a
// 2-byte port per pair.
inline size_t AddressRecordBytes(int entries, bool ipv6 = false) {
  return 1 + (ipv6 ? 24 : 4) + 2 * static_cast<size_t>(entries);
}

}  // namespace elastra
