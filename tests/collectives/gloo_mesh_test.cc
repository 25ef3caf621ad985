// The Gloo backend without a full mesh (collectives/gloo/gloo_mesh.h), ranks as threads over real
// gloo/TCP and the in-memory store: how many pairs a rank connects, its rendezvous over address
// records (the keys and values it sets and reads, corrupt records), pairs connected on demand by
// Send, Recv and Exchange, recursive-doubling allreduce, and Abort() during an on-demand connect.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <gloo/transport/tcp/address.h>

#include "collectives/gloo/gloo_mesh.h"
#include "gloo_test_util.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using testing::ConnectAll;
using testing::Spawn;

constexpr milliseconds kT{20000};

int CeilLog2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

bool IsBuildPeer(int a, int b, int n) {
  const std::vector<int> peers = BuildPeers(a, n);
  return std::find(peers.begin(), peers.end(), b) != peers.end();
}

TEST(BuildPeersTest, SymmetricBoundedAndHoldingEveryCollectivePartner) {
  for (int n = 1; n <= 64; ++n) {
    for (int r = 0; r < n; ++r) {
      const std::vector<int> peers = BuildPeers(r, n);
      EXPECT_LE(static_cast<int>(peers.size()), 2 * CeilLog2(n)) << "n " << n << " r " << r;
      for (int p : peers) EXPECT_TRUE(IsBuildPeer(p, r, n)) << "n " << n << ": " << r << "-" << p;
      for (int d = 1; d < n; d <<= 1) {
        EXPECT_TRUE(IsBuildPeer(r, (r + d) % n, n)) << "n " << n << " r " << r << " d " << d;
      }
    }
    if (n <= 5) {
      for (int r = 0; r < n; ++r) EXPECT_EQ(static_cast<int>(BuildPeers(r, n).size()), n - 1);
    }
  }
}

// Each build peer of a rank finds its pair in exactly one entry of the rank's record, no two peers
// in the same entry, every entry of every part read by someone; non-peers find none.
TEST(BuildPeersTest, AddressRecordSlotsCoverEachPeerOnce) {
  for (int n = 1; n <= 70; ++n) {
    for (int owner = 0; owner < n; ++owner) {
      const std::vector<int> peers = BuildPeers(owner, n);
      const int parts = AddressRecordParts(owner, n);
      EXPECT_EQ(parts, (static_cast<int>(peers.size()) + kAddressRecordPairs - 1) /
                           kAddressRecordPairs);
      std::vector<std::vector<int>> readers(parts);
      for (int reader = 0; reader < n; ++reader) {
        const AddressRecordSlot slot = AddressRecordSlotOf(owner, reader, n);
        if (!IsBuildPeer(owner, reader, n)) {
          EXPECT_EQ(slot.part, -1) << "n " << n << ": " << owner << " " << reader;
          continue;
        }
        ASSERT_TRUE(slot.part >= 0 && slot.part < parts) << "n " << n;
        ASSERT_TRUE(slot.entry >= 0 && slot.entry < slot.entries) << "n " << n;
        EXPECT_EQ(peers[slot.part * kAddressRecordPairs + slot.entry], reader);
        readers[slot.part].push_back(slot.entry);
      }
      for (int part = 0; part < parts; ++part) {
        std::sort(readers[part].begin(), readers[part].end());
        std::vector<int> all(std::min(kAddressRecordPairs,
                                      static_cast<int>(peers.size()) - part * kAddressRecordPairs));
        for (size_t e = 0; e < all.size(); ++e) all[e] = static_cast<int>(e);
        EXPECT_EQ(readers[part], all) << "n " << n << " owner " << owner << " part " << part;
      }
    }
  }
}

