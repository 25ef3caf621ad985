// The journal-made parts of GET /metrics and GET /v1/events, without sockets: a host lost, the
// steps a recovery rolled back, and the bytes of a committed checkpoint, from journal records
// through JournalEventReader to JournalEventMetrics' Prometheus text.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "journal/events.h"
#include "http/metrics.h"
#include "journal/journal.h"

namespace elastra::http {
namespace {

using journal::ChangeKind;
using journal::Journal;
using journal::JournalGeneration;
using journal::JournalWorkerState;
using journal::JournalWorker;
using journal::JournalEventReader;

using nlohmann::json;

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

class JournalEventMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-metrics-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto j = Journal::Create(dir_ + "/journal.bin");
    ASSERT_TRUE(j.ok()) << j.status();
    journal_ = std::move(j).value();
    ASSERT_TRUE(journal_->RecordJob("web", 2, 4).ok());
  }
  void TearDown() override {
    journal_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Commit(uint64_t generation, proto::GenerationReason reason, int64_t reached,
              int64_t restored) {
    JournalGeneration g;
    g.generation = generation;
    g.reason = reason;
    g.layout = Layout{2, 1, 1};
    g.members = {{"w0", "h0", -1, 10}, {"w" + std::to_string(generation), "h1", -1, 11}};
    g.reached_step = reached;
    g.restore_step = restored;
    ASSERT_TRUE(journal_->RecordCommit(g).ok());
  }
  std::vector<JobEvent> Events() { return JournalEventReader(dir_ + "/journal.bin", 0).ReadNew(); }

  std::string dir_;
  std::unique_ptr<Journal> journal_;
};

TEST_F(JournalEventMetricsTest, NothingYetIsZeroesAndUnknowns) {
  const std::string text = JournalEventMetrics().Text();
  for (const char* line :
       {"# TYPE elastra_events_total counter\n", "elastra_events_total{type=\"host_lost\"} 0\n",
        "# TYPE elastra_rolled_back_steps_total counter\n", "elastra_rolled_back_steps_total 0\n",
        "# TYPE elastra_checkpoint_bytes gauge\n", "elastra_checkpoint_bytes -1\n",
        "elastra_checkpoint_bytes_total 0\n", "elastra_last_checkpoint_step -1\n",
        "# TYPE elastra_checkpoint_save_seconds gauge\n", "elastra_checkpoint_save_seconds -1\n"}) {
    EXPECT_TRUE(Has(text, line)) << line << " in\n" << text;
  }
}

TEST_F(JournalEventMetricsTest, ARecoveryWaitingForWorkersIsAnEvent) {
  Commit(1, proto::GenerationReason::kStart, -1, -1);
  ASSERT_TRUE(journal_->RecordWaiting("no layout of the 1 live workers fits their memory").ok());
  auto events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].type, "waiting_for_workers");
  EXPECT_EQ(json::parse(events[1].data)["why"], "no layout of the 1 live workers fits their memory");
  JournalEventMetrics metrics;
  for (const JobEvent& e : events) metrics.Add(e);
  EXPECT_TRUE(Has(metrics.Text(), "elastra_events_total{type=\"waiting_for_workers\"} 1\n"))
      << metrics.Text();
  auto replayed = Journal::Replay(dir_ + "/journal.bin", nullptr);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->records, 3u) << "the job, the commit, the event";
}

