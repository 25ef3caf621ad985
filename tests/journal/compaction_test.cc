// The journal compacted (docs/ha.md, "Compaction"): the snapshot of a long job's state replays to
// that state (EncodeJournalSnapshot, ApplyJournalSnapshot), and a Journal on a real single-member
// etcd (tests/journal/etcd_server.h) that compacts every few records drops the records it replaced
// from etcd while a journal opened on it replays to the state the same records give uncompacted
// (in a file); an unknown snapshot is refused and nothing is cut; the events reader skips it.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "journal/etcd_storage.h"
#include "journal/events.h"
#include "journal/journal.h"
#include "journal/records.h"
#include "tests/journal/etcd_server.h"
#include "tests/journal/require_etcd.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

JournalWorker Worker(int i) {
  JournalWorker w{"w" + std::to_string(i), "host-" + std::to_string(i % 3), i % 8, 1000 + i};
  w.rendezvous = std::string("\x0a\x00\x00", 3) + static_cast<char>(i) + "\x1f\x90";
  w.memory_bytes = i % 2 == 0 ? (int64_t{1} << 30) + i : 0;
  return w;
}

Layout Dp(size_t n) {
  Layout l;
  l.dp = static_cast<int>(n);
  return l;
}

// A long job: joins, builds that add and drop workers, commits, checkpoints, workers lost and
// finished and removed, ids, targets and resizes, ending with a pause in flight. `after` runs after
// each record (a compaction when due).
void WriteLongJob(Journal& j, int rounds, const std::function<void()>& after) {
  auto ok = [&](const Status& s) {
    ASSERT_TRUE(s.ok()) << s;
    after();
  };
  ok(j.RecordJob("long", 2, 64, "tcp://0.0.0.0:0", 1));
  StateSpec spec;
  spec.num_layers = 3;
  ok(j.RecordState(spec));
  ok(j.RecordJoin(Worker(0)));
  ok(j.RecordJoin(Worker(1)));
  ok(j.RecordChangeBegun(1, ChangeKind::kBuild, {Worker(0), Worker(1)}));
  JournalGeneration g;
  g.generation = 1;
  g.layout = Dp(2);
  g.downtime_ms = 12.5;
  ok(j.RecordCommitOfBegun(g));
  int next = 2;
  for (int r = 0; r < rounds; ++r) {
    const uint64_t gen = j.state().current()->generation + 1;
    const size_t members = j.state().current()->members.size();
    ok(j.RecordJoin(Worker(next)));
    ok(j.RecordIds({"w" + std::to_string(next + 1000)}));
    // Every third round drops rank 0 (lost), else grows by the new worker.
    std::vector<int32_t> dropped;
    if (r % 3 == 2) {
      ok(j.RecordWorkerState(j.state().current()->members[0].id, JournalWorkerState::kLost));
      dropped.push_back(0);
    }
    ok(j.RecordChangeBegunOfCommitted(gen, ChangeKind::kBuild, dropped, {Worker(next)}));
    JournalGeneration c;
    c.generation = gen;
    c.reason = r % 3 == 2 ? proto::GenerationReason::kFailure : proto::GenerationReason::kRegrow;
    c.layout = Dp(members - dropped.size() + 1);
    c.downtime_ms = 0.1 * r + 1.0 / 3;
    c.groups_rebuilt = r;
    c.groups_kept = 1;
    ok(j.RecordCommitOfBegun(c));
    ok(j.RecordCheckpoint(100 * r, gen, "/ckpt/step-" + std::to_string(100 * r), 4096, 0.5));
    // A standby joins, and leaves two rounds later.
    if (r % 4 == 1) ok(j.RecordJoin(Worker(next + 500)));
    if (r % 4 == 3) {
      ok(j.RecordWorkerState("w" + std::to_string(next + 498), JournalWorkerState::kRemoved));
    }
    if (r % 5 == 4) ok(j.RecordTarget(static_cast<int32_t>(members), r % 3));
    if (r % 7 == 6) ok(j.RecordWaiting("no layout fits"));
    ++next;
  }
  ok(j.RecordJoin(Worker(next + 700)));  // a standby at the end
  JournalResize z;
  z.workers = 6;
  z.has_layout = true;
  z.layout = Dp(6);
  ok(j.RecordResize(z));
  ok(j.RecordWorkerState(j.state().current()->members.back().id, JournalWorkerState::kFinished));
  ok(j.RecordChangeBegunOfCommitted(j.state().current()->generation + 1, ChangeKind::kPause));
}

