// MeshContext: see gloo_mesh.h.
#include "collectives/gloo/gloo_mesh.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <thread>

#include <gloo/common/error.h>
#include <gloo/transport/context.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/address.h>

#include "collectives/gloo/gloo_call.h"
#include "collectives/gloo/gloo_store.h"

namespace elastra {
namespace {

using Clock = std::chrono::steady_clock;

// A store wait of a lazy connect looks at InterruptConnects() this often.
constexpr std::chrono::milliseconds kStoreSlice{100};

// An address record part: a family tag (kIpv4 or kIpv6), the host (IPv4: sin_addr; IPv6:
// sin6_addr, sin6_flowinfo, sin6_scope_id), then each pair's port (sin_port / sin6_port), all as
// the sockaddr holds them. gloo's own address is a sockaddr_storage (128 bytes) and a sequence
// number (8): 136 bytes a pair, where this takes 2 and the host's once.
constexpr char kIpv4 = 4;
constexpr char kIpv6 = 6;

// The host part of a listening address (its sockaddr with the port zeroed), or "" for a family
// that is not IP.
std::string HostOf(const sockaddr_storage& ss) {
  if (ss.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(ss);
    std::string host(1, kIpv4);
    host.append(reinterpret_cast<const char*>(&in.sin_addr), sizeof(in.sin_addr));
    return host;
  }
  if (ss.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(ss);
    std::string host(1, kIpv6);
    host.append(reinterpret_cast<const char*>(&in6.sin6_addr), sizeof(in6.sin6_addr));
    host.append(reinterpret_cast<const char*>(&in6.sin6_flowinfo), sizeof(in6.sin6_flowinfo));
    host.append(reinterpret_cast<const char*>(&in6.sin6_scope_id), sizeof(in6.sin6_scope_id));
    return host;
  }
  return "";
}

uint16_t PortOf(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? reinterpret_cast<const sockaddr_in&>(ss).sin_port
                                 : reinterpret_cast<const sockaddr_in6&>(ss).sin6_port;
}

// The sockaddr of `host` (HostOf's bytes) and `port`; the rest zero, as getsockname leaves it.
sockaddr_storage SockaddrOf(std::string_view host, uint16_t port) {
  sockaddr_storage ss;
  std::memset(&ss, 0, sizeof(ss));
  if (host[0] == kIpv4) {
    auto& in = reinterpret_cast<sockaddr_in&>(ss);
    in.sin_family = AF_INET;
    std::memcpy(&in.sin_addr, host.data() + 1, sizeof(in.sin_addr));
    in.sin_port = port;
  } else {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(ss);
    in6.sin6_family = AF_INET6;
    const char* at = host.data() + 1;
    std::memcpy(&in6.sin6_addr, at, sizeof(in6.sin6_addr));
    at += sizeof(in6.sin6_addr);
    std::memcpy(&in6.sin6_flowinfo, at, sizeof(in6.sin6_flowinfo));
    at += sizeof(in6.sin6_flowinfo);
    std::memcpy(&in6.sin6_scope_id, at, sizeof(in6.sin6_scope_id));
    in6.sin6_port = port;
  }
  return ss;
}

size_t SockaddrBytes(const sockaddr_storage& ss) {
  return ss.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
}

}  // namespace

StatusOr<std::string> EncodeAddressRecord(const std::vector<std::vector<char>>& addresses) {
  if (addresses.empty()) return InvalidArgumentError("address record: no addresses");
  std::string host;
  std::string ports;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].size() !=
        sizeof(sockaddr_storage) + sizeof(gloo::transport::tcp::sequence_number_t)) {
      return InvalidArgumentError("address record: address " + std::to_string(i) + " has " +
                                  std::to_string(addresses[i].size()) +
                                  " bytes, not a gloo tcp address");
    }
    const gloo::transport::tcp::Address address(addresses[i]);
    const sockaddr_storage& ss = address.getSockaddr();
    if (address.getSeq() != gloo::transport::tcp::Address::kSequenceNumberUnset) {
      return InvalidArgumentError("address record: " + address.str() + " has sequence number " +
                                  std::to_string(address.getSeq()) +
                                  " (pairs sharing one listening socket are not supported)");
    }
    const std::string this_host = HostOf(ss);
    if (this_host.empty()) {
      return InvalidArgumentError("address record: " + address.str() + " is not IPv4 or IPv6");
    }
    // What the record says must be the whole listening address.
    const uint16_t port = PortOf(ss);
    const sockaddr_storage again = SockaddrOf(this_host, port);
    if (std::memcmp(&again, &ss, SockaddrBytes(ss)) != 0) {
      return InvalidArgumentError("address record: " + address.str() +
                                  " has fields the record does not keep");
    }
    if (i == 0) {
      host = this_host;
    } else if (this_host != host) {
      return InvalidArgumentError("address record: " + address.str() +
                                  " is on another host than the first pair's");
    }
    ports.append(reinterpret_cast<const char*>(&port), sizeof(port));
  }
  return host + ports;
}

