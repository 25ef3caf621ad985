// The journal on etcd (docs/ha.md): EtcdJournalStorage and its JSON-gateway client against a real
// single-member etcd each test starts on its own ports (tests/journal/etcd_server.h): records read
// back in order and from a position, a multi-MiB record in pieces read back whole, a missing piece
// seen as damage, CutAfter (with its copy) and Clear, two jobs apart, the whole Journal over etcd
// writing what it writes to the file and its events read back, and an unreachable cluster answered
// kUnavailable.
#include "journal/etcd_storage.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "journal/events.h"
#include "journal/journal.h"
#include "tests/journal/etcd_server.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

struct Visited {
  std::vector<std::string> payloads;
  std::vector<uint64_t> next;
};

class EtcdStorageTest : public JournalTest {
 protected:
  void SetUp() override {
    JournalTest::SetUp();
    const std::string why = server_.Start(dir_);
    ASSERT_EQ(why, "") << "a single-member etcd is needed for this test";
  }
  void TearDown() override {
    server_.Stop();
    JournalTest::TearDown();
  }

  EtcdOptions Options() const {
    EtcdOptions o;
    o.endpoints = server_.url();
    return o;
  }
  std::unique_ptr<EtcdJournalStorage> Storage(const std::string& job = "job") {
    auto s = EtcdJournalStorage::Create(Options(), job);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<EtcdClient> Client() {
    auto c = EtcdClient::Create(Options());
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // Every record from `position`, and what Read returned.
  static Visited ReadFrom(JournalStorage& s, uint64_t position, uint64_t* end = nullptr,
                          JournalDamage* damage = nullptr) {
    Visited v;
    auto r = s.Read(
        position,
        [&v](std::string_view payload, uint64_t next) {
          v.payloads.emplace_back(payload);
          v.next.push_back(next);
          return true;
        },
        damage);
    EXPECT_TRUE(r.ok()) << r.status();
    if (end != nullptr && r.ok()) *end = *r;
    return v;
  }
  int64_t Count(const std::string& prefix) {
    auto c = Client();
    auto r = c->Range(prefix, EtcdClient::PrefixEnd(prefix), 0, false, /*keys_only=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? static_cast<int64_t>(r->kvs.size()) : -1;
  }

  EtcdServer server_;
};

std::vector<std::string> Records(int n) {
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) out.push_back("{\"t\":\"rec\",\"i\":" + std::to_string(i) + "}");
  return out;
}

// Bytes of every value, so that a piece out of place or a base64 slip changes the record.
std::string BigPayload(size_t bytes) {
  std::string out(bytes, '\0');
  uint32_t x = 12345;
  for (auto& c : out) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 23);
  }
  return out;
}

TEST_F(EtcdStorageTest, AppendedRecordsReadBackInOrder) {
  auto s = Storage();
  EXPECT_EQ(s->name(), "etcd:/elastra/job/journal/");
  EXPECT_EQ(s->Read(
                 0, [](std::string_view, uint64_t) { return true; }, nullptr)
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_EQ(s->Append("x").code(), StatusCode::kFailedPrecondition) << "before CutAfter or Clear";
  ASSERT_TRUE(s->Clear().ok());
  const std::vector<std::string> records = Records(6);
  for (const auto& r : records) ASSERT_TRUE(s->Append(r).ok());
  ASSERT_TRUE(s->Append("").ok()) << "an empty payload is a record too";

  // A second storage (a restarted coordinator) reads what the first acknowledged.
  auto again = Storage();
  uint64_t end = 0;
  JournalDamage damage;
  const Visited v = ReadFrom(*again, 0, &end, &damage);
  std::vector<std::string> want = records;
  want.push_back("");
  EXPECT_EQ(v.payloads, want);
  EXPECT_EQ(v.next, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(end, 7u);
  EXPECT_EQ(damage.why, "");
  EXPECT_EQ(damage.end, 7u);
}

TEST_F(EtcdStorageTest, ReadingStartsAtAPositionAndStopsWhereTheVisitorSays) {
  auto s = Storage();
  ASSERT_TRUE(s->Clear().ok());
  const std::vector<std::string> records = Records(9);  // more than one page of heads
  for (const auto& r : records) ASSERT_TRUE(s->Append(r).ok());
  const Visited v = ReadFrom(*s, 3);
  EXPECT_EQ(v.payloads, std::vector<std::string>(records.begin() + 3, records.end()));
  EXPECT_EQ(v.next.front(), 4u);

  std::vector<std::string> seen;
  auto r = s->Read(
      5,
      [&seen](std::string_view p, uint64_t next) {
        if (next > 7) return false;
        seen.emplace_back(p);
        return true;
      },
      nullptr);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 7u) << "the position of the record refused";
  EXPECT_EQ(seen, (std::vector<std::string>{records[5], records[6]}));
  EXPECT_TRUE(ReadFrom(*s, 9).payloads.empty()) << "from the end: nothing";
}

TEST_F(EtcdStorageTest, ARecordOverEtcdsRequestLimitIsWrittenInPiecesAndReadBackWhole) {
  auto s = Storage();
  ASSERT_TRUE(s->Clear().ok());
  // 3.5 MiB: over etcd's 1.5 MiB limit on one request, in four pieces of at most 1 MiB.
  const std::string big = BigPayload((7u << 20) / 2);
  ASSERT_TRUE(s->Append("small").ok());
  ASSERT_TRUE(s->Append(big).ok());
  ASSERT_TRUE(s->Append("after").ok());
  EXPECT_EQ(Count("/elastra/job/journal/c/"), 3) << "the pieces after the head's";
  const Visited v = ReadFrom(*Storage(), 0);
  ASSERT_EQ(v.payloads.size(), 3u);
  EXPECT_EQ(v.payloads[0], "small");
  EXPECT_TRUE(v.payloads[1] == big)
      << "the big record differs: " << v.payloads[1].size() << " bytes";
  EXPECT_EQ(v.payloads[2], "after");
  // Heads of a full piece each: a page of them (kHeadsPerRead) is one answer of several MiB.
  std::vector<std::string> full;
  for (int i = 0; i < 5; ++i) {
    full.push_back(BigPayload(EtcdJournalStorage::kChunkBytes - i));
    ASSERT_TRUE(s->Append(full.back()).ok());
  }
  const Visited pages = ReadFrom(*s, 3);
  ASSERT_EQ(pages.payloads.size(), 5u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(pages.payloads[i] == full[i]) << "record " << 3 + i;

  EXPECT_EQ(s->Append(BigPayload(EtcdJournalStorage::kMaxRecordBytes + 1)).code(),
            StatusCode::kInvalidArgument);

  // A piece lost is damage at that record; the records before it stand.
  auto c = Client();
  ASSERT_TRUE(c->DeleteRange("/elastra/job/journal/c/00000000000000000001/0002", "").ok());
  uint64_t end = 0;
  JournalDamage damage;
  const Visited cut = ReadFrom(*s, 0, &end, &damage);
  EXPECT_EQ(cut.payloads, std::vector<std::string>{"small"});
  EXPECT_EQ(end, 1u);
  EXPECT_EQ(damage.why, "piece 2 of the record is missing");
  EXPECT_EQ(damage.end, 8u);
}

TEST_F(EtcdStorageTest, CutAfterDropsTheTailKeepingACopyAndClearDropsAll) {
  auto s = Storage();
  ASSERT_TRUE(s->Clear().ok());
  const std::vector<std::string> records = Records(5);
  for (const auto& r : records) ASSERT_TRUE(s->Append(r).ok());
  ASSERT_TRUE(s->Append(BigPayload(1500000)).ok());  // two pieces

  auto reopened = Storage();
  ASSERT_TRUE(reopened->CutAfter(3, /*keep_copy=*/true).ok());
  EXPECT_EQ(ReadFrom(*reopened, 0).payloads,
            std::vector<std::string>(records.begin(), records.begin() + 3));
  EXPECT_EQ(Count("/elastra/job/journal/c/"), 0) << "the cut record's piece goes too";
  EXPECT_EQ(Count("/elastra/job/corrupt/"), 7) << "a copy of every record and piece";
  // A rival opened at the same end (a second coordinator) loses the race for the next number.
  auto rival = Storage();
  ASSERT_TRUE(rival->CutAfter(3, /*keep_copy=*/true).ok());
  // The next record follows the last one kept.
  ASSERT_TRUE(reopened->Append("next").ok());
  const Status stale = rival->Append("stale");
  EXPECT_EQ(stale.code(), StatusCode::kInternal) << stale;
  EXPECT_NE(stale.message().find("another writer"), std::string::npos) << stale;
  const Visited v = ReadFrom(*reopened, 0);
  ASSERT_EQ(v.payloads.size(), 4u);
  EXPECT_EQ(v.payloads[3], "next");
  EXPECT_EQ(v.next[3], 4u);
  // Nothing past the end: no copy.
  ASSERT_TRUE(Storage()->CutAfter(4, /*keep_copy=*/true).ok());
  EXPECT_EQ(Count("/elastra/job/corrupt/"), 7);

  ASSERT_TRUE(reopened->Clear().ok());
  uint64_t end = 99;
  EXPECT_TRUE(ReadFrom(*reopened, 0, &end).payloads.empty());
  EXPECT_EQ(end, 0u) << "an empty journal, not a missing one";
  ASSERT_TRUE(reopened->Append("first").ok());
  EXPECT_EQ(ReadFrom(*Storage(), 0).payloads, std::vector<std::string>{"first"});
}

TEST_F(EtcdStorageTest, TwoJobsDoNotSeeEachOthersRecords) {
  auto a = Storage("job-a");
  auto b = Storage("job-b");
  ASSERT_TRUE(a->Clear().ok());
  ASSERT_TRUE(b->Clear().ok());
  ASSERT_TRUE(a->Append("a0").ok());
  ASSERT_TRUE(b->Append("b0").ok());
  ASSERT_TRUE(a->Append("a1").ok());
  EXPECT_EQ(ReadFrom(*a, 0).payloads, (std::vector<std::string>{"a0", "a1"}));
  EXPECT_EQ(ReadFrom(*b, 0).payloads, std::vector<std::string>{"b0"});
  ASSERT_TRUE(b->Clear().ok());
  EXPECT_EQ(ReadFrom(*a, 0).payloads.size(), 2u) << "b's Clear leaves a alone";
  // A job whose name is the start of another's is its own too.
  auto prefix = Storage("job");
  EXPECT_EQ(prefix
                ->Read(
                    0, [](std::string_view, uint64_t) { return true; }, nullptr)
                .status()
                .code(),
            StatusCode::kNotFound);
  EXPECT_FALSE(EtcdJournalStorage::Create(Options(), "a/b").ok());
  EXPECT_FALSE(EtcdJournalStorage::Create(Options(), "").ok());
}

// The journal's own records, as journal_test's sample writes them.
void WriteJob(Journal& j) {
  auto w = [](const std::string& id) { return JournalWorker{id, "host-" + id, 0, 42}; };
  ASSERT_TRUE(j.RecordJob("mlp", 2, 8).ok());
  ASSERT_TRUE(j.RecordJoin(w("w0")).ok());
  ASSERT_TRUE(j.RecordJoin(w("w1")).ok());
  ASSERT_TRUE(j.RecordChangeBegun(1, ChangeKind::kBuild, {w("w0"), w("w1")}).ok());
  JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout.dp = 2;
  g.members = {w("w0"), w("w1")};
  g.rebuild_ms = 3.5;
  ASSERT_TRUE(j.RecordCommit(g).ok());
  ASSERT_TRUE(j.RecordCheckpoint(20, 1, "/ckpt/step-20").ok());
  ASSERT_TRUE(j.RecordIds({"w2", "w3"}).ok());
  ASSERT_TRUE(j.RecordResize(JournalResize{4, false, Layout{}}).ok());
  ASSERT_TRUE(j.RecordChangeBegun(2, ChangeKind::kPause, {w("w0"), w("w1")}).ok());
}

TEST_F(EtcdStorageTest, TheJournalOverEtcdWritesAndReplaysWhatItDoesOverTheFile) {
  {
    auto file = Journal::Create(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    WriteJob(**file);
  }
  JournalState written;
  {
    auto j = Journal::Create(Storage());
    ASSERT_TRUE(j.ok()) << j.status();
    WriteJob(**j);
    written = (*j)->state();
  }
  // The same payloads, in the same order.
  const std::vector<std::string> file_payloads = Payloads(ReadAll());
  ASSERT_EQ(file_payloads.size(), 9u);
  EXPECT_EQ(ReadFrom(*Storage(), 0).payloads, file_payloads);

  // Replay over etcd gives the state replay of the file gives, and its writer held.
  auto from_file = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto storage = Storage();
  std::vector<std::string> warnings;
  uint64_t position = 0;
  auto from_etcd = Journal::Replay(*storage, &warnings, &position);
  ASSERT_TRUE(from_etcd.ok()) << from_etcd.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(position, 9u);
  for (const JournalState* s : {&*from_file, &written}) {
    EXPECT_EQ(from_etcd->records, s->records);
    EXPECT_EQ(from_etcd->job, s->job);
    EXPECT_EQ(from_etcd->target_workers, s->target_workers);
    EXPECT_EQ(from_etcd->highest_generation, s->highest_generation);
    EXPECT_EQ(from_etcd->seen_ids, s->seen_ids);
    EXPECT_EQ(from_etcd->change_in_flight, s->change_in_flight);
    ASSERT_EQ(from_etcd->checkpoints.size(), s->checkpoints.size());
    EXPECT_EQ(from_etcd->checkpoints[0].dir, s->checkpoints[0].dir);
    ASSERT_NE(from_etcd->current(), nullptr);
    ASSERT_EQ(from_etcd->current()->members.size(), 2u);
    EXPECT_EQ(from_etcd->current()->members[1].id, "w1");
  }

  // Opened again (a restarted coordinator), it appends after its last record.
  {
    auto j = Journal::Open(Storage());
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_TRUE((*j)->warnings().empty());
    EXPECT_EQ((*j)->state().records, 9u);
    ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFinished, "done").ok());
  }
  auto ended = Journal::Replay(*storage, nullptr);
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->records, 10u);
  EXPECT_EQ(Count("/elastra/job/corrupt/"), 0) << "nothing was cut";

