// ExchangeV() of the Gloo backend (collectives/gloo/stream_mesh.h): byte streams gathered from and
// scattered into segments over the communicator's own sockets. Ranks are threads over the
// in-memory store; what a lost process does to its peers is in gloo_failure_test.
// No test sleeps before acting: a test that breaks a blocked call first waits until the call is
// in progress (testing::WaitUntilBlocked).
#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_mesh.h"
#include "common/mesh_peers.h"
#include "gloo_test_util.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;
using testing::ConnectAll;
using testing::WaitUntilBlocked;

constexpr milliseconds kLong{20000};

// The byte at position i of the stream from `src` to `dst` in round `round`.
uint8_t Pattern(int src, int dst, int round, size_t i) {
  return static_cast<uint8_t>(i * 131 + src * 31 + dst * 7 + round * 3 + (i >> 9));
}

// `bytes` bytes of `memory` cut into segments of 1 to 5,000 bytes, with a gap of 0 to 3 bytes
// before each (left as they are, so a receive that writes outside its segments shows); `memory`
// is sized here to hold them.
std::vector<IoSegment> CutWithGaps(std::vector<uint8_t>* memory, size_t bytes, std::mt19937* rng) {
  memory->assign(bytes + bytes / 2 + 16, 0xee);
  std::vector<IoSegment> segments;
  size_t at = 0;
  for (size_t done = 0; done < bytes;) {
    at += (*rng)() % 4;
    const size_t n = std::min<size_t>(bytes - done, 1 + (*rng)() % 5000);
    if (at + n > memory->size()) memory->resize(at + n + 16, 0xee);
    segments.push_back({memory->data() + at, n});
    at += n;
    done += n;
  }
  return segments;
}

size_t StreamBytes(int src, int dst, int round) {
  return 1000 + (7919u * static_cast<size_t>(src * 5 + dst + 11 * round)) % 60000;
}