StatusOr<std::vector<char>> DecodeAddressRecord(std::string_view value, int entries, int entry) {
  if (entries < 1 || entry < 0 || entry >= entries) {
    return InvalidArgumentError("address record: entry " + std::to_string(entry) + " of " +
                                std::to_string(entries));
  }
  if (value.empty() || (value[0] != kIpv4 && value[0] != kIpv6)) {
    return CorruptError(value.empty() ? "address record is empty"
                                      : "address record has unknown family tag " +
                                            std::to_string(static_cast<uint8_t>(value[0])));
  }
  const bool ipv6 = value[0] == kIpv6;
  const size_t host_bytes = AddressRecordBytes(0, ipv6);  // the tag and the host
  const size_t want = AddressRecordBytes(entries, ipv6);
  if (value.size() != want) {
    return CorruptError("address record of " + std::to_string(entries) + " pairs has " +
                        std::to_string(value.size()) + " bytes, expected " +
                        std::to_string(want));
  }
  uint16_t port = 0;
  std::memcpy(&port, value.data() + host_bytes + 2 * static_cast<size_t>(entry), sizeof(port));
  return gloo::transport::tcp::Address(SockaddrOf(value.substr(0, host_bytes), port)).bytes();
}


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

std::vector<char> MeshContext::AddressIn(const std::string& value, const std::string& key,
                                         int entries, int entry) {
  StatusOr<std::vector<char>> address = DecodeAddressRecord(value, entries, entry);
  if (!address.ok()) {
    throw StoreError(CorruptError("rendezvous key '" + key + "' holds no gloo address: " +
                                  address.status().message()));
  }
  return std::move(address).value();
}

void MeshContext::Build(Clock::time_point deadline) {
  const std::vector<int> peers = BuildPeers(rank, size);
  if (peers.empty()) return;
  // Every build pair, in BuildPeers() order (the order of this rank's record).
  std::vector<std::vector<char>> addresses;
  for (int peer : peers) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      state_[peer] = PairState::kConnecting;
    }
    addresses.push_back(CreatePair(peer, TimeoutUntil(deadline)));
  }
  // This rank's record, in parts; then, of each peer's record, the part holding its pair with
  // this rank.
  std::vector<std::pair<std::string, std::string>> sets;
  for (size_t first = 0; first < addresses.size(); first += kAddressRecordPairs) {
    const size_t last = std::min(addresses.size(), first + kAddressRecordPairs);
    StatusOr<std::string> part = EncodeAddressRecord(
        {addresses.begin() + static_cast<std::ptrdiff_t>(first),
         addresses.begin() + static_cast<std::ptrdiff_t>(last)});
    if (!part.ok()) throw std::runtime_error("rendezvous: " + part.status().ToString());
    const int k = static_cast<int>(first) / kAddressRecordPairs;
    sets.emplace_back(AddressRecordKey(prefix_, rank, k), std::move(part).value());
  }
  std::vector<std::string> gets;
  std::vector<AddressRecordSlot> slots;
  for (int peer : peers) {
    slots.push_back(AddressRecordSlotOf(peer, rank, size));
    gets.push_back(AddressRecordKey(prefix_, peer, slots.back().part));
  }
  StatusOr<std::vector<std::string>> values = store_->SetAndGet(sets, gets, TimeoutUntil(deadline));
  if (!values.ok()) throw StoreError(values.status());
  // Every address first (a corrupt one fails the build before any connect), then the connects in
  // increasing peer order: see the header on why this cannot deadlock.
  std::vector<std::vector<char>> theirs;
  for (size_t i = 0; i < peers.size(); ++i) {
    theirs.push_back(AddressIn((*values)[i], gets[i], slots[i].entries, slots[i].entry));
  }
  ConnectPairsAtOnce(peers, theirs);
}

void MeshContext::ConnectPairsAtOnce(const std::vector<int>& peers,
                                     const std::vector<std::vector<char>>& addresses) {
  if (peers.size() == 1) return ConnectPair(peers[0], addresses[0]);
  // Every pair on a thread of its own: a listening end blocks until its peer connects, so in one
  // thread the pairs would wait for each other in a chain as long as the world (rank r done only
  // once the ranks below it reached it); at once, the build takes about one connect.
  std::vector<std::exception_ptr> errors(peers.size());
  std::vector<std::thread> threads;
  threads.reserve(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    threads.emplace_back([this, &peers, &addresses, &errors, i] {
      try {
        ConnectPair(peers[i], addresses[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
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
      StatusOr<std::string> record =
          EncodeAddressRecord({CreatePair(peer, TimeoutUntil(deadline))});
      if (!record.ok()) throw std::runtime_error("rendezvous: " + record.status().ToString());
      sets.emplace_back(PairKey(rank, peer), std::move(record).value());
    }
    if (!sets.empty()) {
      StatusOr<std::vector<std::string>> set = store_->SetAndGet(sets, {}, TimeoutUntil(deadline));
      if (!set.ok()) throw StoreError(set.status());
    }
    for (int peer : peers) {
      if (std::find(mine.begin(), mine.end(), peer) != mine.end()) {
        const std::string key = PairKey(peer, rank);
        StatusOr<std::vector<std::string>> got =
            GetInSlices(store_, {key}, deadline, kStoreSlice, [this] {
              std::lock_guard<std::mutex> lock(mu_);
              return interrupted_;
            });
        if (got.status().code() == StatusCode::kAborted) throw CallInterrupted();
        if (got.status().code() == StatusCode::kTimedOut) {
          throw StoreError(TimedOutError("rank " + std::to_string(peer) +
                                         " did not publish its address for rank " +
                                         std::to_string(rank) + " in time"));
        }
        if (!got.ok()) throw StoreError(got.status());
        ConnectPair(peer, AddressIn((*got)[0], key, 1, 0));
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