  // The job's events (GET /v1/events) read through it, an event's id the record count past it.
  JournalEventReader reader(Storage(), 0);
  const std::vector<JobEvent> events = reader.ReadNew();
  std::vector<std::string> types;
  std::vector<uint64_t> ids;
  for (const JobEvent& e : events) {
    types.push_back(e.type);
    ids.push_back(e.id);
  }
  EXPECT_EQ(types,
            (std::vector<std::string>{"generation", "checkpoint", "resize_accepted", "job_end"}));
  EXPECT_EQ(ids, (std::vector<uint64_t>{5, 6, 8, 10}));
  EXPECT_TRUE(reader.ReadNew().empty()) << "no record since";
}

TEST_F(EtcdStorageTest, TheClientTriesTheNextEndpointAndReportsEtcdsRefusal) {
  // A dead endpoint first: the request goes on to the live one.
  EtcdOptions o = Options();
  o.endpoints = "http://127.0.0.1:1," + server_.url();
  o.connect_timeout = std::chrono::milliseconds(500);
  auto c = EtcdClient::Create(o);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE((*c)->Put("/k", std::string("\0\xff v", 4)).ok());
  auto r = (*c)->Range("/k", "");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->kvs.size(), 1u);
  EXPECT_EQ(r->kvs[0].value, std::string("\0\xff v", 4));
  EXPECT_EQ(r->kvs[0].version, 1);
  EXPECT_GT(r->kvs[0].create_revision, 0) << "int64 fields parsed from the gateway's strings";

  // A compare on the key's revision: the fenced write of a later step is this.
  const int64_t rev = r->kvs[0].mod_revision;
  const EtcdCompare stale{"/k", EtcdCompare::Target::kModRevision, EtcdCompare::Result::kEqual,
                          rev - 1, ""};
  auto refused = (*c)->Txn({stale}, {{EtcdOp::Kind::kPut, "/k", "no", "", 0}}, {});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->succeeded);
  const EtcdCompare current{"/k", EtcdCompare::Target::kModRevision, EtcdCompare::Result::kEqual,
                            rev, ""};
  auto done = (*c)->Txn({current}, {{EtcdOp::Kind::kPut, "/k", "yes", "", 0}}, {});
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(done->succeeded);
  EXPECT_EQ((*c)->Range("/k", "")->kvs[0].value, "yes");
  auto deleted = (*c)->DeleteRange("/k", "");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(*deleted, 1);

  // etcd's refusal comes back kInternal in etcd's words.
  auto twice = (*c)->Txn(
      {}, {{EtcdOp::Kind::kPut, "/k", "1", "", 0}, {EtcdOp::Kind::kPut, "/k", "2", "", 0}}, {});
  EXPECT_EQ(twice.status().code(), StatusCode::kInternal) << twice.status();
  EXPECT_NE(twice.status().message().find("etcdserver: duplicate key given in txn request"),
            std::string::npos)
      << twice.status();

  // One request over etcd's 1.5 MiB limit is refused: why a record is written in pieces, each
  // its own request.
  const Status big = (*c)->Put("/big", std::string(1800000, 'x'));
  EXPECT_EQ(big.code(), StatusCode::kInternal) << big;
  EXPECT_NE(big.message().find("etcdserver: request is too large"), std::string::npos) << big;
}

