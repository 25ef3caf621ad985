// The fixture of the coordinator core's tests: a CoordinatorCore on a FakeClock, driven message by
// message, with helpers that send as a worker, an agent or the admin and pick what it sent.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "protocol/codec.h"
#include "coordinator/coordinator_core.h"
#include "tests/coordinator/merged_generation.h"

namespace elastra::coordinator::testing {

using proto::MessageType;
using T = proto::MessageType;

struct Sent {
  std::string identity;
  proto::Envelope envelope;
};

class CoreTest : public ::testing::Test {
 protected:
  void Make(int initial_workers, int max_workers = 64) {
    options_.job = "job";
    options_.initial_workers = initial_workers;
    options_.max_workers = max_workers;
    options_.heartbeat_interval = Duration(200);
    options_.heartbeat_timeout = Duration(1500);
    options_.spawn_timeout = Duration(1000);
    options_.clock = &clock_;
    core_ = std::make_unique<CoordinatorCore>(options_);
  }

  // The tables of a generation, from every recipient's NewGeneration (merged_generation.h).
  static proto::NewGeneration MergedOf(const std::vector<Sent>& gens) {
    std::vector<proto::NewGeneration> all;
    for (const auto& s : gens) {
      auto g = proto::DecodePayload<proto::NewGeneration>(s.envelope.payload);
      EXPECT_TRUE(g.ok()) << g.status();
      if (g.ok()) all.push_back(*g);
    }
    return Merged(all);
  }

  static std::vector<Sent> DecodeAll(const std::vector<Outgoing>& out) {
    std::vector<Sent> sent;
    for (const auto& o : out) {
      auto e = proto::DecodeEnvelope(o.frame);
      EXPECT_TRUE(e.ok()) << e.status();
      if (e.ok()) sent.push_back({o.identity, *e});
    }
    return sent;
  }

  template <class P>
  std::vector<Sent> From(const std::string& sender, proto::Role role, T type, const P& payload,
                         uint64_t request_id = 0, uint64_t generation = 0) {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = sender;
    e.request_id = request_id;
    e.generation = generation;
    e.payload = proto::EncodePayload(payload);
    return DecodeAll(core_->Handle("id-" + sender, role, e));
  }
  template <class P>
  std::vector<Sent> Worker(const std::string& id, T type, const P& payload, uint64_t rid = 0) {
    return From(id, proto::Role::kWorker, type, payload, rid);
  }
  template <class P>
  std::vector<Sent> Admin(T type, const P& payload, uint64_t rid = 1) {
    return From("admin", proto::Role::kAdmin, type, payload, rid);
  }
  std::vector<Sent> Tick() { return DecodeAll(core_->Tick()); }

  std::vector<Sent> Join(const std::string& id, StateSpec state = {}) {
    proto::JoinRequest join{id, "host-" + id, 0, 100};
    join.state = std::move(state);
    return Worker(id, T::kJoin, join, ++rid_);
  }

  static std::vector<Sent> OfType(const std::vector<Sent>& sent, T type) {
    std::vector<Sent> out;
    for (const auto& s : sent) {
      if (s.envelope.type == type) out.push_back(s);
    }
    return out;
  }
  template <class P>
  static P Payload(const Sent& s) {
    auto p = proto::DecodePayload<P>(s.envelope.payload);
    EXPECT_TRUE(p.ok()) << p.status();
    return *p;
  }
  static elastra::Status ErrorOf(const Sent& s) {
    EXPECT_EQ(s.envelope.type, T::kError);
    auto e = Payload<proto::ErrorReply>(s);
    return elastra::Status(static_cast<StatusCode>(e.code), e.message);
  }

  // Joins ids and commits the first generation.
  void Start(const std::vector<std::string>& ids) {
    Make(static_cast<int>(ids.size()));
    std::vector<Sent> last;
    for (const auto& id : ids) last = Join(id);
    auto gens = OfType(last, T::kNewGeneration);
    ASSERT_EQ(gens.size(), ids.size());
    for (const auto& id : ids) Ready(id, 1);
    ASSERT_EQ(core_->state(), proto::JobState::kRunning);
    ASSERT_EQ(core_->generation(), 1u);
  }

  std::vector<Sent> Ready(const std::string& id, uint64_t generation, double rebuild = 1,
                          double transfer = 2) {
    return Worker(id, T::kGenerationReady,
                  proto::GenerationReady{generation, rebuild, transfer, 0});
  }
  std::vector<Sent> PausedMsg(const std::string& id, uint64_t target, int64_t step,
                              std::vector<int64_t> commits, bool failed) {
    return Worker(id, T::kPaused, proto::PausedReport{target, step, std::move(commits), failed});
  }
  void Beat(const std::vector<std::string>& ids, int64_t step = 0) {
    for (const auto& id : ids) Worker(id, T::kHeartbeat, proto::Heartbeat{step});
  }
  nlohmann::json JsonStatus() {
    return nlohmann::json::parse(proto::StatusJson(core_->Snapshot()));
  }

  // Worker `id` joins from host `host`.
  std::vector<Sent> JoinOn(const std::string& id, const std::string& host) {
    return Worker(id, T::kJoin, proto::JoinRequest{id, host, 0, 100}, ++rid_);
  }
  // Agent "agent-<host>" registers `host` with `slots` using the worker key (the join file's).
  std::vector<Sent> RegisterAgent(const std::string& host, int slots) {
    return From("agent-" + host, proto::Role::kWorker, T::kAgentRegister,
                proto::AgentRegister{host, slots, "10.0.0." + host, 0}, ++rid_);
  }
  std::vector<Sent> AgentBeat(const std::string& host) {
    return From("agent-" + host, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{-1});
  }
  // The spawn requests among `sent`: recipient identity -> ids.
  static std::map<std::string, std::vector<std::string>> Spawns(const std::vector<Sent>& sent) {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& s : OfType(sent, T::kSpawnRequest)) {
      auto ids = Payload<proto::SpawnRequest>(s).worker_ids;
      out[s.identity].insert(out[s.identity].end(), ids.begin(), ids.end());
    }
    return out;
  }

  FakeClock clock_;
  CoordinatorOptions options_;
  std::unique_ptr<CoordinatorCore> core_;
  uint64_t rid_ = 100;
};

}  // namespace elastra::coordinator::testing