// Every rank sends a stream to every other, cut differently on the two sides (and with gaps
// between the receive's segments), over three calls with their own tags: every byte lands where
// the receiver's segments say, nothing between them is touched, and the connections of the
// first call serve the next ones.
TEST(GlooExchangeV, ByteStreamsMatchHoweverEachSideCutsThem) {
  constexpr int kSize = 4;
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "xv/", kSize);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::vector<std::thread> threads;
    for (int me = 0; me < kSize; ++me) {
      threads.emplace_back([&, me] {
        std::mt19937 rng(1000 * round + me);
        std::vector<std::vector<uint8_t>> out(kSize), in(kSize);
        std::vector<VectoredTransfer> ops;
        for (int peer = 0; peer < kSize; ++peer) {
          if (peer == me) continue;
          const size_t send_bytes = StreamBytes(me, peer, round);
          std::vector<IoSegment> send = CutWithGaps(&out[peer], send_bytes, &rng);
          size_t i = 0;
          for (const IoSegment& s : send) {
            for (size_t k = 0; k < s.bytes; ++k) {
              static_cast<uint8_t*>(s.data)[k] = Pattern(me, peer, round, i++);
            }
          }
          ops.push_back({true, peer, std::move(send)});
          ops.push_back({false, peer, CutWithGaps(&in[peer], StreamBytes(peer, me, round), &rng)});
        }
        const Status s = comms[me]->ExchangeV(ops, 40 + round, kLong);
        ASSERT_TRUE(s.ok()) << "rank " << me << ": " << s;
        for (const VectoredTransfer& op : ops) {
          if (op.send) continue;
          size_t i = 0;
          std::vector<char> inside(in[op.peer].size(), 0);
          for (const IoSegment& seg : op.segments) {
            const auto* p = static_cast<const uint8_t*>(seg.data);
            for (size_t k = 0; k < seg.bytes; ++k, ++i) {
              ASSERT_EQ(p[k], Pattern(op.peer, me, round, i))
                  << "rank " << me << " from " << op.peer << " byte " << i;
              inside[p + k - in[op.peer].data()] = 1;
            }
          }
          for (size_t b = 0; b < inside.size(); ++b) {
            if (!inside[b]) ASSERT_EQ(in[op.peer][b], 0xee) << "rank " << me << " wrote at " << b;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int me = 0; me < kSize; ++me) {
      // The build pairs (every other rank at 4) plus a stream socket to each peer.
      EXPECT_EQ(GlooConnectedPairs(*comms[me]),
                static_cast<int>(BuildPeers(me, kSize).size()) + kSize - 1);
    }
  }
}

// A rank connects to the peers it exchanges with and to no one else; a rank with nothing to
// exchange opens and publishes nothing.
TEST(GlooExchangeV, ConnectsOnlyThePeersItExchangesWith) {
  constexpr int kSize = 6;
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "only/", kSize);
  for (const auto& c : comms) ASSERT_NE(c, nullptr);
  const int partner[kSize] = {5, -1, 3, 2, -1, 0};
  std::vector<std::thread> threads;
  for (int me = 0; me < kSize; ++me) {
    threads.emplace_back([&, me] {
      std::vector<uint8_t> out(4096, static_cast<uint8_t>(me)), in(4096, 0);
      std::vector<VectoredTransfer> ops;
      if (partner[me] >= 0) {
        ops.push_back({true, partner[me], {{out.data(), out.size()}}});
        ops.push_back({false, partner[me], {{in.data(), in.size()}}});
      }
      const Status s = comms[me]->ExchangeV(ops, 1, kLong);
      ASSERT_TRUE(s.ok()) << "rank " << me << ": " << s;
      if (partner[me] >= 0) {
        EXPECT_EQ(in, std::vector<uint8_t>(4096, static_cast<uint8_t>(partner[me])));
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int me = 0; me < kSize; ++me) {
    const int streams =
        GlooConnectedPairs(*comms[me]) - static_cast<int>(BuildPeers(me, kSize).size());
    EXPECT_EQ(streams, partner[me] >= 0 ? 1 : 0) << "rank " << me;
    const auto key = store.Get("only/s/" + std::to_string(me), milliseconds(1));
    EXPECT_EQ(key.ok(), partner[me] >= 0) << "rank " << me;
  }
}

// The two sides planned different exchanges (another size, another tag): the receiver fails with
// kInternal, says so, and writes nothing of the payload into its memory; the communicator is
// broken after it.
TEST(GlooExchangeV, AMismatchedExchangeFailsBeforeTheReceiverMemoryIsTouched) {
  for (const bool wrong_tag : {false, true}) {
    InMemoryKeyValueStore store;
    auto comms = ConnectAll(&store, wrong_tag ? "tag/" : "size/", 2);
    ASSERT_TRUE(comms[0] && comms[1]);
    std::vector<uint8_t> out(100, 0x11), in(wrong_tag ? 100 : 120, 0xee);
    std::thread sender([&] {
      // Its bytes fit the socket: it returns once they are written, whatever the peer makes of
      // them.
      (void)comms[0]->ExchangeV({{true, 1, {{out.data(), out.size()}}}}, 5, kLong);
    });
    const Status s =
        comms[1]->ExchangeV({{false, 0, {{in.data(), in.size()}}}}, wrong_tag ? 6 : 5, kLong);
    sender.join();
    EXPECT_EQ(s.code(), StatusCode::kInternal) << s;
    EXPECT_NE(s.message().find("planned different exchanges"), std::string::npos) << s;
    EXPECT_EQ(in, std::vector<uint8_t>(in.size(), 0xee));
    EXPECT_EQ(comms[1]->Barrier(kLong).code(), StatusCode::kInternal);
  }
}

TEST(GlooExchangeV, AbortWakesABlockedExchangeV) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "abortv/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  std::vector<uint8_t> in(1 << 20);
  Status s;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    s = comms[1]->ExchangeV({{false, 0, {{in.data(), in.size()}}}}, 1, kLong);
  });
  ASSERT_TRUE(WaitUntilBlocked(*comms[1]));
  comms[1]->Abort();
  waiter.join();
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, kLong / 2);
  EXPECT_EQ(comms[1]->ExchangeV({{false, 0, {{in.data(), 8}}}}, 2, kLong).code(),
            StatusCode::kAborted);
}

