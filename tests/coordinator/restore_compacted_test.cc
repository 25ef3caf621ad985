// The restore manager over a compacted journal on a real single-member etcd (docs/ha.md,
// "Compaction"; tests/journal/etcd_server.h): a job whose records were replaced by snapshots is
// taken back as the job of all its records (the generation, members, checkpoint, pending resize
// and change in flight that restore_manager_test.cc takes back from the file), and a coordinator
// on etcd compacts its journal as it writes (CoordinatorOptions::journal_compact_records).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "coordinator/restore_manager.h"
#include "journal/etcd_storage.h"
#include "journal/records.h"
#include "tests/coordinator/manager_test_util.h"
#include "tests/journal/etcd_server.h"
#include "tests/journal/require_etcd.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class RestoreCompactedTest : public ManagerTest {
 protected:
  void SetUp() override {
    ELASTRA_SKIP_WITHOUT_ETCD();
    char tmpl[] = "/tmp/elastra-restore-compacted-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    const std::string why = server_.Start(dir_);
    ASSERT_EQ(why, "") << "a single-member etcd is needed for this test";
    options_.state_dir = dir_;
    options_.etcd = server_.url();
    options_.job = "job";
    options_.env = Env::Default();
    options_.heartbeat_timeout = Duration(1500);
    options_.journal_compact_records = 4;
    generations_.AddRecoveryListener([this] { restore_.OnRecoveryStarted(); });
  }
  void TearDown() override {
    server_.Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<journal::JournalStorage> Storage() {
    journal::EtcdOptions o;
    o.endpoints = server_.url();
    auto s = journal::EtcdJournalStorage::Create(o, "job");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }

  static JournalWorker W(const std::string& id) { return JournalWorker{id, "n1", 0, 1}; }

  journal::EtcdServer server_;
  std::string dir_;
  RestoreManager restore_{context_, &checkpoints_, &generations_, &resizes_};
};

TEST_F(RestoreCompactedTest, AJobIsTakenBackFromItsSnapshotAsFromAllItsRecords) {
  // restore_manager_test.cc's job, with more checkpoints, compacted every 4 records: generation 1
  // of a and b, then a resize to 1 that was pausing when the coordinator died.
  {
    auto j = Journal::Create(Storage());
    ASSERT_TRUE(j.ok()) << j.status();
    (*j)->set_compact_every(4);
    auto write = [&j](const Status& s) {
      ASSERT_TRUE(s.ok()) << s;
      const Status compacted = (*j)->MaybeCompact();
      ASSERT_TRUE(compacted.ok()) << compacted;
    };
    write((*j)->RecordJob("job", 2, 8));
    write((*j)->RecordJoin(W("a")));
    write((*j)->RecordJoin(W("b")));
    JournalGeneration g;
    g.generation = 1;
    g.layout = Layout{2, 1, 1};
    g.members = {W("a"), W("b")};
    write((*j)->RecordCommit(g));
    for (int step = 10; step <= 100; step += 10) {
      write((*j)->RecordCheckpoint(step, 1, "/ckpt/step-" + std::to_string(step)));
    }
    write((*j)->RecordResize(JournalResize{1, false, Layout{}}));
    write((*j)->RecordChangeBegun(2, ChangeKind::kPause, {W("a"), W("b")}));
    EXPECT_GE((*j)->compacted(), 12u);
  }

  ASSERT_TRUE(restore_.Open().ok());
  EXPECT_TRUE(restore_.restored());
  EXPECT_TRUE(restore_.pending());
  EXPECT_EQ(generations_.generation(), 1u);
  EXPECT_EQ(generations_.members(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(membership_.Members(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(checkpoints_.latest_dir(), "/ckpt/step-100");
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.pending()->workers, 1);
  EXPECT_EQ(journal_.journal()->state().records, 16u) << "positions count on past the snapshot";

  membership_.Find("a")->identity = "id-a";
  membership_.Find("b")->identity = "id-b";
  restore_.MaybeFinish();
  EXPECT_FALSE(restore_.pending());
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u);
  EXPECT_EQ(recover[0].second.target_generation, 3u) << "above every journaled number";
}

TEST_F(RestoreCompactedTest, TheCoordinatorCompactsItsJournalOnEtcdAsItWrites) {
  ASSERT_TRUE(restore_.Open().ok());
  EXPECT_FALSE(restore_.restored());
  for (int step = 1; step <= 10; ++step) {
    ASSERT_TRUE(journal_.Checkpoint(step, 0, "/ckpt/step-" + std::to_string(step)).ok());
  }
  EXPECT_GE(journal_.journal()->compacted(), 8u);
  // What a restart replays: every checkpoint, from the snapshot and the records after it.
  auto replayed = Journal::Replay(*Storage(), nullptr);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(replayed->records, 11u);
  ASSERT_EQ(replayed->checkpoints.size(), 10u);
  EXPECT_EQ(replayed->checkpoints.back().dir, "/ckpt/step-10");
  EXPECT_TRUE(journal::SameJournalState(*replayed, journal_.journal()->state()));
}

}  // namespace
}  // namespace elastra::coordinator