TEST_F(JournalEventMetricsTest, AHostLostIsAnEventBeforeItsWorkersAndReplaySkipsIt) {
  Commit(1, proto::GenerationReason::kStart, -1, -1);
  ASSERT_TRUE(journal_->RecordHostLost("h1", "agent silent", {"w1"}).ok());
  ASSERT_TRUE(journal_->RecordWorkerState("w1", JournalWorkerState::kLost).ok());
  auto events = Events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].type, "host_lost");
  const json data = json::parse(events[1].data);
  EXPECT_EQ(data["type"], "host_lost");
  EXPECT_EQ(data["host"], "h1");
  EXPECT_EQ(data["why"], "agent silent");
  EXPECT_EQ(data["workers"], (json{"w1"}));
  EXPECT_EQ(events[2].type, "worker_lost");
  EXPECT_FALSE(json::parse(events[0].data).contains("rolled_back_steps"))
      << "a start generation rolls nothing back";

  // A restarted coordinator takes the journal back over the event record.
  journal_.reset();
  auto reopened = Journal::Open(dir_ + "/journal.bin");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_TRUE((*reopened)->warnings().empty());
  EXPECT_EQ((*reopened)->state().history.size(), 1u);
  EXPECT_EQ((*reopened)->state().worker_states.at("w1"), JournalWorkerState::kLost);

  JournalEventMetrics metrics;
  for (const auto& e : events) metrics.Add(e);
  const std::string text = metrics.Text();
  EXPECT_TRUE(Has(text, "elastra_events_total{type=\"host_lost\"} 1\n")) << text;
  EXPECT_TRUE(Has(text, "elastra_events_total{type=\"worker_lost\"} 1\n")) << text;
}

TEST_F(JournalEventMetricsTest, RecoveriesAddTheStepsTheyRolledBack) {
  Commit(1, proto::GenerationReason::kStart, -1, -1);
  Commit(2, proto::GenerationReason::kFailure, 37, 30);  // 7 steps trained again
  Commit(3, proto::GenerationReason::kResize, -1, -1);
  Commit(4, proto::GenerationReason::kFailure, 50, 50);  // nothing lost
  Commit(5, proto::GenerationReason::kFailure, 64, 52);  // 12
  auto events = Events();
  ASSERT_EQ(events.size(), 5u);
  const json second = json::parse(events[1].data);
  EXPECT_EQ(second["reason"], "failure");
  EXPECT_EQ(second["reached_step"], 37);
  EXPECT_EQ(second["restore_step"], 30);
  EXPECT_EQ(second["rolled_back_steps"], 7);
  EXPECT_EQ(json::parse(events[3].data)["rolled_back_steps"], 0);

  JournalEventMetrics metrics;
  for (size_t i = 0; i < 2; ++i) metrics.Add(events[i]);
  EXPECT_TRUE(Has(metrics.Text(), "elastra_rolled_back_steps_total 7\n")) << metrics.Text();
  for (size_t i = 2; i < events.size(); ++i) metrics.Add(events[i]);
  EXPECT_TRUE(Has(metrics.Text(), "elastra_rolled_back_steps_total 19\n")) << metrics.Text();
  EXPECT_TRUE(Has(metrics.Text(), "elastra_events_total{type=\"generation\"} 5\n"));
}

TEST_F(JournalEventMetricsTest, CheckpointBytesOfTheNewestAndInAll) {
  Commit(1, proto::GenerationReason::kStart, -1, -1);
  ASSERT_TRUE(journal_->RecordCheckpoint(10, 1, "/ckpt/10", 4096, 1.5).ok());
  JournalEventMetrics metrics;
  for (const auto& e : Events()) metrics.Add(e);
  EXPECT_TRUE(Has(metrics.Text(), "elastra_checkpoint_bytes 4096\n")) << metrics.Text();
  EXPECT_TRUE(Has(metrics.Text(), "elastra_checkpoint_save_seconds 1.5\n")) << metrics.Text();
  EXPECT_TRUE(Has(metrics.Text(), "elastra_last_checkpoint_step 10\n"));

  ASSERT_TRUE(journal_->RecordCheckpoint(20, 1, "/ckpt/20", 6000).ok());
  // A journal written before bytes were recorded: the step moves on, the size is not known.
  ASSERT_TRUE(journal_->RecordCheckpoint(30, 1, "/ckpt/30").ok());
  auto events = Events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(json::parse(events[2].data)["bytes"], 6000);
  EXPECT_FALSE(json::parse(events[3].data).contains("bytes"));
  JournalEventMetrics again;
  for (size_t i = 0; i < 3; ++i) again.Add(events[i]);
  EXPECT_TRUE(Has(again.Text(), "elastra_checkpoint_bytes 6000\n")) << again.Text();
  EXPECT_TRUE(Has(again.Text(), "elastra_checkpoint_bytes_total 10096\n")) << again.Text();
  again.Add(events[3]);
  EXPECT_TRUE(Has(again.Text(), "elastra_checkpoint_bytes -1\n")) << again.Text();
  EXPECT_TRUE(Has(again.Text(), "elastra_checkpoint_save_seconds -1\n")) << again.Text();
  EXPECT_TRUE(Has(again.Text(), "elastra_checkpoint_bytes_total 10096\n"));
  EXPECT_TRUE(Has(again.Text(), "elastra_last_checkpoint_step 30\n"));
}

