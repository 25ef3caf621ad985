// RecordServer, FetchRecords and PeerRecordStore (collectives/record_server.h,
// peer_record_store.h): a worker's own rendezvous records served to its build peers, and a Gloo
// world built over them with none of its address records in the store under them. No test
// sleeps before acting: a test that needs a request to be waiting first waits for the server to
// say so (RecordServer::waiting()).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/peer_record_store.h"
#include "collectives/record_server.h"
#include "common/mesh_peers.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<RecordServer> StartServer() {
  auto s = RecordServer::Start("127.0.0.1");
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Until `server` holds `n` requests waiting (or a generous limit, which only a broken server
// reaches).
bool WaitForWaiting(const RecordServer& server, int n) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.waiting() < n) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(RecordServer, AnswersWhatIsThereAndWaitsForWhatIsNot) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  server->Put("g1/world/a/0/0", "zero");
  auto got = FetchRecords({server->endpoint()}, {"g1/world/a/0/0"}, milliseconds(5000), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0], "zero");
  // Asked before it exists: the answer comes when it is put.
  StatusOr<std::vector<std::string>> later = UnavailableError("not yet");
  std::thread reader([&] {
    later = FetchRecords({server->endpoint(), server->endpoint()},
                         {"g1/world/a/3/1", "g1/world/a/0/0"}, milliseconds(20000), {});
  });
  ASSERT_TRUE(WaitForWaiting(*server, 1));
  server->Put("g1/world/a/3/1", std::string("\x04\x7f\0\0\x01\x12\x34", 7));
  reader.join();
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ((*later)[0], std::string("\x04\x7f\0\0\x01\x12\x34", 7));
  EXPECT_EQ((*later)[1], "zero");
}

TEST(RecordServer, AKeyThatNeverComesTimesOutNamingIt) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto got = FetchRecords({server->endpoint()}, {"g2/world/a/9/0"}, milliseconds(200), {});
  EXPECT_EQ(got.status().code(), StatusCode::kTimedOut) << got.status();
  EXPECT_NE(got.status().message().find("g2/world/a/9/0"), std::string::npos) << got.status();
}

TEST(RecordServer, AServerThatIsNotThereIsPeerLost) {
  // A port nobody listens on: a socket bound and closed.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  auto got = FetchRecords({PackEndpoint(a.sin_addr.s_addr, a.sin_port)}, {"g1/world/a/1/0"},
                          milliseconds(5000), {});
  EXPECT_EQ(got.status().code(), StatusCode::kPeerLost) << got.status();
}

TEST(RecordServer, CancelledFetchReturnsAborted) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::atomic<bool> cancel{false};
  Status s;
  std::thread reader([&] {
    s = FetchRecords({server->endpoint()}, {"g1/x/a/1/0"}, milliseconds(20000),
                     [&] { return cancel.load(); })
            .status();
  });
  ASSERT_TRUE(WaitForWaiting(*server, 1));
  cancel = true;
  reader.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
}

// A caller that is no client of ours (garbage, a scanner) is dropped; the server goes on.
TEST(RecordServer, GarbageIsDroppedAndTheServerGoesOn) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  std::memcpy(&a.sin_addr, server->endpoint().data(), 4);
  std::memcpy(&a.sin_port, server->endpoint().data() + 4, 2);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  const char junk[] = "GET / HTTP/1.0\r\n\r\n";
  ASSERT_GT(::send(fd, junk, sizeof(junk), 0), 0);
  timeval limit{10, 0};  // a server that kept it open makes recv time out (EAGAIN) instead
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char c;
  const ssize_t n = ::recv(fd, &c, 1, 0);
  // Closed (FIN), or reset (the junk past the request header was never read).
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET))
      << "the server kept a connection that is not a request: " << n << " " << std::strerror(errno);
  ::close(fd);
  server->Put("g1/k", "v");
  auto got = FetchRecords({server->endpoint()}, {"g1/k"}, milliseconds(5000), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)[0], "v");
}

TEST(RecordServer, RefusesAnAddressPeersCannotUse) {
  EXPECT_EQ(RecordServer::Start("0.0.0.0").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordServer::Start("localhost").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(RecordServer::Start("::1").status().code(), StatusCode::kInvalidArgument);
}

TEST(RecordServer, KeysOfOldGenerationsGo) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  server->Put("g5/world/a/0/0", "five");
  server->Put("g6/world/a/0/0", "six");
  server->Put("other", "kept");
  server->Put("g7/world/a/0/0", "seven");
  EXPECT_FALSE(server->Get("g5/world/a/0/0", nullptr));
  EXPECT_TRUE(server->Get("g6/world/a/0/0", nullptr)) << "the generation before may still be read";
  EXPECT_TRUE(server->Get("g7/world/a/0/0", nullptr));
  EXPECT_TRUE(server->Get("other", nullptr));
}