TEST(JournalSnapshotTest, ReplaysToTheStateOfTheRecordsItStandsFor) {
  char tmpl[] = "/tmp/elastra-snapshot-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto j = Journal::Create(dir + "/journal.bin");
  ASSERT_TRUE(j.ok()) << j.status();
  WriteLongJob(**j, 40, [] {});
  const JournalState& live = (*j)->state();
  ASSERT_TRUE(live.change_in_flight);
  ASSERT_FALSE(live.worker_states.empty());
  ASSERT_FALSE(live.standby.empty());

  const std::string text = EncodeJournalSnapshot(live);
  JournalState back;
  ASSERT_TRUE(ApplyJournalSnapshot(text, &back).ok());
  EXPECT_TRUE(SameJournalState(back, live));
  EXPECT_EQ(back.history.size(), live.history.size());
  EXPECT_EQ(back.seen_ids, live.seen_ids);
  EXPECT_EQ(back.rendezvous, live.rendezvous);
  EXPECT_EQ(back.memory, live.memory);
  EXPECT_EQ(back.spares, live.spares);
  EXPECT_EQ(back.target_workers, 6);
  EXPECT_EQ(back.highest_generation, live.highest_generation);
  EXPECT_EQ(EncodeJournalSnapshot(back), text) << "one state, one snapshot";
  // Over a job that ended too (a change stopped by the end record keeps its fields).
  ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFailed, "gave up").ok());
  ASSERT_TRUE(ApplyJournalSnapshot(EncodeJournalSnapshot((*j)->state()), &back).ok());
  EXPECT_TRUE(SameJournalState(back, (*j)->state()));

  // A reader refuses a snapshot of a version it does not know, or one that is none.
  std::string v2 = text;
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  JournalState untouched;
  const Status refused = ApplyJournalSnapshot(v2, &untouched);
  EXPECT_EQ(refused.code(), StatusCode::kCorrupt);
  EXPECT_NE(refused.message().find("journal snapshot version 2"), std::string::npos) << refused;
  EXPECT_TRUE(untouched.empty());
  EXPECT_EQ(ApplyJournalSnapshot("{\"t\":\"job\"}", &untouched).code(), StatusCode::kCorrupt);
  std::filesystem::remove_all(dir);
}

