// The pairs of a sparse mesh: the ranks a rank connects to when a Gloo world is built
// (collectives/gloo/gloo_mesh.h), every partner of its ring, binomial tree, dissemination
// barrier and recursive doubling. Shared with the scale simulator (bench/scale), which models
// the same rendezvous without linking Gloo.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace elastra {

// {rank +- 2^k mod size : 2^k < size} without `rank`, ascending: at most 2 ceil(log2 size).
inline std::vector<int> BuildPeers(int rank, int size) {
  std::vector<int> peers;
  for (int64_t d = 1; d < size; d <<= 1) {
    peers.push_back(static_cast<int>((rank + d) % size));
    peers.push_back(static_cast<int>(((rank - d) % size + size) % size));
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  std::erase(peers, rank);
  return peers;
}

}  // namespace elastra
