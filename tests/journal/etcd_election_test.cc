// Leadership of a job on etcd and the fencing of the leader's journal writes (docs/ha.md,
// "Election" and "Fencing"), against a real single-member etcd each test starts on its own ports
// (tests/journal/etcd_server.h), with short election timeouts so that a 1 s lease is granted as
// 1 s: two campaigners, one leads and the other waits until the first resigns or its lease lapses
// (its renewals paused, as a stopped or cut-off process); the deposed leader is told, is no longer
// leading by the time the other leads, and its fenced writes are refused and change nothing.
#include "journal/etcd_election.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "journal/etcd_storage.h"
#include "tests/journal/etcd_server.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

class EtcdElectionTest : public JournalTest {
 protected:
  void SetUp() override {
    JournalTest::SetUp();
    // etcd grants at least 1.5 election timeouts: 150 ms here, so a 1 s lease stays 1 s.
    const std::string why =
        server_.Start(dir_, {"--heartbeat-interval", "10", "--election-timeout", "100"});
    ASSERT_EQ(why, "") << "a single-member etcd is needed for this test";
  }
  void TearDown() override {
    server_.Stop();
    JournalTest::TearDown();
  }

  EtcdOptions Etcd() const {
    EtcdOptions o;
    o.endpoints = server_.url();
    return o;
  }
  std::unique_ptr<EtcdElection> Campaigner(const std::string& address,
                                           std::function<void(const std::string&)> on_lost = {}) {
    ElectionOptions o;
    o.etcd = Etcd();
    o.job = "job";
    o.address = address;
    o.ttl = std::chrono::milliseconds(1000);
    o.poll_interval = std::chrono::milliseconds(50);
    o.on_lost = std::move(on_lost);
    auto e = EtcdElection::Create(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(e).value() : nullptr;
  }
  std::unique_ptr<EtcdJournalStorage> Storage() {
    auto s = EtcdJournalStorage::Create(Etcd(), "job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::vector<std::string> ReadAll(JournalStorage& s) {
    std::vector<std::string> out;
    auto r = s.Read(
        0,
        [&out](std::string_view payload, uint64_t) {
          out.emplace_back(payload);
          return true;
        },
        nullptr);
    EXPECT_TRUE(r.ok()) << r.status();
    return out;
  }
  int64_t Count(const std::string& prefix) {
    auto c = EtcdClient::Create(Etcd());
    auto r = (*c)->Range(prefix, EtcdClient::PrefixEnd(prefix), 0, false, /*keys_only=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? static_cast<int64_t>(r->kvs.size()) : -1;
  }

  EtcdServer server_;
};

TEST_F(EtcdElectionTest, OneLeadsTheOtherWaitsAndLeadsAfterTheFirstResigns) {
  auto a = Campaigner("tcp://10.0.0.1:7000");
  auto b = Campaigner("tcp://10.0.0.2:7000");
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->Leader().status().code(), StatusCode::kNotFound) << "no one leads yet";

  const StatusOr<EtcdFence> won = a->Campaign();
  ASSERT_TRUE(won.ok()) << won.status();
  EXPECT_EQ(won->key, "/elastra/job/leader");
  EXPECT_TRUE(a->Leading());
  const StatusOr<EtcdLeader> leader = b->Leader();
  ASSERT_TRUE(leader.ok()) << leader.status();
  EXPECT_EQ(leader->address, "tcp://10.0.0.1:7000");
  EXPECT_EQ(leader->create_revision, won->create_revision);
  const StatusOr<EtcdFence> again = a->Campaign();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->create_revision, won->create_revision) << "leading already: the same fence";

  std::future<StatusOr<EtcdFence>> b_won =
      std::async(std::launch::async, [&b] { return b->Campaign(); });
  // A leads on: its fenced writes go through while b campaigns.
  auto journal = Storage();
  journal->SetFence(*won);
  ASSERT_TRUE(journal->Clear().ok());
  ASSERT_TRUE(journal->Append("by a").ok());
  EXPECT_NE(b_won.wait_for(std::chrono::seconds(0)), std::future_status::ready)
      << "b leads while a does";

  ASSERT_TRUE(a->Resign().ok());
  EXPECT_FALSE(a->Leading());
  const StatusOr<EtcdFence> b_fence = b_won.get();
  ASSERT_TRUE(b_fence.ok()) << b_fence.status();
  EXPECT_GT(b_fence->create_revision, won->create_revision);
  EXPECT_TRUE(b->Leading());
  EXPECT_EQ(a->Leader()->address, "tcp://10.0.0.2:7000");
  EXPECT_TRUE(a->Resign().ok()) << "nothing to give up";

  // A campaign cancelled while another leads returns kAborted, and so does every later one.
  std::future<StatusOr<EtcdFence>> a_again =
      std::async(std::launch::async, [&a] { return a->Campaign(); });
  a->Cancel();
  EXPECT_EQ(a_again.get().status().code(), StatusCode::kAborted);
  EXPECT_EQ(a->Campaign().status().code(), StatusCode::kAborted);
  EXPECT_EQ(a->Leader()->address, "tcp://10.0.0.2:7000");
}

TEST_F(EtcdElectionTest, ALeaderWhoseLeaseLapsesIsDeposedAndItsWritesAreRefused) {
  std::promise<std::string> lost;
  auto a = Campaigner("tcp://10.0.0.1:7000", [&lost](const std::string& why) {
    lost.set_value(why);
  });
  auto b = Campaigner("tcp://10.0.0.2:7000");
  ASSERT_TRUE(a && b);
  const StatusOr<EtcdFence> a_fence = a->Campaign();
  ASSERT_TRUE(a_fence.ok()) << a_fence.status();
  auto a_journal = Storage();
  a_journal->SetFence(*a_fence);
  ASSERT_TRUE(a_journal->Clear().ok());
  ASSERT_TRUE(a_journal->Append("one").ok());
  ASSERT_TRUE(a_journal->Append(std::string(1500 * 1024, 'a')).ok());  // in two pieces

  std::future<StatusOr<EtcdFence>> b_won =
      std::async(std::launch::async, [&b] { return b->Campaign(); });
  a->PauseRenewalForTest(true);  // as a process stopped, or cut off from etcd
  const StatusOr<EtcdFence> b_fence = b_won.get();
  ASSERT_TRUE(b_fence.ok()) << b_fence.status();
  EXPECT_NE(b_fence->create_revision, a_fence->create_revision);
  // The rule: a's deadline counts from its last renewal's send, before etcd's expiry, so by the
  // time b leads a no longer believes it leads.
  EXPECT_FALSE(a->Leading()) << "two leaders at once";
  const std::string why = lost.get_future().get();
  EXPECT_NE(why.find("TTL"), std::string::npos) << why;
  EXPECT_EQ(b->Leader()->address, "tcp://10.0.0.2:7000");

  // a, deposed, still holds its storage open with its old fence: every write is refused, and
  // nothing changes (not even a piece of a long record).
  const std::vector<std::string> before = ReadAll(*Storage());
  ASSERT_EQ(before.size(), 2u);
  const int64_t keys = Count("/elastra/job/");
  for (const Status& refused :
       {a_journal->Append("stale"), a_journal->Append(std::string(2500 * 1024, 's')),
        a_journal->Compact(2, "snapshot"), a_journal->CutAfter(1, /*keep_copy=*/true),
        a_journal->Clear()}) {
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition) << refused;
    EXPECT_NE(refused.message().find("not the leader"), std::string::npos) << refused;
  }
  EXPECT_EQ(ReadAll(*Storage()), before);
  EXPECT_EQ(Count("/elastra/job/"), keys) << "a refused write left a key behind";

