// The requests the coordinator's core answers beside the change protocol, driven message by
// message with a FakeClock: the key-value store, bad input, the status, and a stale message under
// a member's name. The change protocol itself: coordinator_core_test.cc.
#include "coordinator/coordinator_core.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "protocol/status_json.h"
#include "tests/coordinator/core_test_fixture.h"

namespace elastra::coordinator {
namespace {

using testing::CoreTest;
using T = proto::MessageType;

TEST_F(CoreTest, KeyValueStore) {
  Make(1);
  auto set = Worker("a", T::kKvSet, proto::KvSetRequest{"g1/x", "1"}, 1);
  EXPECT_EQ(set[0].envelope.type, T::kKvReply);
  auto get = Worker("a", T::kKvGet, proto::KvGetRequest{"g1/x", 0}, 2);
  EXPECT_EQ(Payload<proto::KvReply>(get[0]).value, "1");
  // A blocking get completes when the key is set by someone else.
  EXPECT_TRUE(Worker("a", T::kKvGet, proto::KvGetRequest{"g1/y", 1000}, 3).empty());
  EXPECT_TRUE(
      Worker("b", T::kKvWait, proto::KvWaitRequest{{"g1/x", "g1/y", "z"}, 1000}, 4).empty());
  auto out = Admin(T::kKvSet, proto::KvSetRequest{"g1/y", "2"}, 5);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].identity, "id-admin");
  EXPECT_EQ(out[1].identity, "id-a");
  EXPECT_EQ(out[1].envelope.request_id, 3u);
  EXPECT_EQ(Payload<proto::KvReply>(out[1]).value, "2");
  auto add = Worker("a", T::kKvAdd, proto::KvAddRequest{"z", 3}, 6);
  ASSERT_EQ(add.size(), 2u);  // the reply and the completed wait
  EXPECT_EQ(Payload<proto::KvReply>(add[0]).number, 3);
  EXPECT_EQ(add[1].identity, "id-b");
  EXPECT_EQ(add[1].envelope.request_id, 4u);
  // Timeouts.
  auto now = Worker("a", T::kKvGet, proto::KvGetRequest{"nope", 0}, 7);
  EXPECT_EQ(ErrorOf(now[0]).code(), StatusCode::kTimedOut);
  EXPECT_TRUE(Worker("a", T::kKvGet, proto::KvGetRequest{"nope", 50}, 8).empty());
  clock_.Advance(Duration(49));
  EXPECT_TRUE(Tick().empty());
  clock_.Advance(Duration(1));
  auto late = Tick();
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(ErrorOf(late[0]).code(), StatusCode::kTimedOut);
  EXPECT_EQ(late[0].envelope.request_id, 8u);
  EXPECT_EQ(
      Payload<proto::KvReply>(Worker("a", T::kKvAdd, proto::KvAddRequest{"g1/x", 1}, 9)[0]).number,
      2);
  Worker("a", T::kKvSet, proto::KvSetRequest{"word", "abc"}, 10);
  EXPECT_EQ(ErrorOf(Worker("a", T::kKvAdd, proto::KvAddRequest{"word", 1}, 11)[0]).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(CoreTest, OldGenerationKeysAreDroppedOnCommit) {
  Start({"a", "b", "c"});
  Worker("a", T::kKvSet, proto::KvSetRequest{"g1/r0", "addr"}, 1);
  Worker("a", T::kKvSet, proto::KvSetRequest{"keep", "v"}, 2);
  // Generation 2: g1 is current-1 and stays.
  Admin(T::kResize, proto::ResizeRequest{2, false, {}, false}, 3);
  for (auto id : {"a", "b", "c"}) PausedMsg(id, 2, 1, {1}, false);
  Ready("a", 2);
  Ready("b", 2);
  EXPECT_EQ(core_->generation(), 2u);
  EXPECT_EQ(
      Payload<proto::KvReply>(Worker("a", T::kKvGet, proto::KvGetRequest{"g1/r0", 0}, 4)[0]).value,
      "addr");
  // Generation 3: g1 goes.
  Admin(T::kResize, proto::ResizeRequest{1, false, {}, false}, 5);
  PausedMsg("a", 3, 2, {2}, false);
  PausedMsg("b", 3, 2, {2}, false);
  Ready("a", 3);
  EXPECT_EQ(core_->generation(), 3u);
  EXPECT_EQ(ErrorOf(Worker("a", T::kKvGet, proto::KvGetRequest{"g1/r0", 0}, 6)[0]).code(),
            StatusCode::kTimedOut);
  EXPECT_EQ(
      Payload<proto::KvReply>(Worker("a", T::kKvGet, proto::KvGetRequest{"keep", 0}, 7)[0]).value,
      "v");
}

TEST_F(CoreTest, BadInputIsAnsweredAndCounted) {
  Make(1);
  auto bad = core_->HandleMalformed("x", CorruptError("truncated"));
  ASSERT_EQ(bad.size(), 1u);
  auto e = DecodeAll(bad);
  EXPECT_EQ(e[0].envelope.request_id, 0u);
  EXPECT_EQ(ErrorOf(e[0]).code(), StatusCode::kCorrupt);
  EXPECT_EQ(core_->malformed_frames(), 1u);

  proto::Envelope env;
  env.type = T::kJoin;
  env.job = "job";
  env.sender = "a";
  env.request_id = 3;
  env.payload = "\x01\x02";
  auto r = DecodeAll(core_->Handle("x", proto::Role::kWorker, env));
  EXPECT_EQ(ErrorOf(r[0]).code(), StatusCode::kCorrupt);
  EXPECT_EQ(r[0].envelope.request_id, 3u);
  EXPECT_EQ(core_->malformed_frames(), 2u);

  env.type = T::kJoinReply;  // a coordinator-to-worker message sent to the coordinator
  EXPECT_EQ(ErrorOf(DecodeAll(core_->Handle("x", proto::Role::kWorker, env))[0]).code(),
            StatusCode::kInvalidArgument);
  env.type = T::kStatusRequest;
  env.payload = "";
  env.job = "other";
  EXPECT_EQ(ErrorOf(DecodeAll(core_->Handle("x", proto::Role::kWorker, env))[0]).code(),
            StatusCode::kInvalidArgument);
  env.job = "job";
  // Fire-and-forget messages from unknown senders change nothing.
  Worker("ghost", T::kPaused, proto::PausedReport{5, 1, {}, false});
  Worker("ghost", T::kHeartbeat, proto::Heartbeat{3});
  EXPECT_EQ(core_->stale_messages(), 1u);
  EXPECT_EQ(core_->state(), proto::JobState::kForming);
}

TEST_F(CoreTest, StatusJsonHasTheDocumentedFields) {
  Start({"a", "b"});
  Beat({"a"}, 12);
  Beat({"b"}, 11);
  clock_.Advance(Duration(30));
  auto reply = Worker("a", T::kStatusRequest, proto::StatusRequest{}, 9);
  ASSERT_EQ(reply[0].envelope.type, T::kStatusReply);
  auto s = nlohmann::json::parse(proto::StatusJson(Payload<proto::StatusReply>(reply[0]).status));
  EXPECT_EQ(s["job"], "job");
  EXPECT_EQ(s["state"], "running");
  EXPECT_EQ(s["generation"], 1);
  EXPECT_EQ(s["layout"]["dp"], 2);
  EXPECT_EQ(s["layout"]["pp"], 1);
  EXPECT_EQ(s["layout"]["tp"], 1);
  EXPECT_EQ(s["step"], 12);
  ASSERT_EQ(s["workers"].size(), 2u);
  auto w = s["workers"][1];
  EXPECT_EQ(w["id"], "b");
  EXPECT_EQ(w["host"], "host-b");
  EXPECT_EQ(w["pid"], 100);
  EXPECT_EQ(w["state"], "member");
  EXPECT_EQ(w["rank"], 1);
  EXPECT_EQ(w["step"], 11);
  EXPECT_EQ(w["last_heartbeat_ms_ago"], 30);
  ASSERT_EQ(s["history"].size(), 1u);
  for (auto key : {"generation", "reason", "workers", "layout", "downtime_ms", "agreement_ms",
                   "rebuild_ms", "transfer_ms"}) {
    EXPECT_TRUE(s["history"][0].contains(key)) << key;
  }
  EXPECT_EQ(s["counters"]["malformed_frames"], 0);
  EXPECT_EQ(s["counters"]["stale_messages"], 0);
  // No checkpoint to disk yet: none committed, none failed.
  EXPECT_EQ(s["checkpoints"]["committed_step"], -1);
  EXPECT_EQ(s["checkpoints"]["committed_dir"], "");
  EXPECT_EQ(s["checkpoints"]["last_error_step"], -1);
  EXPECT_EQ(s["checkpoints"]["last_error"], "");
}

// A message under a member's name that names an older generation (replayed by another client, or
// sent by the member's own process woken after its eviction) is stale: it is not acted on, and the
// member's pushes still go where its current messages come from.
TEST_F(CoreTest, AStaleMessageUnderAMembersNameTakesNoPushFromIt) {
  Start({"a", "b"});
  auto acc = Admin(T::kResize, proto::ResizeRequest{2, true, Layout{1, 1, 2}, false}, 4);
  ASSERT_EQ(OfType(acc, T::kPauseRequest).size(), 2u);
  PausedMsg("a", 2, 3, {3}, false);
  ASSERT_EQ(OfType(PausedMsg("b", 2, 3, {3}, false), T::kNewGeneration).size(), 2u);
  Ready("a", 2);
  Ready("b", 2);
  ASSERT_EQ(core_->generation(), 2u);
  // The replay: generation 1's failure report, pause and ready, from another socket as "b".
  auto replay = [&](T type, const std::string& payload) {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = "b";
    e.generation = 1;
    e.payload = payload;
    return DecodeAll(core_->Handle("id-intruder", proto::Role::kWorker, e));
  };
  replay(T::kFailureReport, proto::EncodePayload(proto::FailureReport{1, 5, "replayed"}));
  replay(T::kPaused, proto::EncodePayload(proto::PausedReport{1, 3, {3}, true}));
  replay(T::kGenerationReady, proto::EncodePayload(proto::GenerationReady{1, 1, 1, 0}));
  EXPECT_EQ(core_->stale_messages(), 3u);
  EXPECT_EQ(core_->generation(), 2u);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  // The next change reaches b itself.
  auto next = Admin(T::kResize, proto::ResizeRequest{2, true, Layout{2, 1, 1}, false}, 5);
  auto pauses = OfType(next, T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 2u);
  for (const auto& p : pauses) EXPECT_NE(p.identity, "id-intruder");
}

}  // namespace
}  // namespace elastra::coordinator