// After a build every rank holds exactly its build pairs (<= 2 ceil(log2 n)), and every
// collective runs over them (a collective using another pair would crash on a null pair).
TEST(GlooMeshTest, BuildConnectsLogPeersAndCollectivesUseOnlyThem) {
  for (int n : {2, 3, 5, 8, 12, 17, 32}) {
    SCOPED_TRACE("n " + std::to_string(n));
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, "mesh" + std::to_string(n) + "/", n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      ASSERT_NE(comms[r], nullptr);
      EXPECT_EQ(GlooConnectedPairs(*comms[r]), static_cast<int>(BuildPeers(r, n).size()));
      EXPECT_LE(GlooConnectedPairs(*comms[r]), 2 * CeilLog2(n));
      threads.emplace_back([&, r] {
        Communicator& c = *comms[r];
        std::vector<int64_t> small(4, r + 1);
        EXPECT_TRUE(c.Allreduce(small.data(), small.size(), DataType::kInt64, ReduceOp::kSum).ok());
        EXPECT_EQ(small[3], int64_t{n} * (n + 1) / 2);
        std::vector<float> large(70000, 1.0f);  // above the small-allreduce bound: the ring
        EXPECT_TRUE(c.Allreduce(large.data(), large.size(), DataType::kFloat32, ReduceOp::kSum)
                        .ok());
        EXPECT_EQ(large[69999], static_cast<float>(n));
        for (int root = 0; root < n; ++root) {
          int64_t v = r == root ? 1000 + root : -1;
          EXPECT_TRUE(c.Broadcast(&v, 1, DataType::kInt64, root).ok());
          EXPECT_EQ(v, 1000 + root);
        }
        EXPECT_TRUE(c.Barrier().ok());
        std::vector<int32_t> all(n, -1);
        const int32_t mine = r * 3;
        EXPECT_TRUE(c.Allgather(&mine, all.data(), 1, DataType::kInt32, kT).ok());
        for (int p = 0; p < n; ++p) EXPECT_EQ(all[p], p * 3);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(GlooConnectedPairs(*comms[r]), static_cast<int>(BuildPeers(r, n).size()));
    }
  }
}

// The in-memory store, recording each SetAndGet: who set which keys, who read which.
class RecordingStore : public InMemoryKeyValueStore {
 public:
  struct Call {
    std::vector<std::string> sets, gets;
  };
  StatusOr<std::vector<std::string>> SetAndGet(
      const std::vector<std::pair<std::string, std::string>>& sets,
      const std::vector<std::string>& gets, milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Call call;
      for (const auto& [key, value] : sets) {
        call.sets.push_back(key);
        values_[key] = value;
      }
      call.gets = gets;
      calls_.push_back(std::move(call));
    }
    return InMemoryKeyValueStore::SetAndGet(sets, gets, timeout);
  }
  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  std::string value(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = values_.find(key);
    return it == values_.end() ? "" : it->second;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::map<std::string, std::string> values_;
};

// Every rank's rendezvous is one SetAndGet that sets its address record (the parts of
// AddressRecordParts, nothing per pair) and reads one part of each build peer's; the build then
// connects every build pair and the ranks agree on an allreduce over them.
TEST(GlooMeshTest, BuildRendezvousesOverOneAddressRecordPerRank) {
  for (int n : {1, 2, 3, 5, 8, 13}) {
    SCOPED_TRACE("n " + std::to_string(n));
    RecordingStore store;
    const std::string prefix = "rec" + std::to_string(n) + "/";
    auto comms = ConnectAll(&store, prefix, n);
    std::map<std::string, int> setter;  // key -> the rank that set it
    std::vector<const RecordingStore::Call*> call_of(n, nullptr);
    const std::vector<RecordingStore::Call> calls = store.calls();
    for (const auto& call : calls) {
      ASSERT_FALSE(call.sets.empty());
      // The first key names its rank: <prefix>a/<rank>/0.
      const int r = std::stoi(call.sets[0].substr(prefix.size() + 2));
      ASSERT_TRUE(r >= 0 && r < n) << call.sets[0];
      ASSERT_EQ(call_of[r], nullptr) << "rank " << r << " called SetAndGet twice";
      call_of[r] = &call;
    }
    for (int r = 0; r < n; ++r) {
      ASSERT_NE(comms[r], nullptr);
      const std::vector<int> peers = BuildPeers(r, n);
      EXPECT_EQ(GlooConnectedPairs(*comms[r]), static_cast<int>(peers.size()));
      if (peers.empty()) {
        EXPECT_EQ(call_of[r], nullptr);  // alone: no rendezvous at all
        continue;
      }
      ASSERT_NE(call_of[r], nullptr) << "rank " << r;
      const RecordingStore::Call& call = *call_of[r];
      ASSERT_EQ(static_cast<int>(call.sets.size()), AddressRecordParts(r, n));
      for (int part = 0; part < AddressRecordParts(r, n); ++part) {
        const std::string key = AddressRecordKey(prefix, r, part);
        EXPECT_EQ(call.sets[part], key);
        const int pairs = std::min(kAddressRecordPairs,
                                   static_cast<int>(peers.size()) - part * kAddressRecordPairs);
        EXPECT_EQ(store.value(key).size(), AddressRecordBytes(pairs)) << key;
      }
      ASSERT_EQ(call.gets.size(), peers.size());
      for (size_t i = 0; i < peers.size(); ++i) {
        const AddressRecordSlot slot = AddressRecordSlotOf(peers[i], r, n);
        ASSERT_GE(slot.part, 0);
        EXPECT_EQ(call.gets[i], AddressRecordKey(prefix, peers[i], slot.part));
      }
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        int64_t v = r + 1;
        EXPECT_TRUE(comms[r]->Allreduce(&v, 1, DataType::kInt64, ReduceOp::kSum).ok());
        EXPECT_EQ(v, int64_t{n} * (n + 1) / 2);
      });
    }
    for (auto& t : threads) t.join();
  }
}