// A commit that refers to its build's begin record (docs/journal.md) is a generation event with
// the members that record listed, also for a reader that resumes between the two records.
TEST_F(JournalEventMetricsTest, AGenerationCommittedByItsBeginRecordListsItsWorkers) {
  const std::vector<JournalWorker> members = {{"w3", "h0", 0, 10}, {"w1", "h1", 1, 11}};
  ASSERT_TRUE(journal_->RecordChangeBegun(1, ChangeKind::kBuild, members).ok());
  const uint64_t after_begin = std::filesystem::file_size(dir_ + "/journal.bin");
  JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout = Layout{2, 1, 1};
  g.members = members;
  ASSERT_TRUE(journal_->RecordCommit(g).ok());
  ASSERT_TRUE(journal_->RecordChangeBegun(2, ChangeKind::kBuild, {members[1]}).ok());
  g.generation = 2;
  g.layout = Layout{1, 1, 1};
  g.members = {members[1]};
  ASSERT_TRUE(journal_->RecordCommit(g).ok());
  for (uint64_t after : {uint64_t{0}, after_begin}) {
    auto events = JournalEventReader(dir_ + "/journal.bin", after).ReadNew();
    ASSERT_EQ(events.size(), 2u) << after;
    EXPECT_EQ(json::parse(events[0].data)["workers"], (json{"w3", "w1"})) << after;
    EXPECT_EQ(json::parse(events[1].data)["workers"], (json{"w1"})) << after;
    EXPECT_EQ(json::parse(events[1].data)["generation"], 2);
  }
}


// A build's begin record written as a difference from the committed members (docs/journal.md):
// the generation's event lists the workers it makes, read from the start or resumed after the
// commit it refers to.
TEST_F(JournalEventMetricsTest, AGenerationBegunAsADifferenceListsItsWorkers) {
  const std::vector<JournalWorker> members = {
      {"w0", "h0", 0, 10}, {"w1", "h0", 1, 11}, {"w2", "h1", 0, 12}};
  ASSERT_TRUE(journal_->RecordChangeBegun(1, ChangeKind::kBuild, members).ok());
  JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout = Layout{3, 1, 1};
  g.members = members;
  ASSERT_TRUE(journal_->RecordCommit(g).ok());
  const uint64_t after_commit = std::filesystem::file_size(dir_ + "/journal.bin");
  const JournalWorker added{"w7", "h2", 0, 17};
  ASSERT_TRUE(
      journal_->RecordChangeBegunOfCommitted(2, ChangeKind::kBuild, {1}, {added}).ok());
  g.generation = 2;
  g.members = {members[0], members[2], added};
  ASSERT_TRUE(journal_->RecordCommit(g).ok());
  for (uint64_t after : {uint64_t{0}, after_commit}) {
    auto events = JournalEventReader(dir_ + "/journal.bin", after).ReadNew();
    ASSERT_FALSE(events.empty()) << after;
    EXPECT_EQ(json::parse(events.back().data)["workers"], (json{"w0", "w2", "w7"})) << after;
    EXPECT_EQ(json::parse(events.back().data)["generation"], 2);
  }
}

}  // namespace
}  // namespace elastra::http
