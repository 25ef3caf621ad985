// The coordinator's state machine with hosts: agents registering with the worker key, heartbeats
// and their acks, a host lost as one recovery round and the regrow after it, the status's hosts and
// target, and the job's end telling standby workers. Driven message by message with a FakeClock.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "protocol/status_json.h"
#include "coordinator/coordinator_core.h"
#include "tests/coordinator/core_test_fixture.h"

namespace elastra::coordinator {
namespace {

using testing::CoreTest;
using testing::Sent;
using T = proto::MessageType;

TEST_F(CoreTest, TheWorkerKeyRegistersAnAgentReportsItsOwnExitsAndDrainsOnlyItsOwnHost) {
  Make(2);
  ASSERT_EQ(RegisterAgent("h0", 2)[0].envelope.type, T::kAck);
  ASSERT_EQ(RegisterAgent("h1", 2)[0].envelope.type, T::kAck);
  JoinOn("a", "h0");
  JoinOn("b", "h1");
  Ready("a", 1);
  Ready("b", 1);
  ASSERT_EQ(core_->generation(), 1u);
  // An exit report from a sender that registered no host, or about another host's worker.
  auto stranger =
      From("w9", proto::Role::kWorker, T::kProcessExited, proto::ProcessExited{"a", 0, 9}, 7);
  ASSERT_EQ(stranger.size(), 1u);
  EXPECT_EQ(ErrorOf(stranger[0]).code(), StatusCode::kUnauthenticated);
  EXPECT_NE(ErrorOf(stranger[0]).message().find("registered no host"), std::string::npos);
  auto other =
      From("agent-h1", proto::Role::kWorker, T::kProcessExited, proto::ProcessExited{"a", 0, 9}, 8);
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(ErrorOf(other[0]).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(ErrorOf(other[0]).message(),
            "worker a runs on host h0; the agent of host h1 reports only its own workers");
  EXPECT_EQ(core_->membership().Find("a")->state, WorkerState::kMember);
  // Draining another host, or resizing, needs the admin key.
  auto drain_other =
      From("agent-h1", proto::Role::kWorker, T::kDrain, proto::DrainRequest{"h0", false}, 9);
  EXPECT_EQ(ErrorOf(drain_other[0]).code(), StatusCode::kUnauthenticated);
  EXPECT_NE(ErrorOf(drain_other[0]).message().find("needs an admin key"), std::string::npos);
  auto resize = From("agent-h1", proto::Role::kWorker, T::kResize,
                     proto::ResizeRequest{1, false, {}, false}, 10);
  EXPECT_EQ(ErrorOf(resize[0]).code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(core_->state(), proto::JobState::kRunning);
  // Its own host: the drain is accepted; its own worker's exit is a loss.
  auto drain_own =
      From("agent-h1", proto::Role::kWorker, T::kDrain, proto::DrainRequest{"h1", false}, 11);
  auto replies = OfType(drain_own, T::kResizeReply);
  ASSERT_EQ(replies.size(), 1u);
  EXPECT_EQ(Payload<proto::ResizeReply>(replies[0]).phase, proto::ResizePhase::kAccepted);
  EXPECT_EQ(Spawns(drain_own)["id-agent-h0"].size(), 1u) << "its replacement, on h0";
  auto own = From("agent-h0", proto::Role::kWorker, T::kProcessExited,
                  proto::ProcessExited{"a", 0, 9}, 12);
  EXPECT_EQ(core_->membership().Find("a")->state, WorkerState::kLost);
}

TEST_F(CoreTest, EveryHeartbeatIsAcknowledgedALostWorkersIsAnsweredWithShutdown) {
  Start({"a", "b"});
  RegisterAgent("h0", 4);
  auto ack = Worker("a", T::kHeartbeat, proto::Heartbeat{3});
  ASSERT_EQ(ack.size(), 1u);
  EXPECT_EQ(ack[0].identity, "id-a");
  EXPECT_EQ(ack[0].envelope.type, T::kHeartbeatAck);
  EXPECT_EQ(ack[0].envelope.generation, 1u);
  EXPECT_EQ(Payload<proto::HeartbeatAck>(ack[0]).generation, 1u);
  auto agent = AgentBeat("h0");
  ASSERT_EQ(agent.size(), 1u);
  EXPECT_EQ(agent[0].identity, "id-agent-h0");
  EXPECT_EQ(agent[0].envelope.type, T::kHeartbeatAck);
  EXPECT_TRUE(Worker("nobody", T::kHeartbeat, proto::Heartbeat{3}).empty());
  // b is declared lost; when it speaks again it is told to stop, at most once per timeout.
  Admin(T::kProcessExited, proto::ProcessExited{"b", 0, 9}, 0);
  auto told = Worker("b", T::kHeartbeat, proto::Heartbeat{3});
  EXPECT_TRUE(told.empty()) << "it was sent Shutdown when it was declared lost";
  clock_.Advance(Duration(1500));
  told = Worker("b", T::kHeartbeat, proto::Heartbeat{3});
  ASSERT_EQ(told.size(), 1u);
  EXPECT_EQ(told[0].envelope.type, T::kShutdown);
  EXPECT_EQ(Payload<proto::Shutdown>(told[0]).exit_code, 1);
  EXPECT_TRUE(Worker("b", T::kHeartbeat, proto::Heartbeat{3}).empty());
  // The ack follows the committed generation.
  PausedMsg("a", 2, 3, {3}, true);
  Ready("a", 2);
  ASSERT_EQ(core_->generation(), 2u);
  EXPECT_EQ(
      Payload<proto::HeartbeatAck>(Worker("a", T::kHeartbeat, proto::Heartbeat{4})[0]).generation,
      2u);
}

// Three hosts of two workers each; host h1 dies (its agent and both workers go silent together).
TEST_F(CoreTest, ALostHostIsOneRecoveryRoundThenTheJobRegrowsOnHostsWithFreeSlots) {
  Make(6);
  std::map<std::string, std::vector<std::string>> spawned;
  for (const std::string h : {"h0", "h1", "h2"}) {
    RegisterAgent(h, 2);
    for (auto& [to, ids] : Spawns(AgentBeat(h))) spawned[to] = ids;
  }
  ASSERT_EQ(spawned.size(), 3u);
  std::map<std::string, std::string> host_of;
  for (const std::string h : {"h0", "h1", "h2"}) {
    ASSERT_EQ(spawned["id-agent-" + h].size(), 2u) << h;
    for (const auto& id : spawned["id-agent-" + h]) {
      JoinOn(id, h);
      host_of[id] = h;
    }
  }
  for (const auto& [id, h] : host_of) Ready(id, 1);
  ASSERT_EQ(core_->generation(), 1u);
  // h0 and h2 have room for one more worker each.
  RegisterAgent("h0", 3);
  RegisterAgent("h2", 3);
  EXPECT_TRUE(Spawns(Tick()).empty()) << "at the target";
  // h1 goes silent; the others heartbeat every 200 ms.
  std::vector<Sent> recovers;
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(Duration(200));
    for (const auto& [id, h] : host_of) {
      if (h != "h1") Worker(id, T::kHeartbeat, proto::Heartbeat{5});
    }
    AgentBeat("h0");
    AgentBeat("h2");
    auto out = OfType(Tick(), T::kRecoverRequest);
    recovers.insert(recovers.end(), out.begin(), out.end());
  }
  // One recovery round, to the four survivors, without both of h1's workers.
  ASSERT_EQ(recovers.size(), 4u);
  std::vector<std::string> h1 = spawned["id-agent-h1"];
  std::sort(h1.begin(), h1.end());
  for (const auto& r : recovers) {
    EXPECT_NE(host_of[r.identity.substr(3)], "h1");
    auto req = Payload<proto::RecoverRequest>(r);
    EXPECT_EQ(req.target_generation, 2u);
    std::sort(req.lost.begin(), req.lost.end());
    EXPECT_EQ(req.lost, h1);
  }
  auto status = JsonStatus();
  ASSERT_EQ(status["hosts"].size(), 3u);
  EXPECT_EQ(status["hosts"][1]["name"], "h1");
  EXPECT_EQ(status["hosts"][1]["state"], "lost");
  EXPECT_EQ(status["hosts"][1]["workers"], 0);
  EXPECT_EQ(status["hosts"][0]["state"], "up");
  EXPECT_EQ(status["hosts"][0]["workers"], 2);
  EXPECT_EQ(status["target_workers"], 6);
  // The survivors answer; the recovery commits with four; the job grows back on h0 and h2.
  std::vector<Sent> last;
  for (const auto& [id, h] : host_of) {
    if (h != "h1") last = PausedMsg(id, 2, 5, {5}, true);
  }
  EXPECT_EQ(OfType(last, T::kNewGeneration).size(), 4u);
  for (const auto& [id, h] : host_of) {
    if (h != "h1") last = Ready(id, 2);
  }
  ASSERT_EQ(core_->generation(), 2u);
  EXPECT_EQ(core_->history().back().reason, proto::GenerationReason::kFailure);
  auto regrow = Spawns(last);
  ASSERT_EQ(regrow.size(), 2u);
  EXPECT_EQ(regrow["id-agent-h0"].size(), 1u);
  EXPECT_EQ(regrow["id-agent-h2"].size(), 1u);
  EXPECT_EQ(regrow.count("id-agent-h1"), 0u);
  JoinOn(regrow["id-agent-h0"][0], "h0");
  auto pauses = OfType(JoinOn(regrow["id-agent-h2"][0], "h2"), T::kPauseRequest);
  ASSERT_EQ(pauses.size(), 4u);
  EXPECT_EQ(Payload<proto::PauseRequest>(pauses[0]).reason, proto::GenerationReason::kRegrow);
}

TEST_F(CoreTest, AWorkerDyingAloneWithItsAgentAliveIsAWorkerLoss) {
  Make(2);
  RegisterAgent("h0", 2);
  auto ids = Spawns(AgentBeat("h0"))["id-agent-h0"];
  ASSERT_EQ(ids.size(), 2u);
  JoinOn(ids[0], "h0");
  JoinOn(ids[1], "h0");
  Ready(ids[0], 1);
  Ready(ids[1], 1);
  std::vector<Sent> recovers;
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(Duration(200));
    Worker(ids[0], T::kHeartbeat, proto::Heartbeat{5});
    AgentBeat("h0");
    auto out = OfType(Tick(), T::kRecoverRequest);
    recovers.insert(recovers.end(), out.begin(), out.end());
  }
  ASSERT_EQ(recovers.size(), 1u);
  EXPECT_EQ(Payload<proto::RecoverRequest>(recovers[0]).lost, (std::vector<std::string>{ids[1]}));
  EXPECT_EQ(core_->hosts().Find("h0")->state, proto::HostState::kUp);
}

TEST_F(CoreTest, StatusShowsHostsAndTheTarget) {
  Start({"a", "b"});
  RegisterAgent("host-a", 4);
  AgentBeat("host-a");
  clock_.Advance(Duration(40));
  auto s = JsonStatus();
  ASSERT_EQ(s["hosts"].size(), 1u);
  auto h = s["hosts"][0];
  EXPECT_EQ(h["name"], "host-a");
  EXPECT_EQ(h["address"], "10.0.0.host-a");
  EXPECT_EQ(h["slots"], 4);
  EXPECT_EQ(h["gpus"], 0);
  EXPECT_EQ(h["workers"], 1);
  EXPECT_EQ(h["state"], "up");
  EXPECT_EQ(h["last_heartbeat_ms_ago"], 40);
  EXPECT_EQ(s["target_workers"], 2);
  ASSERT_EQ(s["agents"].size(), 1u);
  EXPECT_EQ(s["agents"][0]["id"], "agent-host-a");
}

TEST_F(CoreTest, TheJobsEndTellsStandbyWorkersAndWritesTheFinalStatus) {
  char tmpl[] = "/tmp/elastra-core-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  options_.state_dir = dir;
  Start({"a"});
  JoinOn("s", "elsewhere");
  EXPECT_FALSE(std::filesystem::exists(dir + "/status.json"));
  auto out = Worker("a", T::kLeave, proto::LeaveRequest{proto::LeaveReason::kFinished, "done"}, 3);
  ASSERT_EQ(core_->state(), proto::JobState::kFinished);
  auto shutdowns = OfType(out, T::kShutdown);
  ASSERT_EQ(shutdowns.size(), 1u);
  EXPECT_EQ(shutdowns[0].identity, "id-s");
  EXPECT_EQ(Payload<proto::Shutdown>(shutdowns[0]).exit_code, 0);
  struct stat st {};
  ASSERT_EQ(stat((dir + "/status.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  std::ifstream in(dir + "/status.json");
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["state"], "finished");
  EXPECT_EQ(j["workers"].size(), 2u);
  std::filesystem::remove_all(dir);
}

// A grow asked for right after a shrink, before the leavers exited: their slots count (the
// resize is accepted), and the new workers are asked of the agent as the leavers go.
TEST_F(CoreTest, AGrowRightAfterAShrinkWaitsForTheLeaversSlots) {
  Make(4);
  RegisterAgent("h0", 4);
  auto first = Spawns(AgentBeat("h0"))["id-agent-h0"];
  ASSERT_EQ(first.size(), 4u);
  for (const auto& id : first) JoinOn(id, "h0");
  for (const auto& id : first) Ready(id, 1);
  ASSERT_EQ(core_->generation(), 1u);
  Admin(T::kResize, proto::ResizeRequest{2, false, {}, true}, 4);
  std::vector<std::string> leavers;
  std::vector<Sent> last;
  for (const auto& id : first) last = PausedMsg(id, 2, 3, {3}, false);
  for (const auto& s : OfType(last, T::kNewGeneration)) {
    if (Payload<proto::NewGeneration>(s).leave) leavers.push_back(s.identity.substr(3));
  }
  ASSERT_EQ(leavers.size(), 2u);
  for (const auto& id : first) {
    if (std::find(leavers.begin(), leavers.end(), id) == leavers.end()) Ready(id, 2);
  }
  ASSERT_EQ(core_->generation(), 2u);
  // The leavers' slots count, no more: 5 is beyond the host's 4 slots.
  auto too_many = Admin(T::kResize, proto::ResizeRequest{5, false, {}, false}, 6);
  ASSERT_EQ(too_many.size(), 1u);
  EXPECT_EQ(ErrorOf(too_many[0]).code(), StatusCode::kResourceExhausted);
  // The host is full until the leavers exit: 4 is accepted, nothing asked of the agent yet.
  auto grow = Admin(T::kResize, proto::ResizeRequest{4, false, {}, false}, 5);
  ASSERT_EQ(grow.size(), 1u);
  ASSERT_EQ(grow[0].envelope.type, T::kResizeReply) << ErrorOf(grow[0]);
  EXPECT_EQ(Payload<proto::ResizeReply>(grow[0]).phase, proto::ResizePhase::kAccepted);
  EXPECT_TRUE(Spawns(grow).empty());
  // One leaver leaves, the other's agent reports its exit: one worker asked for each.
  auto after_leave = Worker(leavers[0], T::kLeave,
                            proto::LeaveRequest{proto::LeaveReason::kFinished, "left"}, 9);
  EXPECT_EQ(Spawns(after_leave)["id-agent-h0"].size(), 1u);
  auto after_exit =
      From("agent-h0", proto::Role::kWorker, T::kProcessExited, proto::ProcessExited{leavers[1], 0, 0});
  EXPECT_EQ(Spawns(after_exit)["id-agent-h0"].size(), 1u);
}

}  // namespace
}  // namespace elastra::coordinator