std::vector<char> Ipv4Address(const char* ip, uint16_t port, int64_t seq = -1) {
  sockaddr_storage ss{};
  auto& in = reinterpret_cast<sockaddr_in&>(ss);
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  EXPECT_EQ(inet_pton(AF_INET, ip, &in.sin_addr), 1);
  return gloo::transport::tcp::Address(ss, seq).bytes();
}

std::vector<char> Ipv6Address(const char* ip, uint16_t port, uint32_t scope) {
  sockaddr_storage ss{};
  auto& in6 = reinterpret_cast<sockaddr_in6&>(ss);
  in6.sin6_family = AF_INET6;
  in6.sin6_port = htons(port);
  in6.sin6_scope_id = scope;
  EXPECT_EQ(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
  return gloo::transport::tcp::Address(ss).bytes();
}

// A record part holds the host once and a port per pair; every entry decodes to the very
// address gloo gave; what the encoding cannot describe is refused, not mangled.
TEST(AddressRecordTest, RoundTripsAndRefusesWhatItCannotHold) {
  const std::vector<std::vector<char>> v4 = {Ipv4Address("198.18.0.7", 40001),
                                             Ipv4Address("198.18.0.7", 33333),
                                             Ipv4Address("198.18.0.7", 65535)};
  StatusOr<std::string> part = EncodeAddressRecord(v4);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->size(), AddressRecordBytes(3));
  for (int i = 0; i < 3; ++i) {
    StatusOr<std::vector<char>> back = DecodeAddressRecord(*part, 3, i);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, v4[i]) << i;
  }
  const std::vector<std::vector<char>> v6 = {Ipv6Address("fe80::1", 50000, 3),
                                             Ipv6Address("fe80::1", 50001, 3)};
  part = EncodeAddressRecord(v6);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->size(), AddressRecordBytes(2, /*ipv6=*/true));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(DecodeAddressRecord(*part, 2, i).value(), v6[i]);

  EXPECT_EQ(EncodeAddressRecord({}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeAddressRecord({v4[0], Ipv4Address("198.18.0.8", 40002)}).status().code(),
            StatusCode::kInvalidArgument);  // two hosts
  EXPECT_EQ(EncodeAddressRecord({v4[0], v6[0]}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeAddressRecord({Ipv4Address("198.18.0.7", 40001, /*seq=*/5)}).status().code(),
            StatusCode::kInvalidArgument);  // a shared listener's sequence number
  EXPECT_EQ(EncodeAddressRecord({std::vector<char>(39, 1)}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(AddressRecordTest, CorruptPartsAreCorruptErrors) {
  const std::string good = EncodeAddressRecord({Ipv4Address("198.18.0.7", 40001),
                                                Ipv4Address("198.18.0.7", 40002)})
                               .value();
  for (const std::string& bad :
       {std::string(), std::string(1, '\4'), good.substr(0, good.size() - 1), good + "x",
        std::string(1, '\9') + good.substr(1), std::string(1, '\6') + good.substr(1)}) {
    StatusOr<std::vector<char>> got = DecodeAddressRecord(bad, 2, 0);
    EXPECT_EQ(got.status().code(), StatusCode::kCorrupt) << got.status();
  }
  EXPECT_EQ(DecodeAddressRecord(good, 3, 0).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(DecodeAddressRecord(good, 2, 2).status().code(), StatusCode::kInvalidArgument);
}

// A peer's record part that is not one (empty, short, long, an unknown family) fails the build at
// once with an error naming the key: no crash, no wait for the timeout. Rank 1 of 2 is played
// by the test, which sets its key before rank 0 builds.
TEST(GlooMeshTest, CorruptAddressRecordFailsTheBuildClearly) {
  const std::string good = EncodeAddressRecord({Ipv4Address("127.0.0.1", 40001)}).value();
  int i = 0;
  for (const std::string& bad : {std::string(), good.substr(0, 3), good + good.substr(5),
                                 std::string(1, '\7') + good.substr(1)}) {
    SCOPED_TRACE("case " + std::to_string(i));
    InMemoryKeyValueStore store;
    const std::string prefix = "bad" + std::to_string(i++) + "/";
    ASSERT_TRUE(store.Set(AddressRecordKey(prefix, 1, 0), bad).ok());
    GlooOptions options;
    options.store = &store;
    options.prefix = prefix;
    options.rank = 0;
    options.size = 2;
    options.timeout = kT;
    options.connect_timeout = std::chrono::minutes(10);  // a wait would show as a hung test
    auto comm = CreateGlooCommunicator(options);
    ASSERT_FALSE(comm.ok());
    EXPECT_EQ(comm.status().code(), StatusCode::kPeerLost) << comm.status();
    EXPECT_NE(comm.status().message().find("'" + AddressRecordKey(prefix, 1, 0) +
                                           "' holds no gloo address"),
              std::string::npos)
        << comm.status();
  }
}

// The same for a pair connected on demand: a corrupt address for it fails the Send at once.
TEST(GlooMeshTest, CorruptAddressOfAnOnDemandPairFailsTheCall) {
  constexpr int n = 12;
  ASSERT_FALSE(IsBuildPeer(0, 6, n));
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "lazybad/", n);
  for (int r = 0; r < n; ++r) ASSERT_NE(comms[r], nullptr);
  ASSERT_TRUE(store.Set("lazybad/pair/6/0", "\4junk").ok());
  int64_t v = 1;
  Status sent = comms[0]->Send(&v, 8, 6, 1, std::chrono::minutes(10));
  EXPECT_EQ(sent.code(), StatusCode::kPeerLost) << sent;
  EXPECT_NE(sent.message().find("'lazybad/pair/6/0' holds no gloo address"), std::string::npos)
      << sent;
}

// Rank 0 and rank 6 of 12 are not build peers: a Send/Recv between them connects that one pair,
// on both ends, and nothing else.
TEST(GlooMeshTest, SendRecvBetweenNonPeersConnectsLazily) {
  constexpr int n = 12;
  ASSERT_FALSE(IsBuildPeer(0, 6, n));
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "lazy/", n);
  for (int r = 0; r < n; ++r) ASSERT_NE(comms[r], nullptr);
  std::vector<int64_t> sent(1000), got(1000, 0);
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<int64_t>(i * i);
  std::thread receiver([&] {
    EXPECT_TRUE(comms[6]->Recv(got.data(), got.size() * 8, 0, /*tag=*/7, kT).ok());
  });
  EXPECT_TRUE(comms[0]->Send(sent.data(), sent.size() * 8, 6, /*tag=*/7, kT).ok());
  receiver.join();
  EXPECT_EQ(got, sent);
  for (int r = 0; r < n; ++r) {
    const int extra = (r == 0 || r == 6) ? 1 : 0;
    EXPECT_EQ(GlooConnectedPairs(*comms[r]), static_cast<int>(BuildPeers(r, n).size()) + extra)
        << "rank " << r;
  }
  // The pair stays: the way back needs no store.
  std::thread back([&] { EXPECT_TRUE(comms[6]->Send(got.data(), 8, 0, 8, kT).ok()); });
  int64_t first = -1;
  EXPECT_TRUE(comms[0]->Recv(&first, 8, 6, 8, kT).ok());
  back.join();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(GlooConnectedPairs(*comms[0]), static_cast<int>(BuildPeers(0, n).size()) + 1);
}

// Ranks 0, 3, 6, 9 of 12 (no two of them build peers) send round a cycle both ways in one
// Exchange each: every rank connects both its non-peer pairs before posting, so no deadlock.
// Rank 0 also sends and receives with 6 on two threads at once (one connects, one waits for it).
TEST(GlooMeshTest, ExchangeRoundACycleOfNonPeers) {
  constexpr int n = 12;
  const std::vector<int> cycle = {0, 3, 6, 9};
  for (size_t i = 0; i < cycle.size(); ++i) {
    ASSERT_FALSE(IsBuildPeer(cycle[i], cycle[(i + 1) % 4], n));
  }
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "cycle/", n);
  for (int r = 0; r < n; ++r) ASSERT_NE(comms[r], nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cycle.size(); ++i) {
    threads.emplace_back([&, i] {
      const int me = cycle[i];
      const int next = cycle[(i + 1) % 4];
      const int prev = cycle[(i + 3) % 4];
      std::vector<int32_t> out(300, me), from_prev(300, -1), from_next(300, -1);
      std::vector<PointToPoint> ops = {
          {true, out.data(), out.size() * 4, next},
          {true, out.data(), out.size() * 4, prev},
          {false, from_prev.data(), from_prev.size() * 4, prev},
          {false, from_next.data(), from_next.size() * 4, next},
      };
      EXPECT_TRUE(comms[me]->Exchange(ops, /*tag=*/3, kT).ok());
      EXPECT_EQ(from_prev, std::vector<int32_t>(300, prev));
      EXPECT_EQ(from_next, std::vector<int32_t>(300, next));
      EXPECT_EQ(GlooConnectedPairs(*comms[me]), static_cast<int>(BuildPeers(me, n).size()) + 2);
    });
  }
  for (auto& t : threads) t.join();
  // Two threads of rank 0 use the pair to 6 (connected above) and of rank 1 the pair to 7 (not).
  ASSERT_FALSE(IsBuildPeer(1, 7, n));
  threads.clear();
  for (int a : {1, 7}) {
    const int b = a == 1 ? 7 : 1;
    for (bool send_first : {true, false}) {
      threads.emplace_back([&, a, b, send_first] {
        int64_t v = a * 100 + send_first;
        if ((a == 1) == send_first) {
          EXPECT_TRUE(comms[a]->Send(&v, 8, b, 11, kT).ok());
        } else {
          int64_t w = -1;
          EXPECT_TRUE(comms[a]->Recv(&w, 8, b, 11, kT).ok());
          EXPECT_EQ(w, b * 100 + (b == 1));  // rank 1 sends 101, rank 7 sends 700
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(GlooConnectedPairs(*comms[1]), static_cast<int>(BuildPeers(1, n).size()) + 1);
}

// Recursive doubling: the same bits on every rank, for sizes that are not powers of two too;
// exact inputs give the reference sum; a NaN under max gives the same bits everywhere.
TEST(GlooMeshTest, RecursiveDoublingAllreduceSameBitsEverywhere) {
  for (int n : {2, 3, 4, 5, 6, 7, 12, 16}) {
    SCOPED_TRACE("n " + std::to_string(n));
    InMemoryKeyValueStore store;
    constexpr size_t kCount = 257;
    std::vector<std::vector<float>> noisy(n), exact(n), nan_max(n);
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < kCount; ++i) {
        noisy[r].push_back(dist(rng) * std::pow(10.0f, static_cast<float>(i % 7)));
        exact[r].push_back(static_cast<float>((r * 31 + i * 7) % 101));
        nan_max[r].push_back(static_cast<float>(r));
      }
    }
    nan_max[n / 2][5] = std::numeric_limits<float>::quiet_NaN();
    Spawn(&store, "rd" + std::to_string(n) + "/", n, [&](Communicator& c) {
      const int r = c.rank();
      ASSERT_TRUE(c.Allreduce(noisy[r].data(), kCount, DataType::kFloat32, ReduceOp::kSum).ok());
      ASSERT_TRUE(c.Allreduce(exact[r].data(), kCount, DataType::kFloat32, ReduceOp::kSum).ok());
      ASSERT_TRUE(c.Allreduce(nan_max[r].data(), kCount, DataType::kFloat32, ReduceOp::kMax).ok());
    });
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(std::memcmp(noisy[r].data(), noisy[0].data(), kCount * 4), 0) << "rank " << r;
      EXPECT_EQ(std::memcmp(nan_max[r].data(), nan_max[0].data(), kCount * 4), 0) << "rank " << r;
    }
    for (size_t i = 0; i < kCount; ++i) {
      int64_t sum = 0;
      for (int r = 0; r < n; ++r) sum += (r * 31 + i * 7) % 101;
      for (int r = 0; r < n; ++r) ASSERT_EQ(exact[r][i], static_cast<float>(sum)) << i;
    }
  }
}

// Abort() while a Send waits for a peer that never comes to connect the pair returns kAborted
// (not a hang until the timeout), and a call to an absent peer returns kTimedOut at its deadline.
TEST(GlooMeshTest, AbortDuringLazyConnectReturnsAborted) {
  constexpr int n = 12;
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "abort/", n, milliseconds(600000));
  for (int r = 0; r < n; ++r) ASSERT_NE(comms[r], nullptr);
  Status sent;
  int64_t v = 1;
  std::thread sender([&] { sent = comms[0]->Send(&v, 8, 6, 1, milliseconds(600000)); });
  // Rank 0 published its address for the pair: it now waits for rank 6's, which never comes.
  ASSERT_TRUE(store.Get("abort/pair/0/6", milliseconds(60000)).ok());
  comms[0]->Abort();
  sender.join();
  EXPECT_EQ(sent.code(), StatusCode::kAborted) << sent;
  EXPECT_EQ(comms[0]->Send(&v, 8, 6, 1, kT).code(), StatusCode::kAborted);

  Status timed = comms[1]->Send(&v, 8, 7, 1, milliseconds(300));
  EXPECT_EQ(timed.code(), StatusCode::kTimedOut) << timed;
}

}  // namespace
}  // namespace elastra