// A snapshot of the test's kind: the payloads it stands for, each as "<bytes>:<payload>".
std::string SnapshotOf(const std::vector<std::string>& records) {
  std::string out;
  for (const std::string& r : records) out += std::to_string(r.size()) + ":" + r;
  return out;
}

// What a reader replays from 0, as a list of payloads: a snapshot expanded, then the records
// after it.
std::vector<std::string> Replayed(EtcdJournalStorage& s) {
  const StatusOr<uint64_t> compacted = s.Compacted();
  EXPECT_TRUE(compacted.ok()) << compacted.status();
  std::vector<std::string> out;
  bool first = true;
  auto r = s.Read(
      0,
      [&](std::string_view payload, uint64_t next) {
        if (first && compacted.ok() && *compacted > 0) {
          EXPECT_EQ(next, *compacted) << "the snapshot ends where it was taken";
          for (size_t at = 0; at < payload.size();) {
            const size_t colon = payload.find(':', at);
            const size_t bytes = std::stoul(std::string(payload.substr(at, colon - at)));
            out.emplace_back(payload.substr(colon + 1, bytes));
            at = colon + 1 + bytes;
          }
        } else {
          out.emplace_back(payload);
        }
        first = false;
        return true;
      },
      nullptr);
  EXPECT_TRUE(r.ok()) << r.status();
  return out;
}

