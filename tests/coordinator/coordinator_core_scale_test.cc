// The coordinator core with many workers (docs/scale.md): the bookkeeping of a join, a pause and a
// recovery goes through indexes, and the heartbeat period grows with the job. What is checked is
// behaviour at sizes where a scan per message would show; timings are bench_scale's.
#include <arpa/inet.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/mesh_peers.h"
#include "protocol/status_json.h"
#include "tests/coordinator/core_test_fixture.h"

namespace elastra::coordinator::testing {
namespace {

class CoordinatorScaleTest : public CoreTest {
 protected:
  static std::vector<std::string> Ids(int n, int from = 0) {
    std::vector<std::string> ids;
    for (int i = from; i < from + n; ++i) ids.push_back("w" + std::to_string(i));
    return ids;
  }
};

// Workers that serve their rendezvous records (JoinRequest::rendezvous): each member's
// NewGeneration lists its world build peers' endpoints, in BuildPeers order, so that the world's
// address records never reach the coordinator; one member without an endpoint puts every member
// back on the store (all or none, or a reader would look where the owner did not publish).
TEST_F(CoordinatorScaleTest, EachMemberGetsItsBuildPeersEndpointsOrNoneDoes) {
  for (const bool one_without : {false, true}) {
    SCOPED_TRACE(one_without ? "one member serves no records" : "every member serves");
    constexpr int kN = 37;
    Make(kN, kN);
    const auto ids = Ids(kN);
    auto endpoint = [](int i) {
      return PackEndpoint(htonl(0x7f000001u + static_cast<uint32_t>(i)),
                          htons(static_cast<uint16_t>(20000 + i)));
    };
    std::vector<Sent> last;
    for (int i = 0; i < kN; ++i) {
      proto::JoinRequest join{ids[i], "host-" + ids[i], 0, 100};
      if (!(one_without && i == 17)) join.rendezvous = endpoint(i);
      last = Worker(ids[i], T::kJoin, join, ++rid_);
    }
    auto gens = OfType(last, T::kNewGeneration);
    ASSERT_EQ(gens.size(), static_cast<size_t>(kN));
    for (const auto& s : gens) {
      const auto ng = Payload<proto::NewGeneration>(s);
      const std::string id = s.identity.substr(3);  // "id-<worker>"
      const int rank = static_cast<int>(std::find(ids.begin(), ids.end(), id) - ids.begin());
      ASSERT_LT(rank, kN);
      if (one_without) {
        EXPECT_TRUE(ng.build_peers.empty()) << id;
        continue;
      }
      std::string want;
      for (int p : BuildPeers(rank, kN)) want += endpoint(p);
      EXPECT_EQ(ng.build_peers, want) << id;
    }
  }
}

// 1,000 joins (the NewGeneration broadcast, O(N^2) bytes today, bounds the size here): each answered with its JoinReply alone; the last one forms the first generation
// with ranks in join order.
TEST_F(CoordinatorScaleTest, AJoinStormFormsTheFirstGenerationInJoinOrder) {
  constexpr int kN = 1000;
  Make(kN, kN);
  const auto ids = Ids(kN);
  for (int i = 0; i + 1 < kN; ++i) {
    auto sent = Join(ids[i]);
    ASSERT_EQ(sent.size(), 1u);
    ASSERT_EQ(sent[0].envelope.type, T::kJoinReply);
  }
  EXPECT_EQ(core_->membership().StandbyCount(), static_cast<size_t>(kN - 1));
  auto last = Join(ids.back());
  EXPECT_EQ(OfType(last, T::kJoinReply).size(), 1u);
  EXPECT_EQ(OfType(last, T::kNewGeneration).size(), static_cast<size_t>(kN));  // one per member
  EXPECT_EQ(core_->membership().Members(), ids);
  EXPECT_EQ(core_->membership().StandbyCount(), 0u);
}

// A planned shrink and a failure with 600 members: who pauses, who leaves and who is awaited is
// decided by the indexes (Reconfiguration counts the answers).
TEST_F(CoordinatorScaleTest, APauseAndARecoveryWithManyMembers) {
  constexpr int kN = 600;
  const auto ids = Ids(kN);
  Make(kN, kN);
  for (const auto& id : ids) Join(id);
  for (const auto& id : ids) Ready(id, 1);
  ASSERT_EQ(core_->generation(), 1u);
  // Shrink by 8: the 8 highest ranks leave.
  auto accepted = Admin(T::kResize, proto::ResizeRequest{kN - 8, false, {}, true});
  ASSERT_FALSE(OfType(accepted, T::kResizeReply).empty());
  EXPECT_EQ(OfType(accepted, T::kPauseRequest).size(), static_cast<size_t>(kN));
  std::vector<Sent> built;
  for (int i = 0; i < kN; ++i) {
    auto sent = PausedMsg(ids[i], 2, 10, {10}, false);
    if (i + 1 < kN) {
      ASSERT_TRUE(OfType(sent, T::kNewGeneration).empty()) << "after " << i + 1 << " answers";
    } else {
      built = sent;
    }
  }
  ASSERT_EQ(OfType(built, T::kNewGeneration).size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(core_->membership().Find(ids[i])->state,
              i < kN - 8 ? WorkerState::kMember : WorkerState::kLeaving);
  }
  for (int i = 0; i < kN - 8; ++i) Ready(ids[i], 2);
  ASSERT_EQ(core_->generation(), 2u);
  EXPECT_EQ(core_->membership().MemberCount(), static_cast<size_t>(kN - 8));
  // Three members die: the survivors are asked to recover; the generation forms without them.
  for (const auto& id : {ids[5], ids[100], ids[400]}) {
    Admin(T::kProcessExited, proto::ProcessExited{id, 9, 9});
  }
  EXPECT_EQ(core_->state(), proto::JobState::kRecovering);
  std::vector<std::string> survivors;
  for (int i = 0; i < kN - 8; ++i) {
    if (i != 5 && i != 100 && i != 400) survivors.push_back(ids[i]);
  }
  for (const auto& id : survivors) PausedMsg(id, 3, 11, {10}, false);
  EXPECT_EQ(core_->state(), proto::JobState::kBuilding);
  for (const auto& id : survivors) Ready(id, 3);
  EXPECT_EQ(core_->generation(), 3u);
  EXPECT_EQ(core_->membership().Members().size(), survivors.size());
}

// PrefetchAhead (what CoordinatorServer calls before each message with the next ones it read)
// changes nothing: a scripted job (joins, heartbeats, a shrink, a recovery, messages from unknown
// or unnamed senders) handled by a core that is given the next messages first answers frame for
// frame as one that handles each message alone, and ends in the same status.
TEST_F(CoordinatorScaleTest, PrefetchingTheNextMessagesChangesNothing) {
  constexpr int kN = 200;
  const auto ids = Ids(kN);
  struct Step {
    proto::Role role;
    proto::Envelope envelope;
  };
  std::vector<Step> script;
  uint64_t rid = 0;
  auto add = [&](const std::string& sender, T type, std::string payload,
                 proto::Role role = proto::Role::kWorker) {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = sender;
    e.request_id = ++rid;
    e.payload = std::move(payload);
    script.push_back({role, std::move(e)});
  };
  using proto::EncodePayload;
  for (const auto& id : ids) {
    add(id, T::kJoin, EncodePayload(proto::JoinRequest{id, "host-" + id, 0, 100}));
  }
  for (const auto& id : ids) add(id, T::kGenerationReady, EncodePayload(proto::GenerationReady{1, 1, 2, 0}));
  for (int i = 0; i < kN; ++i) {
    add(ids[(i * 7) % kN], T::kHeartbeat, EncodePayload(proto::Heartbeat{i}));
  }
  add("ghost", T::kHeartbeat, EncodePayload(proto::Heartbeat{3}));
  add("", T::kStatusRequest, EncodePayload(proto::StatusRequest{}));
  add("admin", T::kResize, EncodePayload(proto::ResizeRequest{kN - 8, false, {}, true}),
      proto::Role::kAdmin);
  for (int i = 0; i < kN; ++i) {
    add(ids[(i * 13) % kN], T::kPaused, EncodePayload(proto::PausedReport{2, 10, {10}, false}));
  }
  add("ghost", T::kPaused, EncodePayload(proto::PausedReport{2, 10, {10}, false}));
  for (int i = 0; i < kN - 8; ++i) {
    add(ids[i], T::kGenerationReady, EncodePayload(proto::GenerationReady{2, 1, 2, 0}));
  }
  for (const int dead : {5, 100, 150}) {
    add("admin", T::kProcessExited, EncodePayload(proto::ProcessExited{ids[dead], 9, 9}),
        proto::Role::kAdmin);
  }
  for (int i = kN - 9; i >= 0; --i) {
    if (i == 5 || i == 100 || i == 150) continue;
    add(ids[i], T::kPaused, EncodePayload(proto::PausedReport{3, 11, {10}, false}));
  }
  for (int i = 0; i < kN - 8; ++i) {
    add(ids[i], T::kGenerationReady, EncodePayload(proto::GenerationReady{3, 1, 2, 0}));
    add(ids[(i * 11) % kN], T::kHeartbeat, EncodePayload(proto::Heartbeat{20}));
  }

  auto run = [&](bool prefetch) {
    FakeClock clock;
    CoordinatorOptions o = options_;
    o.job = "job";
    o.initial_workers = kN;
    o.max_workers = kN;
    o.heartbeat_interval = Duration(200);
    o.heartbeat_timeout = Duration(1500);
    o.clock = &clock;
    CoordinatorCore core(o);
    std::vector<std::vector<Outgoing>> answers;
    for (size_t i = 0; i < script.size(); ++i) {
      if (prefetch) {
        const proto::Envelope* next[CoordinatorCore::kLookAhead] = {};
        size_t ahead = 0;
        for (; ahead < CoordinatorCore::kLookAhead && i + 1 + ahead < script.size(); ++ahead) {
          // A frame that did not decode is passed as nullptr.
          next[ahead] = (i + ahead) % 17 == 0 ? nullptr : &script[i + 1 + ahead].envelope;
        }
        core.PrefetchAhead(std::span<const proto::Envelope* const>(next, ahead));
      }
      answers.push_back(core.Handle("id-" + script[i].envelope.sender, script[i].role,
                                    script[i].envelope));
    }
    EXPECT_EQ(core.generation(), 3u);
    EXPECT_EQ(core.state(), proto::JobState::kRunning);
    return std::make_pair(answers, proto::StatusJson(core.Snapshot()));
  };
  const auto [alone, alone_status] = run(false);
  const auto [ahead, ahead_status] = run(true);
  ASSERT_EQ(alone.size(), ahead.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_EQ(alone[i].size(), ahead[i].size()) << "message " << i;
    for (size_t k = 0; k < alone[i].size(); ++k) {
      EXPECT_EQ(alone[i][k].identity, ahead[i][k].identity) << "message " << i;
      EXPECT_EQ(alone[i][k].frame, ahead[i][k].frame) << "message " << i;
    }
  }
  EXPECT_EQ(alone_status, ahead_status);
}

// The heartbeat period grows with the most workers the job may have, and the timeout with it
// (CoordinatorOptions::max_heartbeats_per_second): a silent worker is lost after the longer
// timeout, not the configured one.
TEST_F(CoordinatorScaleTest, TheHeartbeatPeriodGrowsWithTheJob) {
  CoordinatorOptions small;
  small.max_workers = 64;
  EXPECT_EQ(ScaledHeartbeats(small).heartbeat_interval, small.heartbeat_interval);
  CoordinatorOptions large;
  large.initial_workers = 16384;
  large.max_workers = 1;
  large.heartbeat_interval = Duration(200);
  large.heartbeat_timeout = Duration(1500);
  const CoordinatorOptions scaled = ScaledHeartbeats(large);
  EXPECT_EQ(scaled.heartbeat_interval, Duration(410));  // 16384 / 40000 s, up to 10 ms
  EXPECT_EQ(scaled.heartbeat_timeout, Duration(3075));  // x 2.05
  EXPECT_EQ(scaled.recover_timeout, Duration(0));       // 0 stays "the heartbeat timeout"
  large.max_heartbeats_per_second = 0;
  EXPECT_EQ(ScaledHeartbeats(large).heartbeat_interval, Duration(200));

  Make(2, 16384);
  auto reply = Payload<proto::JoinReply>(OfType(Join("a"), T::kJoinReply).at(0));
  EXPECT_EQ(reply.heartbeat_interval_ms, 410);
  EXPECT_EQ(reply.heartbeat_timeout_ms, 3075);
  Join("b");
  for (const auto& id : {"a", "b"}) Ready(id, 1);
  ASSERT_EQ(core_->generation(), 1u);
  clock_.Advance(Duration(3000));
  Beat({"a"});
  EXPECT_TRUE(OfType(Tick(), T::kRecoverRequest).empty());  // past 1.5 s, within 3.075 s
  clock_.Advance(Duration(100));
  auto sent = Tick();
  EXPECT_EQ(OfType(sent, T::kRecoverRequest).size(), 1u);  // b is lost; a recovers
  EXPECT_EQ(core_->membership().Find("b")->state, WorkerState::kLost);
}

}  // namespace
}  // namespace elastra::coordinator::testing