class EtcdCompactionTest : public JournalTest {
 protected:
  void SetUp() override {
    JournalTest::SetUp();
    ELASTRA_SKIP_WITHOUT_ETCD();
    const std::string why = server_.Start(dir_);
    ASSERT_EQ(why, "") << "a single-member etcd is needed for this test";
  }
  void TearDown() override {
    server_.Stop();
    JournalTest::TearDown();
  }
  std::unique_ptr<EtcdJournalStorage> Storage() {
    EtcdOptions o;
    o.endpoints = server_.url();
    auto s = EtcdJournalStorage::Create(o, "long");
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  int64_t Keys(const std::string& under) {
    EtcdOptions o;
    o.endpoints = server_.url();
    auto c = EtcdClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return -1;
    const std::string prefix = "/elastra/long/journal/" + under;
    auto r = (*c)->Range(prefix, EtcdClient::PrefixEnd(prefix), 0, false, /*keys_only=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? static_cast<int64_t>(r->kvs.size()) : -1;
  }

  EtcdServer server_;
};

TEST_F(EtcdCompactionTest, ACompactedJournalReplaysToTheStateOfAllItsRecords) {
  // The same job into the file, never compacted, and into etcd, compacted every 16 records.
  auto file = Journal::Create(path_);
  ASSERT_TRUE(file.ok()) << file.status();
  WriteLongJob(**file, 60, [] {});
  auto etcd = Journal::Create(Storage());
  ASSERT_TRUE(etcd.ok()) << etcd.status();
  Journal& j = **etcd;
  j.set_compact_every(16);
  int compactions = 0;
  WriteLongJob(j, 60, [&] {
    const uint64_t before = j.compacted();
    const Status s = j.MaybeCompact();
    ASSERT_TRUE(s.ok()) << s;
    if (j.compacted() != before) ++compactions;
    ASSERT_FALSE(j.compacted() != before && j.state().change_in_flight);
  });
  const uint64_t records = j.state().records;
  ASSERT_EQ(records, (*file)->state().records);
  EXPECT_GE(compactions, static_cast<int>(records / 16) - 2);
  ASSERT_GT(j.compacted(), records - 16);
  // Only the records after the snapshot are left in etcd.
  EXPECT_EQ(Keys("r/"), static_cast<int64_t>(records - j.compacted()));
  EXPECT_EQ(*Storage()->Compacted(), j.compacted());

  std::vector<std::string> warnings;
  auto file_state = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(file_state.ok()) << file_state.status();
  auto storage = Storage();
  uint64_t consistent = 0;
  auto etcd_state = Journal::Replay(*storage, &warnings, &consistent);
  ASSERT_TRUE(etcd_state.ok()) << etcd_state.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(consistent, records);
  EXPECT_TRUE(SameJournalState(*etcd_state, *file_state));
  EXPECT_TRUE(SameJournalState(*etcd_state, j.state()));
  EXPECT_EQ(etcd_state->records, records);
  EXPECT_TRUE(etcd_state->change_in_flight);

  // A writer that opens it takes it all back, appends after it, and compacts on.
  etcd->reset();
  auto reopened = Journal::Open(Storage());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_TRUE((*reopened)->warnings().empty());
  EXPECT_TRUE(SameJournalState((*reopened)->state(), *file_state));
  JournalGeneration next;
  next.generation = (*reopened)->state().change_target;
  next.members = (*reopened)->state().current()->members;
  next.layout = Dp(next.members.size());
  next.reason = proto::GenerationReason::kResize;
  ASSERT_TRUE((*reopened)->RecordCommit(next).ok());
  const Status compacted = (*reopened)->Compact();
  ASSERT_TRUE(compacted.ok()) << compacted;
  EXPECT_EQ(Keys("r/"), 0);
  auto last = Journal::Replay(*Storage(), nullptr);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(SameJournalState(*last, (*reopened)->state()));
  EXPECT_EQ(last->current()->generation, next.generation);

  // The events reader: no event for the snapshot; a reader behind it goes on from there.
  ASSERT_TRUE((*reopened)->RecordCheckpoint(9999, next.generation, "/ckpt/last").ok());
  JournalEventReader events(Storage(), 0);
  const std::vector<JobEvent> read = events.ReadNew();
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].type, "checkpoint");
  EXPECT_EQ(read[0].id, last->records + 1);
}

TEST_F(EtcdCompactionTest, ASnapshotItCannotReadIsRefusedAndNothingIsCut) {
  auto j = Journal::Create(Storage());
  ASSERT_TRUE(j.ok()) << j.status();
  WriteLongJob(**j, 3, [] {});
  const uint64_t records = (*j)->state().records;
  std::string v2 = EncodeJournalSnapshot((*j)->state());
  v2.replace(v2.find("\"version\":1"), 11, "\"version\":2");
  auto storage = Storage();
  ASSERT_TRUE(storage->CutAfter(records, false).ok());
  ASSERT_TRUE(storage->Compact(records - 2, v2).ok());
  const int64_t heads = Keys("r/");
  ASSERT_EQ(heads, 2);

  auto opened = Journal::Open(Storage());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(opened.status().message().find("journal snapshot version 2"), std::string::npos)
      << opened.status();
  EXPECT_EQ(Keys("r/"), heads) << "nothing cut";
  EXPECT_EQ(*Storage()->Compacted(), records - 2);
  EXPECT_EQ(Keys("corrupt/"), 0);
}

}  // namespace
}  // namespace elastra::journal