// A peer that never takes part: the lower rank waits for it to connect, the higher for its
// address; both time out at their deadline, saying which.
TEST(GlooExchangeV, APeerThatNeverComesTimesOut) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "never/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  std::vector<uint8_t> buf(64);
  const Status low =
      comms[0]->ExchangeV({{true, 1, {{buf.data(), buf.size()}}}}, 1, milliseconds(300));
  EXPECT_EQ(low.code(), StatusCode::kTimedOut) << low;
  EXPECT_NE(low.message().find("waiting for the peer to connect"), std::string::npos) << low;
  const Status high =
      comms[2]->ExchangeV({{false, 1, {{buf.data(), buf.size()}}}}, 1, milliseconds(300));
  EXPECT_EQ(high.code(), StatusCode::kTimedOut) << high;
  EXPECT_NE(high.message().find("did not publish its address"), std::string::npos) << high;
}

// A peer whose communicator goes (as a dying process's would) while this rank waits for its
// bytes: kPeerLost at once, not at the deadline.
TEST(GlooExchangeV, APeerThatGoesIsPeerLost) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "gone/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  std::vector<uint8_t> a(8, 1), b(8, 2);
  std::thread first([&] {
    EXPECT_TRUE(comms[1]->ExchangeV({{true, 0, {{b.data(), b.size()}}}}, 1, kLong).ok());
  });
  ASSERT_TRUE(comms[0]->ExchangeV({{false, 1, {{a.data(), a.size()}}}}, 1, kLong).ok());
  first.join();
  std::vector<uint8_t> in(1 << 20);
  Status s;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    s = comms[0]->ExchangeV({{false, 1, {{in.data(), in.size()}}}}, 2, kLong);
  });
  ASSERT_TRUE(WaitUntilBlocked(*comms[0]));
  comms[1].reset();
  waiter.join();
  EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
  EXPECT_LT(std::chrono::steady_clock::now() - start, kLong / 2);
}

// A caller on the listening socket that is no peer (another job's, a port scanner) is refused,
// and the exchange with the real peer goes on.
TEST(GlooExchangeV, AStrangerOnTheListeningSocketIsRefused) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "stranger/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  std::vector<uint8_t> x(16, 3), y(16, 0);
  std::thread one([&] {
    EXPECT_TRUE(comms[1]->ExchangeV({{true, 0, {{x.data(), x.size()}}}}, 1, kLong).ok());
  });
  ASSERT_TRUE(comms[0]->ExchangeV({{false, 1, {{y.data(), y.size()}}}}, 1, kLong).ok());
  one.join();
  // Rank 0's listening address, from its record.
  auto record = store.Get("stranger/s/0", milliseconds(1000));
  ASSERT_TRUE(record.ok()) << record.status();
  // Its TCP part (a Unix socket's name follows it).
  auto address = DecodeAddressRecord(record->substr(0, AddressRecordBytes(1)), 1, 0);
  ASSERT_TRUE(address.ok()) << address.status();
  const sockaddr_storage ss = gloo::transport::tcp::Address(*address).getSockaddr();
  const int fd = ::socket(ss.ss_family, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::connect(fd, reinterpret_cast<const sockaddr*>(&ss), sizeof(sockaddr_in)), 0);
  const char junk[16] = "not a peer here";
  ASSERT_EQ(::send(fd, junk, sizeof(junk), 0), static_cast<ssize_t>(sizeof(junk)));
  std::vector<uint8_t> z(4096, 9), w(4096, 0);
  std::thread two([&] {
    EXPECT_TRUE(comms[2]->ExchangeV({{true, 0, {{z.data(), z.size()}}}}, 2, kLong).ok());
  });
  const Status s = comms[0]->ExchangeV({{false, 2, {{w.data(), w.size()}}}}, 2, kLong);
  two.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(w, z);
  char c = 0;
  EXPECT_EQ(::recv(fd, &c, 1, 0), 0) << "the stranger's connection was not closed";
  ::close(fd);
}

// Two ranks on one host exchange through a Unix socket (GlooOptions::local_streams), or over TCP
// without it; the bytes are the same either way.
TEST(GlooExchangeV, RanksOnOneHostUseAUnixSocketUnlessToldNot) {
  for (const bool local : {true, false}) {
    InMemoryKeyValueStore store;
    std::vector<std::unique_ptr<Communicator>> comms(2);
    std::vector<std::thread> connecting;
    for (int r = 0; r < 2; ++r) {
      connecting.emplace_back([&, r] {
        GlooOptions o;
        o.store = &store;
        o.prefix = local ? "unix/" : "tcp/";
        o.rank = r;
        o.size = 2;
        o.local_streams = local;
        auto c = CreateGlooCommunicator(o);
        ASSERT_TRUE(c.ok()) << c.status();
        comms[r] = std::move(c).value();
      });
    }
    for (auto& t : connecting) t.join();
    ASSERT_TRUE(comms[0] && comms[1]);
    std::vector<uint8_t> out(3 << 20), in(3 << 20);
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
    std::thread sender([&] {
      EXPECT_TRUE(comms[1]->ExchangeV({{true, 0, {{out.data(), out.size()}}}}, 1, kLong).ok());
    });
    ASSERT_TRUE(comms[0]->ExchangeV({{false, 1, {{in.data(), in.size()}}}}, 1, kLong).ok());
    sender.join();
    EXPECT_EQ(in, out);
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(GlooLocalStreams(*comms[r]), local ? 1 : 0) << "rank " << r;
    }
  }
}

