// MeshContext: see gloo_mesh.h.
#include "collectives/gloo/gloo_mesh.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <gloo/common/error.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>

#include "collectives/gloo/gloo_call.h"
#include "collectives/gloo/gloo_store.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;

// A store wait of a lazy connect looks at InterruptConnects() this often.
constexpr std::chrono::milliseconds kStoreSlice{100};

std::chrono::milliseconds Remaining(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// gloo's tcp address is a sockaddr_storage (128 bytes) and a sequence number (8), mostly zeros:
// 136 bytes per pair, some 2 ceil(log2 n) of them written and read by every rank through the
// coordinator. Kept as the sockaddr's first 28 bytes (sockaddr_in6 is the largest) and the last 8
// when everything between is zero: tag 1, the total size (2 bytes), those 36 bytes; else tag 0
// and the bytes as they are.
constexpr size_t kHead = 28;
constexpr size_t kTail = 8;

std::string Compact(const std::vector<char>& bytes) {
  const bool sparse = bytes.size() > kHead + kTail && bytes.size() < 65536 &&
                      std::all_of(bytes.begin() + kHead, bytes.end() - kTail,
                                  [](char c) { return c == 0; });
  if (!sparse) return std::string(1, '\0') + std::string(bytes.begin(), bytes.end());
  std::string out(1, '\1');
  out.push_back(static_cast<char>(bytes.size() & 0xff));
  out.push_back(static_cast<char>(bytes.size() >> 8));
  out.append(bytes.begin(), bytes.begin() + kHead);
  out.append(bytes.end() - kTail, bytes.end());
  return out;
}

std::vector<char> Expand(const std::string& value, const std::string& key) {
  if (!value.empty() && value[0] == '\0') return std::vector<char>(value.begin() + 1, value.end());
  if (value.size() == 3 + kHead + kTail && value[0] == '\1') {
    const size_t size = static_cast<uint8_t>(value[1]) | (static_cast<uint8_t>(value[2]) << 8);
    if (size > kHead + kTail) {
      std::vector<char> bytes(size, 0);
      std::copy(value.begin() + 3, value.begin() + 3 + kHead, bytes.begin());
      std::copy(value.end() - kTail, value.end(), bytes.end() - kTail);
      return bytes;
    }
  }
  throw StoreError(CorruptError("rendezvous key '" + key + "' holds no gloo address"));
}

}  // namespace

MeshContext::MeshContext(int rank, int size, std::shared_ptr<gloo::transport::Device> device,
                         KeyValueStore* store, std::string prefix)
    : gloo::Context(rank, size),
      store_(store),
      prefix_(std::move(prefix)),
      state_(size, PairState::kNone) {
  transportContext_ = device->createContext(rank, size);
  device_ = std::move(device);
}

MeshContext::~MeshContext() = default;

std::vector<char> MeshContext::CreatePair(int peer, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  // ExistingPairs() after InterruptConnects() must list every pair there will be.
  if (interrupted_) throw CallInterrupted();
  // The pair keeps the transport context's timeout as its own, and gloo waits 5 times that for a
  // connection: a fifth of what is left makes the connect end at the caller's deadline.
  transportContext_->setTimeout(std::max(std::chrono::milliseconds(1), timeout / 5));
  return transportContext_->createPair(peer)->address().bytes();
}

void MeshContext::ConnectPair(int peer, const std::vector<char>& address) {
  gloo::transport::Pair* pair = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (interrupted_) throw CallInterrupted();
    pair = transportContext_->getPair(peer).get();
  }
  pair->connect(address);
  std::lock_guard<std::mutex> lock(mu_);
  // InterruptConnects() closed the pair under the connect (which then returns as if connected).
  if (interrupted_) throw CallInterrupted();
  state_[peer] = PairState::kConnected;
  changed_.notify_all();
}

std::string MeshContext::PairKey(int from, int to) const {
  return prefix_ + "pair/" + std::to_string(from) + "/" + std::to_string(to);
}

