// The restore manager driven without a core: it takes back a journaled job that was pausing for a
// resize, waits to hear from the restored members, then recovers and resumes the resize; and it
// refuses the journal of another job.
#include "coordinator/restore_manager.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>

#include "tests/coordinator/manager_test_util.h"

namespace elastra::coordinator {
namespace {

using T = proto::MessageType;

class RestoreManagerTest : public ManagerTest {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-restore-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    options_.state_dir = tmpl;
    options_.job = "job";
    options_.env = Env::Default();
    options_.heartbeat_timeout = Duration(1500);
    generations_.AddRecoveryListener([this] { restore_.OnRecoveryStarted(); });
  }
  void TearDown() override { std::filesystem::remove_all(options_.state_dir); }

  static JournalWorker W(const std::string& id) { return JournalWorker{id, "n1", 0, 1}; }

  // Generation 1 of a and b committed, a checkpoint, then a resize to 1 that was pausing when the
  // coordinator died.
  void WriteJournal(const std::string& job) {
    auto j = Journal::Create(options_.state_dir + "/journal.bin");
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob(job, 2, 8).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("a")).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("b")).ok());
    JournalGeneration g;
    g.generation = 1;
    g.layout = Layout{2, 1, 1};
    g.members = {W("a"), W("b")};
    ASSERT_TRUE((*j)->RecordCommit(g).ok());
    ASSERT_TRUE((*j)->RecordCheckpoint(20, 1, "/ckpt/step-20").ok());
    ASSERT_TRUE((*j)->RecordResize(JournalResize{1, false, Layout{}}).ok());
    ASSERT_TRUE((*j)->RecordChangeBegun(2, ChangeKind::kPause, {W("a"), W("b")}).ok());
  }

  RestoreManager restore_{context_, &checkpoints_, &generations_, &resizes_};
};

TEST_F(RestoreManagerTest, AChangeInFlightRecoversOnceTheMembersAreHeardFrom) {
  WriteJournal("job");
  ASSERT_TRUE(restore_.Open().ok());
  EXPECT_TRUE(restore_.restored());
  EXPECT_TRUE(restore_.pending());
  EXPECT_EQ(generations_.generation(), 1u);
  EXPECT_EQ(generations_.members(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(membership_.Members(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(checkpoints_.latest_dir(), "/ckpt/step-20");
  ASSERT_TRUE(resizes_.pending().has_value());
  EXPECT_EQ(resizes_.pending()->workers, 1);

  membership_.Find("a")->identity = "id-a";  // a's first heartbeat after the restart
  restore_.MaybeFinish();
  EXPECT_TRUE(restore_.pending()) << "b was not heard from yet";
  membership_.Find("b")->identity = "id-b";
  restore_.MaybeFinish();
  EXPECT_FALSE(restore_.pending());
  auto recover = Sent<proto::RecoverRequest>(T::kRecoverRequest);
  ASSERT_EQ(recover.size(), 2u);
  EXPECT_EQ(recover[0].second.target_generation, 3u) << "above every journaled number";
}

TEST_F(RestoreManagerTest, AJournalOfAnotherJobIsRefused) {
  WriteJournal("other");
  Status s = restore_.Open();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("belongs to job 'other'"), std::string::npos) << s;
  EXPECT_FALSE(restore_.restored());
}

TEST_F(RestoreManagerTest, ANewJournalRecordsTheJob) {
  ASSERT_TRUE(restore_.Open().ok());
  EXPECT_FALSE(restore_.restored());
  EXPECT_FALSE(restore_.pending());
  auto s = Journal::Replay(options_.state_dir + "/journal.bin", nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->job, "job");
  EXPECT_EQ(s->records, 1u);
}

}  // namespace
}  // namespace elastra::coordinator