TEST_F(EtcdStorageTest, CompactionKeepsWhatReplayYieldsAndBoundsTheKeys) {
  auto s = Storage();
  ASSERT_TRUE(s->Clear().ok());
  std::vector<std::string> records;
  // Every 5 records, a snapshot of all so far: the keys stay under 5 heads, their pieces, the
  // snapshot (2 keys once it holds the 1.2 MiB record) and `created`; 20 and more without it.
  for (uint64_t i = 0; i < 20; ++i) {
    records.push_back(i == 7 ? BigPayload(1200 * 1024) : "record " + std::to_string(i));
    ASSERT_TRUE(s->Append(records.back()).ok());
    if ((i + 1) % 5 == 0) {
      const std::vector<std::string> before = Replayed(*Storage());
      ASSERT_TRUE(s->Compact(i + 1, SnapshotOf(records)).ok()) << "at " << i + 1;
      const std::vector<std::string> after = Replayed(*Storage());
      EXPECT_TRUE(after == before) << "replay changed by the snapshot at " << i + 1;
      EXPECT_EQ(*Storage()->Compacted(), i + 1);
    }
    EXPECT_LE(Count("/elastra/job/journal/"), 9) << "after record " << i;
  }
  EXPECT_EQ(Count("/elastra/job/journal/r/"), 0);
  EXPECT_EQ(Count("/elastra/job/journal/snapshot/"), 1) << "the older snapshots' pieces are gone";

  // Records after the snapshot; a reader past it reads them alone, one from before it gets the
  // snapshot first, ending where the snapshot was taken.
  for (const char* r : {"record 20", "record 21", "record 22"}) {
    records.push_back(r);
    ASSERT_TRUE(s->Append(r).ok());
  }
  const Visited tail = ReadFrom(*Storage(), 21);
  EXPECT_EQ(tail.payloads, (std::vector<std::string>{"record 21", "record 22"}));
  EXPECT_EQ(tail.next, (std::vector<uint64_t>{22, 23}));
  const Visited behind = ReadFrom(*Storage(), 3);
  ASSERT_EQ(behind.payloads.size(), 4u);
  EXPECT_EQ(behind.next, (std::vector<uint64_t>{20, 21, 22, 23}));
  EXPECT_TRUE(Replayed(*Storage()) == records);

  // A writer that opens it again appends after the last record.
  auto reopened = Storage();
  uint64_t end = 0;
  JournalDamage damage;
  ReadFrom(*reopened, 0, &end, &damage);
  EXPECT_EQ(end, 23u);
  EXPECT_EQ(damage.end, 23u);
  ASSERT_TRUE(reopened->CutAfter(end, /*keep_copy=*/true).ok());
  ASSERT_TRUE(reopened->Append("record 23").ok());
  EXPECT_EQ(ReadFrom(*Storage(), 23).next, std::vector<uint64_t>{24});
  // Nothing behind the snapshot can be compacted or cut to.
  EXPECT_EQ(reopened->Compact(10, "older").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reopened->Compact(0, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(reopened->CutAfter(12, /*keep_copy=*/false).code(), StatusCode::kInvalidArgument);

  // A snapshot's piece lost is damage before the snapshot; a reader past it reads on.
  auto c = Client();
  ASSERT_TRUE(
      c->DeleteRange("/elastra/job/journal/snapshot/00000000000000000020/0001", "").ok());
  EXPECT_TRUE(ReadFrom(*Storage(), 0, &end, &damage).payloads.empty());
  EXPECT_EQ(end, 0u);
  EXPECT_EQ(damage.why, "snapshot: piece 1 of the record is missing");
  EXPECT_EQ(ReadFrom(*Storage(), 22).payloads,
            (std::vector<std::string>{"record 22", "record 23"}));
  ASSERT_TRUE(reopened->Clear().ok());
  EXPECT_EQ(Count("/elastra/job/journal/"), 1) << "only `created`";
}

// No etcd at all: every endpoint refused, kUnavailable naming each, after the connect attempts
// (no wait for the request timeout). Needs no etcd running.
TEST(EtcdClientTest, AnUnreachableClusterIsUnavailable) {
  EtcdOptions o;
  o.endpoints = "127.0.0.1:1,http://127.0.0.1:9/";
  o.connect_timeout = std::chrono::milliseconds(300);
  o.request_timeout = std::chrono::milliseconds(300);
  auto storage = EtcdJournalStorage::Create(o, "job");
  ASSERT_TRUE(storage.ok()) << storage.status();
  const Status s = (*storage)->Clear();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("http://127.0.0.1:1:"), std::string::npos) << s;
  EXPECT_NE(s.message().find("http://127.0.0.1:9:"), std::string::npos) << s;
  auto read = (*storage)->Read(
      0, [](std::string_view, uint64_t) { return true; }, nullptr);
  EXPECT_EQ(read.status().code(), StatusCode::kUnavailable) << read.status();

  EXPECT_EQ(EtcdClient::Create(EtcdOptions{}).status().code(), StatusCode::kInvalidArgument);
  o.endpoints = "https://127.0.0.1:1";
  EXPECT_EQ(EtcdClient::Create(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(EtcdClientTest, Base64RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    const std::string part = all.substr(0, n);
    auto back = Base64Decode(Base64Encode(part));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, part);
  }
  EXPECT_EQ(Base64Encode("ab"), "YWI=");
  EXPECT_EQ(Base64Encode("abc"), "YWJj");
  EXPECT_EQ(Base64Encode("a"), "YQ==");
  EXPECT_FALSE(Base64Decode("YQ=").ok());
  EXPECT_FALSE(Base64Decode("Y*==").ok());
  EXPECT_EQ(EtcdClient::PrefixEnd("/a/"), "/a0");
}

}  // namespace
}  // namespace elastra::journal