void MeshContext::Build(Clock::time_point deadline) {
  const std::vector<int> peers = BuildPeers(rank, size);
  if (peers.empty()) return;
  // One key per pair and direction: this rank's address for each peer, then the peers' for it.
  std::vector<std::pair<std::string, std::string>> sets;
  std::vector<std::string> gets;
  for (int peer : peers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_[peer] = PairState::kConnecting;
    }
    sets.emplace_back(PairKey(rank, peer), Compact(CreatePair(peer, Remaining(deadline))));
    gets.push_back(PairKey(peer, rank));
  }
  StatusOr<std::vector<std::string>> values = store_->SetAndGet(sets, gets, Remaining(deadline));
  if (!values.ok()) throw StoreError(values.status());
  // Increasing peer order: see the header on why this cannot deadlock.
  for (size_t i = 0; i < peers.size(); ++i) ConnectPair(peers[i], Expand((*values)[i], gets[i]));
}

void MeshContext::EnsurePairs(const std::vector<int>& wanted, Clock::time_point deadline) {
  std::vector<int> peers = wanted;
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  std::vector<int> mine;  // the pairs this call connects; the others another thread does
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (interrupted_) throw CallInterrupted();
    for (int peer : peers) {
      if (state_[peer] == PairState::kFailed) {
        throw gloo::IoException("pair to rank " + std::to_string(peer) + " failed to connect");
      }
      if (state_[peer] == PairState::kNone) {
        state_[peer] = PairState::kConnecting;
        mine.push_back(peer);
      }
    }
    if (std::all_of(peers.begin(), peers.end(),
                    [&](int p) { return state_[p] == PairState::kConnected; })) {
      return;
    }
  }
  try {
    // Publish every address first, then wait and connect in increasing order.
    std::vector<std::pair<std::string, std::string>> sets;
    for (int peer : mine) {
      sets.emplace_back(PairKey(rank, peer), Compact(CreatePair(peer, Remaining(deadline))));
    }
    if (!sets.empty()) {
      StatusOr<std::vector<std::string>> set = store_->SetAndGet(sets, {}, Remaining(deadline));
      if (!set.ok()) throw StoreError(set.status());
    }
    for (int peer : peers) {
      if (std::find(mine.begin(), mine.end(), peer) != mine.end()) {
        const std::string key = PairKey(peer, rank);
        std::string value;
        for (;;) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (interrupted_) throw CallInterrupted();
          }
          if (Clock::now() >= deadline) {
            throw StoreError(TimedOutError("rank " + std::to_string(peer) +
                                           " did not publish its address for rank " +
                                           std::to_string(rank) + " in time"));
          }
          StatusOr<std::vector<std::string>> got =
              store_->SetAndGet({}, {key}, std::min(Remaining(deadline), kStoreSlice));
          if (got.ok()) {
            value = std::move((*got)[0]);
            break;
          }
          if (got.status().code() != StatusCode::kTimedOut) throw StoreError(got.status());
        }
        ConnectPair(peer, Expand(value, key));
        continue;
      }
      // Another thread of this rank connects it.
      std::unique_lock<std::mutex> lock(mu_);
      const bool settled = changed_.wait_until(lock, deadline, [&] {
        return interrupted_ || state_[peer] == PairState::kConnected ||
               state_[peer] == PairState::kFailed;
      });
      if (interrupted_) throw CallInterrupted();
      if (!settled) {
        throw gloo::IoException("timed out waiting for the pair to rank " + std::to_string(peer));
      }
      if (state_[peer] == PairState::kFailed) {
        throw gloo::IoException("pair to rank " + std::to_string(peer) + " failed to connect");
      }
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int peer : mine) {
      if (state_[peer] == PairState::kConnecting) state_[peer] = PairState::kFailed;
    }
    changed_.notify_all();
    throw;
  }
}

void MeshContext::InterruptConnects() {
  std::vector<gloo::transport::Pair*> connecting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (interrupted_) return;
    interrupted_ = true;
    for (int peer = 0; peer < size; ++peer) {
      if (state_[peer] != PairState::kConnecting) continue;
      if (gloo::transport::Pair* pair = transportContext_->getPair(peer).get()) {
        connecting.push_back(pair);
      }
    }
    changed_.notify_all();
  }
  // A hard close wakes a Pair::connect blocked on it; pairs live as long as the context.
  for (gloo::transport::Pair* pair : connecting) pair->close();
}

std::vector<gloo::transport::Pair*> MeshContext::ExistingPairs() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<gloo::transport::Pair*> pairs;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    if (gloo::transport::Pair* pair = transportContext_->getPair(peer).get()) {
      pairs.push_back(pair);
    }
  }
  return pairs;
}

int MeshContext::connected_pairs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count(state_.begin(), state_.end(), PairState::kConnected));
}

}  // namespace elastra
