// The embedded coordinator over etcd (EmbeddedOptions::etcd, docs/ha.md "The coordinator on etcd"):
// the job's keys beside its journal, a takeover with the state directory gone, --restart over etcd,
// and a journal that was never published cleared by a new start. Each test starts a single-member
// etcd of its own (tests/journal/etcd_server.h); skipped only without an etcd binary
// (ELASTRA_REQUIRE_ETCD=1 makes that a failure).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "journal/etcd_storage.h"
#include "journal/journal.h"
#include "launch/embedded.h"
#include "launch/etcd_job.h"
#include "tests/journal/etcd_server.h"
#include "tests/journal/require_etcd.h"

namespace elastra::launch {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

class EmbeddedEtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ELASTRA_SKIP_WITHOUT_ETCD();
    char tmpl[] = "/tmp/elastra-embedded-etcd-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ASSERT_EQ(etcd_.Start(dir_), "");
  }
  void TearDown() override {
    etcd_.Stop();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  EmbeddedOptions Options(int workers) const {
    EmbeddedOptions o;
    o.state_dir = dir_ + "/state";
    o.job = "j";
    o.initial_workers = workers;
    o.etcd = etcd_.url();
    return o;
  }
  // What the job's journal on etcd replays to.
  journal::JournalState Replay() const {
    auto storage = journal::EtcdJournalStorage::Create(journal::EtcdOptions{etcd_.url()}, "j");
    EXPECT_TRUE(storage.ok()) << storage.status();
    if (!storage.ok()) return {};
    auto state = journal::Journal::Replay(**storage, nullptr);
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? *state : journal::JournalState{};
  }

  std::string dir_;
  journal::EtcdServer etcd_;
};

TEST_F(EmbeddedEtcdTest, ANewStateDirectoryTakesTheJobOverWithItsAddressAndKeys) {
  EmbeddedOptions o = Options(3);
  o.http = "127.0.0.1:0";
  ConnectionInfo first;
  std::string admin_token;
  {
    auto e = StartEmbeddedCoordinator(o);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->journal, "etcd " + etcd_.url() + " /elastra/j/");
    first = e->info;
    admin_token = ReadFile(o.state_dir + "/admin.token");
    e->http->Stop();
    e->server->Stop();
  }
  EXPECT_FALSE(std::filesystem::exists(o.state_dir + "/journal.bin"));
  auto kept = ReadEtcdJob(etcd_.url(), "j");
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_TRUE(kept->has_value());
  EXPECT_EQ((*kept)->info.address, first.address);
  EXPECT_EQ((*kept)->info.http, first.http);

  // The state directory is lost; the same command, even asking for another size, takes the job
  // over.
  std::filesystem::remove_all(o.state_dir);
  EmbeddedOptions again = Options(5);
  auto e = StartEmbeddedCoordinator(again);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->info.address, first.address);
  EXPECT_EQ(e->info.server_public, first.server_public);
  EXPECT_EQ(e->info.admin.public_key, first.admin.public_key);
  EXPECT_EQ(e->info.worker.secret_key, first.worker.secret_key);
  EXPECT_EQ(e->info.http, first.http) << "the HTTP API where its clients have it";
  EXPECT_EQ(ReadFile(again.state_dir + "/admin.token"), admin_token);
  auto join = ReadJoinFile(again.state_dir + "/join.json");
  ASSERT_TRUE(join.ok()) << join.status();
  EXPECT_EQ(join->server_public, first.server_public);
  // Taken back, not started again: the journal still holds the first start's job, and only it.
  const journal::JournalState s = Replay();
  EXPECT_EQ(s.job, "j");
  EXPECT_EQ(s.initial_workers, 3);
  EXPECT_EQ(s.records, 1u);
  if (e->http) e->http->Stop();
  e->server->Stop();
}

TEST_F(EmbeddedEtcdTest, ARestartOverEtcdNeedsTheJobThere) {
  EmbeddedOptions o = Options(1);
  o.restart = true;
  auto e = StartEmbeddedCoordinator(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound) << e.status();
  EXPECT_NE(e.status().message().find("holds no job 'j'"), std::string::npos) << e.status();
}

TEST_F(EmbeddedEtcdTest, AJournalNeverPublishedIsClearedByANewStart) {
  {
    // A first start that died after the journal recorded its job, before it wrote the job's key.
    auto storage = journal::EtcdJournalStorage::Create(journal::EtcdOptions{etcd_.url()}, "j");
    ASSERT_TRUE(storage.ok()) << storage.status();
    auto journal = journal::Journal::Open(std::move(storage).value());
    ASSERT_TRUE(journal.ok()) << journal.status();
    ASSERT_TRUE((*journal)->RecordJob("j", 7, 7).ok());
  }
  auto e = StartEmbeddedCoordinator(Options(2));
  ASSERT_TRUE(e.ok()) << e.status();
  const journal::JournalState s = Replay();
  EXPECT_EQ(s.initial_workers, 2);
  EXPECT_EQ(s.records, 1u);
  auto kept = ReadEtcdJob(etcd_.url(), "j");
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->has_value());
  e->server->Stop();
}

}  // namespace
}  // namespace elastra::launch
