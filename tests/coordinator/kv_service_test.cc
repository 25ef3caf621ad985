// The key-value service on its own, stepped with a FakeClock: replies, parked gets and waits that
// complete when their keys appear or time out at their deadline, and old generations' keys
// dropped on commit.
#include "coordinator/kv_service.h"

#include <gtest/gtest.h>

#include "protocol/codec.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class KvServiceTest : public ::testing::Test {
 protected:
  template <class P>
  std::vector<proto::Envelope> Request(const std::string& who, T type, const P& payload,
                                       uint64_t rid) {
    proto::Envelope e;
    e.type = type;
    e.sender = who;
    e.request_id = rid;
    e.payload = proto::EncodePayload(payload);
    kv_.Handle("id-" + who, e);
    return Sent();
  }
  std::vector<proto::Envelope> Sent() {
    std::vector<proto::Envelope> out;
    for (const auto& o : outbox_.Take()) {
      auto e = proto::DecodeEnvelope(o.frame);
      EXPECT_TRUE(e.ok()) << e.status();
      if (e.ok()) out.push_back(*e);
    }
    return out;
  }
  static proto::KvReply Reply(const proto::Envelope& e) {
    EXPECT_EQ(e.type, T::kKvReply);
    auto r = proto::DecodePayload<proto::KvReply>(e.payload);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : proto::KvReply{};
  }
  static StatusCode ErrorCode(const proto::Envelope& e) {
    EXPECT_EQ(e.type, T::kError);
    auto r = proto::DecodePayload<proto::ErrorReply>(e.payload);
    return r.ok() ? static_cast<StatusCode>(r->code) : StatusCode::kOk;
  }

  FakeClock clock_;
  Membership membership_;
  Outbox outbox_{"job", &membership_, [] { return uint64_t{7}; }};
  KvService kv_{&clock_, &outbox_};
};

TEST_F(KvServiceTest, ParkedGetCompletesWhenTheKeyIsSet) {
  EXPECT_TRUE(Request("a", T::kKvGet, proto::KvGetRequest{"g1/x", 1000}, 1).empty());
  auto sent = Request("b", T::kKvSet, proto::KvSetRequest{"g1/x", "42"}, 2);
  ASSERT_EQ(sent.size(), 2u);  // b's ack, then a's value
  EXPECT_EQ(sent[0].request_id, 2u);
  EXPECT_EQ(sent[1].request_id, 1u);
  EXPECT_EQ(Reply(sent[1]).value, "42");
  EXPECT_EQ(sent[1].generation, 7u) << "replies carry the committed generation";
  auto now = Request("a", T::kKvGet, proto::KvGetRequest{"g1/x", 0}, 3);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(Reply(now[0]).value, "42");
}

TEST_F(KvServiceTest, WaitsTimeOutAtTheirDeadlineOnly) {
  auto at_once = Request("a", T::kKvGet, proto::KvGetRequest{"missing", 0}, 1);
  ASSERT_EQ(at_once.size(), 1u);
  EXPECT_EQ(ErrorCode(at_once[0]), StatusCode::kTimedOut);
  EXPECT_TRUE(Request("a", T::kKvWait, proto::KvWaitRequest{{"k1", "k2"}, 500}, 2).empty());
  Request("b", T::kKvSet, proto::KvSetRequest{"k1", "v"}, 3);
  clock_.Advance(Duration(499));
  kv_.Tick();
  EXPECT_TRUE(Sent().empty()) << "answered before its deadline";
  clock_.Advance(Duration(1));
  kv_.Tick();
  auto expired = Sent();
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].request_id, 2u);
  EXPECT_EQ(ErrorCode(expired[0]), StatusCode::kTimedOut);
}

// Two ranks' rendezvous, one request each: the first sets its key and parks for the second's;
// the second's sets complete the first, and its own get is answered at once.
TEST_F(KvServiceTest, SetAndGetIsARendezvousInOneRequestEach) {
  auto values = [](const proto::Envelope& e) {
    EXPECT_EQ(e.type, T::kKvValues);
    auto r = proto::DecodePayload<proto::KvValuesReply>(e.payload);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->values : std::vector<std::string>{};
  };
  EXPECT_TRUE(Request("a", T::kKvSetAndGet,
                      proto::KvSetAndGetRequest{{"g1/p/0/1"}, {"a0"}, {"g1/p/1/0"}, 1000}, 1)
                  .empty());
  auto sent = Request("b", T::kKvSetAndGet,
                      proto::KvSetAndGetRequest{{"g1/p/1/0", "g1/p/1/2"}, {"b0", "b2"},
                                                {"g1/p/0/1"}, 1000},
                      2);
  ASSERT_EQ(sent.size(), 2u);  // b's answer, then a's, completed by b's sets
  EXPECT_EQ(sent[0].request_id, 2u);
  EXPECT_EQ(values(sent[0]), std::vector<std::string>{"a0"});
  EXPECT_EQ(sent[1].request_id, 1u);
  EXPECT_EQ(values(sent[1]), std::vector<std::string>{"b0"});
  // Several gets, answered in their order; a mismatched request is refused.
  auto both = Request("c", T::kKvSetAndGet,
                      proto::KvSetAndGetRequest{{}, {}, {"g1/p/1/2", "g1/p/0/1"}, 0}, 3);
  ASSERT_EQ(both.size(), 1u);
  EXPECT_EQ(values(both[0]), (std::vector<std::string>{"b2", "a0"}));
  auto bad = Request("c", T::kKvSetAndGet, proto::KvSetAndGetRequest{{"k"}, {}, {}, 0}, 4);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(ErrorCode(bad[0]), StatusCode::kInvalidArgument);
  EXPECT_FALSE(kv_.store().Contains("k"));
}

TEST_F(KvServiceTest, AddCountsAndRefusesANonNumber) {
  EXPECT_EQ(Reply(Request("a", T::kKvAdd, proto::KvAddRequest{"n", 2}, 1)[0]).number, 2);
  EXPECT_EQ(Reply(Request("a", T::kKvAdd, proto::KvAddRequest{"n", 3}, 2)[0]).number, 5);
  Request("a", T::kKvSet, proto::KvSetRequest{"s", "text"}, 3);
  EXPECT_EQ(ErrorCode(Request("a", T::kKvAdd, proto::KvAddRequest{"s", 1}, 4)[0]),
            StatusCode::kInvalidArgument);
  // A payload that does not decode is answered and counted.
  proto::Envelope bad;
  bad.type = T::kKvSet;
  bad.request_id = 5;
  bad.payload = "\x01";
  kv_.Handle("id-a", bad);
  auto sent = Sent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(ErrorCode(sent[0]), StatusCode::kCorrupt);
  EXPECT_EQ(outbox_.malformed_frames(), 1u);
}

TEST_F(KvServiceTest, ACommitDropsKeysOfGenerationsBeforeThePreviousOne) {
  for (const std::string k : {"g1/x", "g2/x", "g3/x", "other"}) {
    Request("a", T::kKvSet, proto::KvSetRequest{k, "v"}, 1);
  }
  kv_.OnCommitted(1);
  EXPECT_EQ(kv_.store().size(), 4u);
  kv_.OnCommitted(3);
  EXPECT_FALSE(kv_.store().Contains("g1/x"));
  EXPECT_TRUE(kv_.store().Contains("g2/x"));
  EXPECT_TRUE(kv_.store().Contains("g3/x"));
  EXPECT_TRUE(kv_.store().Contains("other"));
}

}  // namespace
}  // namespace elastra::coordinator