TEST(AddressRecordOwner, ReadsTheRankOfItsPrefixsRecordsOnly) {
  EXPECT_EQ(AddressRecordOwner("g3/world/", AddressRecordKey("g3/world/", 12345, 6)), 12345);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/a/0/0"), 0);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/pair/1/2"), -1);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/dp/a/1/0"), -1);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/a/1"), -1);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/a/x/0"), -1);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/a/1/0x"), -1);
  EXPECT_EQ(AddressRecordOwner("g3/world/", "g3/world/a/99999999999/0"), -1);
}

// The store under the peers' stores, recording every key set or read through it.
class RecordingStore : public InMemoryKeyValueStore {
 public:
  StatusOr<std::vector<std::string>> SetAndGet(
      const std::vector<std::pair<std::string, std::string>>& sets,
      const std::vector<std::string>& gets, milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [k, v] : sets) keys_.insert(k);
      for (const auto& k : gets) keys_.insert(k);
    }
    return InMemoryKeyValueStore::SetAndGet(sets, gets, timeout);
  }
  std::set<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  std::mutex mu_;
  std::set<std::string> keys_;
};

// A Gloo world of n ranks (threads) built over PeerRecordStores, each rank with a RecordServer
// of its own and its build peers' endpoints, as a worker gets them with its generation: it
// connects, its collectives agree, and not one of its address records went through the store
// under them; a Send to a rank that is no build peer connects on demand through that store.
TEST(PeerRecordStore, AGlooWorldBuildsOverItsRanksOwnServers) {
  for (int n : {2, 5, 13}) {
    SCOPED_TRACE("n " + std::to_string(n));
    RecordingStore store;
    std::vector<std::unique_ptr<RecordServer>> servers(n);
    for (auto& s : servers) {
      s = StartServer();
      ASSERT_NE(s, nullptr);
    }
    const std::string prefix = "g4/world/";
    std::vector<std::unique_ptr<PeerRecordStore>> stores(n);
    for (int r = 0; r < n; ++r) {
      std::map<int, std::string> endpoints;
      for (int p : BuildPeers(r, n)) endpoints[p] = servers[p]->endpoint();
      stores[r] = std::make_unique<PeerRecordStore>(&store, servers[r].get(), prefix, r,
                                                    std::move(endpoints));
    }
    std::vector<std::unique_ptr<Communicator>> comms(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        GlooOptions o;
        o.store = stores[r].get();
        o.prefix = prefix;
        o.rank = r;
        o.size = n;
        auto c = CreateGlooCommunicator(o);
        ASSERT_TRUE(c.ok()) << "rank " << r << ": " << c.status();
        comms[r] = std::move(c).value();
        int64_t v[1] = {r};
        ASSERT_TRUE(comms[r]->Allreduce(v, 1, DataType::kInt64, ReduceOp::kSum).ok());
        EXPECT_EQ(v[0], static_cast<int64_t>(n) * (n - 1) / 2);
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& key : store.keys()) {
      EXPECT_EQ(AddressRecordOwner(prefix, key), -1) << key << " went through the store";
    }
    if (n >= 13) {
      // 0 and 6 are no build peers of each other at 13 (6 is not 0 +- 2^k mod 13).
      ASSERT_EQ(AddressRecordSlotOf(0, 6, n).part, -1);
      std::thread sender([&] { EXPECT_TRUE(comms[6]->Send("hi", 2, 0, 1, milliseconds(10000)).ok()); });
      char got[2] = {};
      EXPECT_TRUE(comms[0]->Recv(got, 2, 6, 1, milliseconds(10000)).ok());
      sender.join();
      EXPECT_EQ(std::string(got, 2), "hi");
      bool paired = false;
      for (const auto& key : store.keys()) paired |= key.find("pair/") != std::string::npos;
      EXPECT_TRUE(paired) << "the pair made on demand went through the store under it";
    }
  }
}

TEST(PeerRecordStore, AnotherRanksRecordCannotBeSetHere) {
  InMemoryKeyValueStore store;
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  PeerRecordStore peers(&store, server.get(), "g1/world/", 0, {{1, server->endpoint()}});
  EXPECT_EQ(peers.Set("g1/world/a/1/0", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(peers.Set("g1/world/a/0/0", "mine").ok());
  EXPECT_TRUE(server->Get("g1/world/a/0/0", nullptr));
  EXPECT_TRUE(peers.Set("g1/world/nccl_id", "id").ok());
  auto id = store.Get("g1/world/nccl_id", milliseconds(100));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, "id");
}

}  // namespace
}  // namespace elastra