  // b, the leader, takes the journal on where a left it.
  auto b_journal = Storage();
  b_journal->SetFence(*b_fence);
  ASSERT_TRUE(b_journal->CutAfter(2, /*keep_copy=*/false).ok());
  ASSERT_TRUE(b_journal->Append("by b").ok());
  EXPECT_EQ(ReadAll(*Storage()).back(), "by b");
  // a campaigns again and waits as a standby: it leads once b resigns.
  a->PauseRenewalForTest(false);
  std::future<StatusOr<EtcdFence>> a_won =
      std::async(std::launch::async, [&a] { return a->Campaign(); });
  ASSERT_TRUE(b->Resign().ok());
  const StatusOr<EtcdFence> a_again = a_won.get();
  ASSERT_TRUE(a_again.ok()) << a_again.status();
  EXPECT_EQ(b_journal->Append("by b, resigned").code(), StatusCode::kFailedPrecondition);
}

TEST_F(EtcdElectionTest, ALeaderWhoseKeyIsDeletedIsToldItLost) {
  std::promise<std::string> lost;
  auto a = Campaigner("tcp://10.0.0.1:7000", [&lost](const std::string& why) {
    lost.set_value(why);
  });
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Campaign().ok());
  auto c = EtcdClient::Create(Etcd());
  ASSERT_TRUE((*c)->DeleteRange(EtcdElection::LeaderKey("job"), "").ok());
  const std::string why = lost.get_future().get();
  EXPECT_NE(why.find("no longer"), std::string::npos) << why;
  EXPECT_FALSE(a->Leading());
}

TEST(EtcdElectionOptionsTest, BadOptionsAreRefused) {
  ElectionOptions o;
  o.etcd.endpoints = "http://127.0.0.1:1";
  o.job = "a/b";
  o.address = "x";
  EXPECT_EQ(EtcdElection::Create(o).status().code(), StatusCode::kInvalidArgument);
  o.job = "job";
  o.address = "";
  EXPECT_EQ(EtcdElection::Create(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace elastra::journal