// A peer whose Unix socket this rank cannot reach (another network namespace with the same
// address; here a name that no socket has) is reached over TCP instead.
TEST(GlooExchangeV, AnUnreachableUnixSocketFallsBackToTcp) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "fallback/", 3);
  ASSERT_TRUE(comms[0] && comms[1] && comms[2]);
  std::vector<uint8_t> a(64, 1), b(64, 0);
  std::thread one([&] {
    EXPECT_TRUE(comms[1]->ExchangeV({{true, 0, {{a.data(), a.size()}}}}, 1, kLong).ok());
  });
  ASSERT_TRUE(comms[0]->ExchangeV({{false, 1, {{b.data(), b.size()}}}}, 1, kLong).ok());
  one.join();
  EXPECT_EQ(GlooLocalStreams(*comms[0]), 1);
  // Rank 0's record names a Unix socket that is not there.
  auto record = store.Get("fallback/s/0", milliseconds(1000));
  ASSERT_TRUE(record.ok());
  const std::string tcp = record->substr(0, AddressRecordBytes(1));
  ASSERT_TRUE(store.Set("fallback/s/0", tcp + "uelastra-stream/none/0").ok());
  std::vector<uint8_t> c(4096, 5), d(4096, 0);
  std::thread two([&] {
    EXPECT_TRUE(comms[2]->ExchangeV({{true, 0, {{c.data(), c.size()}}}}, 2, kLong).ok());
  });
  const Status s = comms[0]->ExchangeV({{false, 2, {{d.data(), d.size()}}}}, 2, kLong);
  two.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(d, c);
  EXPECT_EQ(GlooLocalStreams(*comms[2]), 0);
  EXPECT_EQ(GlooLocalStreams(*comms[0]), 1);  // rank 1's, not rank 2's
}

// A peer's address key that holds no address fails the call clearly, naming the key.
TEST(GlooExchangeV, ACorruptAddressFailsTheCall) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "corrupt/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  ASSERT_TRUE(store.Set("corrupt/s/0", "xx").ok());
  std::vector<uint8_t> buf(8);
  const Status s = comms[1]->ExchangeV({{true, 0, {{buf.data(), buf.size()}}}}, 1, kLong);
  EXPECT_EQ(s.code(), StatusCode::kPeerLost) << s;
  EXPECT_NE(s.message().find("corrupt/s/0"), std::string::npos) << s;
}

// Bad arguments are refused before anything moves and do not break the communicator.
TEST(GlooExchangeV, BadArgumentsAreRefused) {
  InMemoryKeyValueStore store;
  auto comms = ConnectAll(&store, "args/", 2);
  ASSERT_TRUE(comms[0] && comms[1]);
  EXPECT_TRUE(comms[0]->has_vectored_exchange());
  std::vector<uint8_t> buf(8);
  EXPECT_EQ(comms[0]->ExchangeV({{true, 0, {{buf.data(), 8}}}}, 1, kLong).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->ExchangeV({{true, 2, {{buf.data(), 8}}}}, 1, kLong).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->ExchangeV({{true, 1, {{nullptr, 8}}}}, 1, kLong).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(comms[0]->ExchangeV({{true, 1, {{buf.data(), 8}}}}, 1, milliseconds(0)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(comms[0]->ExchangeV({}, 1, kLong).ok());  // nothing to do
  std::thread t([&] { EXPECT_TRUE(comms[1]->Barrier(kLong).ok()); });
  EXPECT_TRUE(comms[0]->Barrier(kLong).ok());
  t.join();
}

}  // namespace
}  // namespace elastra
