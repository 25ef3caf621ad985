// A fixture that wires the coordinator's managers the way CoordinatorCore does, without the
// core: tests call a manager directly, step a FakeClock, and read what it sent from the Outbox.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "protocol/codec.h"
#include "coordinator/generation_manager.h"
#include "coordinator/host_manager.h"
#include "coordinator/host_table.h"
#include "coordinator/resize_manager.h"
#include "tests/coordinator/merged_generation.h"

namespace elastra::coordinator {

class ManagerTest : public ::testing::Test {
 protected:
  using T = proto::MessageType;

  ManagerTest() {
    options_.initial_workers = 2;
    options_.max_workers = 8;
    options_.recover_timeout = Duration(1500);
    options_.spawn_timeout = Duration(1000);
    options_.clock = &clock_;
    generations_.AddCommitListener([this](uint64_t g) { commits_.push_back(g); });
    generations_.AddCommitListener([this](uint64_t) {
      resizes_.Continue();
      resizes_.MaybeRegrow();
      resizes_.MaybeReplenishSpares();
    });
    generations_.SetTargets([this] { return JobTargets{resizes_.target(), resizes_.spares()}; });
    host_manager_.AddHostListener([this] {
      host_manager_.MaybeStartFirstWorkers();
      resizes_.ContinueIfWaitingForWorkers();
      resizes_.MaybeRegrow();
      resizes_.MaybeReplenishSpares();
    });
    generations_.AddJobEndListener([this](const std::string& m) {
      ended_ = m;
      resizes_.OnJobEnd(m);
    });
    generations_.AddRecoveryListener([this] { ++recoveries_; });
  }

  // Worker `id` on `host` joins as a standby worker (what WorkerService::OnJoin does), with
  // `memory` bytes for the job's state (0: unlimited).
  void Join(const std::string& id, const std::string& host = "n1", int64_t memory = 0) {
    proto::JoinRequest join{id, host, 0, 1};
    join.device_memory_bytes = memory;
    ASSERT_TRUE(membership_.Join(join, "id-" + id).ok());
    health_.Beat(membership_.Find(id)->slot);
    host_manager_.OnJoined(membership_.Find(id));
    generations_.MaybeFormFirstGeneration();
    resizes_.ContinueIfWaitingForWorkers();
    resizes_.MaybeRegrow();
  }

  // An agent "agent-<name>" registers host `name` with `slots` (and, with `heartbeats`, sends its
  // first heartbeat), as HostManager::OnAgentRegister and OnAgentHeartbeat do.
  HostInfo* RegisterHost(const std::string& name, int slots, bool heartbeats = true) {
    proto::Envelope e;
    e.type = T::kAgentRegister;
    e.sender = "agent-" + name;
    e.request_id = 1;
    e.payload = proto::EncodePayload(proto::AgentRegister{name, slots, "10.0.0." + name, 0});
    host_manager_.OnAgentRegister("id-agent-" + name, e);
    if (heartbeats) host_manager_.OnAgentHeartbeat("agent-" + name);
    return hosts_.Find(name);
  }

  // What was sent since the last call, of one type, as (recipient identity, payload); the rest
  // is dropped.
  template <class P>
  std::vector<std::pair<std::string, P>> Sent(T type) {
    std::vector<std::pair<std::string, P>> out;
    for (const auto& o : outbox_.Take()) {
      auto e = proto::DecodeEnvelope(o.frame);
      EXPECT_TRUE(e.ok()) << e.status();
      if (!e.ok() || e->type != type) continue;
      auto p = proto::DecodePayload<P>(e->payload);
      EXPECT_TRUE(p.ok()) << p.status();
      if (p.ok()) out.emplace_back(o.identity, *p);
    }
    return out;
  }

  // The tables of a generation, from every recipient's NewGeneration (merged_generation.h).
  static proto::NewGeneration MergedOf(
      const std::vector<std::pair<std::string, proto::NewGeneration>>& gens) {
    std::vector<proto::NewGeneration> all;
    for (const auto& [id, g] : gens) all.push_back(g);
    return Merged(all);
  }

  // a and b form generation 1 and commit it.
  void StartTwo() {
    Join("a");
    Join("b");
    ASSERT_EQ(Sent<proto::NewGeneration>(T::kNewGeneration).size(), 2u);
    ASSERT_TRUE(generations_.OnReady("a", proto::GenerationReady{1, 1, 0, 0}).ok());
    ASSERT_TRUE(generations_.OnReady("b", proto::GenerationReady{1, 1, 0, 0}).ok());
    ASSERT_EQ(generations_.generation(), 1u);
  }

  CoordinatorOptions options_;
  FakeClock clock_;
  Membership membership_;
  HostTable hosts_{&membership_};
  HealthMonitor health_{&clock_, Duration(1500)};
  Outbox outbox_{"job", &membership_, [this] { return generations_.generation(); }};
  JournalRecorder journal_{&membership_};
  LayoutPolicy layouts_;
  CheckpointManager checkpoints_{"job", 3, Env::Default(), &journal_};
  CoordinatorContext context_{&options_, &clock_,  &membership_, &hosts_,
                              &health_,  &outbox_, &journal_};
  GenerationManager generations_{context_, &layouts_, &checkpoints_};
  HostManager host_manager_{context_, &generations_};
  ResizeManager resizes_{context_, &host_manager_, &layouts_, &generations_};
  std::vector<uint64_t> commits_;
  std::string ended_;
  int recoveries_ = 0;
};

}  // namespace elastra::coordinator
