// The journal over a second JournalStorage, kept in memory and written here: the interface is
// enough for records, replay, a damaged tail cut off (and kept), a failed or oversized append,
// and the job's events. A storage other than the file needs no change to the records.
#include "journal/storage.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "journal/events.h"
#include "journal/journal.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

// The records as a list of payloads; a position is a record's index. A record can be marked
// damaged (as a torn or corrupt one in a file), and appends can be made to fail. The data is
// shared, so that a second storage over it opens the same journal again.
class MemoryJournalStorage : public JournalStorage {
 public:
  struct Record {
    std::string payload;
    bool damaged = false;
  };
  struct Data {
    bool exists = false;
    std::vector<Record> records;
    std::vector<Record> copy;  // what the last CutAfter kept
    int failing_appends = 0;
  };

  explicit MemoryJournalStorage(std::shared_ptr<Data> data, uint64_t max_payload = 1 << 20)
      : data_(std::move(data)), max_payload_(max_payload) {}

  const std::string& name() const override { return name_; }
  uint64_t max_payload_bytes() const override { return max_payload_; }

  StatusOr<uint64_t> Read(uint64_t position, const JournalVisitor& visit,
                          JournalDamage* damage) override {
    if (!data_->exists) return NotFoundError("no journal in memory");
    const uint64_t end = data_->records.size();
    if (damage != nullptr) *damage = JournalDamage{"", end};
    uint64_t at = position;
    for (; at < end; ++at) {
      const Record& r = data_->records[at];
      if (r.damaged) {
        if (damage != nullptr) damage->why = "damaged record";
        break;
      }
      if (!visit(r.payload, at + 1)) break;
    }
    return at;
  }

  Status CutAfter(uint64_t position, bool keep_copy) override {
    data_->exists = true;
    if (data_->records.size() > position) {
      if (keep_copy) data_->copy = data_->records;
      data_->records.resize(position);
    }
    open_ = true;
    return OkStatus();
  }

  Status Clear() override {
    data_->exists = true;
    data_->records.clear();
    open_ = true;
    return OkStatus();
  }

  Status Append(std::string_view payload) override {
    if (!open_) return FailedPreconditionError("not open for appending");
    if (payload.size() > max_payload_) return InvalidArgumentError("over the limit");
    if (data_->failing_appends > 0) {
      --data_->failing_appends;
      return InternalError("the store is away");
    }
    data_->records.push_back(Record{std::string(payload), false});
    return OkStatus();
  }

 private:
  std::shared_ptr<Data> data_;
  uint64_t max_payload_;
  std::string name_ = "memory";
  bool open_ = false;
};

using Data = MemoryJournalStorage::Data;

std::unique_ptr<JournalStorage> Memory(const std::shared_ptr<Data>& data) {
  return std::make_unique<MemoryJournalStorage>(data);
}

JournalWorker Member(const std::string& id) { return JournalWorker{id, "host-" + id, 0, 42}; }

// A job, two joins, a build committed by reference to its begin record, a checkpoint, ids, a
// resize and its end, a host lost, and a pause begun of the committed members.
void WriteJob(Journal& j) {
  ASSERT_TRUE(j.RecordJob("mlp", 2, 8, "tcp://0.0.0.0:0").ok());
  ASSERT_TRUE(j.RecordJoin(Member("w0")).ok());
  ASSERT_TRUE(j.RecordJoin(Member("w1")).ok());
  ASSERT_TRUE(j.RecordChangeBegun(1, ChangeKind::kBuild, {Member("w0"), Member("w1")}).ok());
  JournalGeneration g;
  g.generation = 1;
  g.layout.dp = 2;
  g.members = {Member("w0"), Member("w1")};
  g.rebuild_ms = 3.5;
  ASSERT_TRUE(j.RecordCommit(g).ok());
  ASSERT_TRUE(j.RecordCheckpoint(20, 1, "/ckpt/step-20", 4096, 0.5).ok());
  ASSERT_TRUE(j.RecordIds({"w2", "w3"}).ok());
  ASSERT_TRUE(j.RecordResize(JournalResize{4, false, Layout{}}).ok());
  ASSERT_TRUE(j.RecordResizeEnd(false, 1).ok());
  ASSERT_TRUE(j.RecordHostLost("host-w9", "agent silent", {}).ok());
  ASSERT_TRUE(j.RecordChangeBegunOfCommitted(2, ChangeKind::kPause).ok());
}

constexpr uint64_t kJobRecords = 11;

TEST_F(JournalTest, TheJournalRunsOverAStorageInMemory) {
  auto data = std::make_shared<Data>();
  JournalState written;
  {
    auto j = Journal::Create(Memory(data));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ((*j)->path(), "memory");
    WriteJob(**j);
    written = (*j)->state();
  }
  ASSERT_EQ(data->records.size(), kJobRecords);

  // The same payloads as the file's: the records do not depend on the storage.
  {
    auto file = Journal::Create(path_);
    ASSERT_TRUE(file.ok()) << file.status();
    WriteJob(**file);
  }
  const std::string bytes = ReadAll();
  size_t at = 0;
  for (const auto& r : data->records) {
    ASSERT_LE(at + Journal::kHeaderBytes + r.payload.size(), bytes.size());
    EXPECT_EQ(bytes.substr(at + Journal::kHeaderBytes, r.payload.size()), r.payload);
    at += Journal::kHeaderBytes + r.payload.size();
  }
  EXPECT_EQ(at, bytes.size());

  // Replay reads back the state its writer held.
  MemoryJournalStorage storage(data);
  std::vector<std::string> warnings;
  uint64_t position = 0;
  auto s = Journal::Replay(storage, &warnings, &position);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(position, kJobRecords);
  EXPECT_EQ(s->records, written.records);
  EXPECT_EQ(s->bind, "tcp://0.0.0.0:0");
  ASSERT_NE(s->current(), nullptr);
  ASSERT_EQ(s->current()->members.size(), 2u);
  EXPECT_EQ(s->current()->members[1].id, "w1");
  EXPECT_EQ(s->current()->rebuild_ms, 3.5);
  EXPECT_EQ(s->seen_ids, written.seen_ids);
  ASSERT_EQ(s->checkpoints.size(), 1u);
  EXPECT_EQ(s->checkpoints[0].dir, "/ckpt/step-20");
  EXPECT_EQ(s->target_workers, 4);
  EXPECT_FALSE(s->resize.has_value());
  EXPECT_TRUE(s->change_in_flight);
  EXPECT_EQ(s->ChangeWorkers().size(), 2u);

  // Opened again, it appends after its last record.
  auto j = Journal::Open(Memory(data));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)->state().records, kJobRecords);
  ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFinished, "done").ok());
  EXPECT_EQ(data->records.size(), kJobRecords + 1);
  EXPECT_TRUE(data->copy.empty()) << "nothing was cut";

  // The job's events read through the same interface, an event's id the position past it.
  JournalEventReader reader(Memory(data), 0);
  const std::vector<JobEvent> events = reader.ReadNew();
  std::vector<std::string> types;
  for (const JobEvent& e : events) types.push_back(e.type);
  EXPECT_EQ(types, (std::vector<std::string>{"generation", "checkpoint", "resize_accepted",
                                             "resize_end", "host_lost", "job_end"}));
  EXPECT_EQ(events.front().id, 5u);
  EXPECT_EQ(events.back().id, kJobRecords + 1);
  EXPECT_NE(events[1].data.find("\"bytes\":4096"), std::string::npos) << events[1].data;
  EXPECT_TRUE(reader.ReadNew().empty()) << "no record since";
}

TEST_F(JournalTest, ADamagedTailInAnotherStorageIsCutOffAndKept) {
  auto data = std::make_shared<Data>();
  {
    auto j = Journal::Create(Memory(data));
    ASSERT_TRUE(j.ok());
    WriteJob(**j);
  }
  data->records.back().damaged = true;
  MemoryJournalStorage storage(data);
  std::vector<std::string> warnings;
  auto s = Journal::Replay(storage, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, kJobRecords - 1);
  EXPECT_FALSE(s->change_in_flight) << "the pause was in the damaged record";
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_EQ(warnings[0],
            "journal memory: damaged record at byte 10 of 11; using the 10 record(s) "
            "before it");

  // Open cuts it off, keeping a copy of the whole, and the next record follows the last good one.
  {
    auto j = Journal::Open(Memory(data));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ((*j)->warnings(), warnings);
    EXPECT_EQ(data->records.size(), kJobRecords - 1);
    EXPECT_EQ(data->copy.size(), kJobRecords);
    ASSERT_TRUE((*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kPause).ok());
  }
  warnings.clear();
  s = Journal::Replay(storage, &warnings);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, kJobRecords);
  EXPECT_TRUE(s->change_in_flight);
}

// A payload the storage holds intact but the records refuse (not JSON, or not a record that fits
// the state) stops replay as a damaged one does.
TEST_F(JournalTest, ARecordTheRecordsRefuseStopsReplayInAnotherStorage) {
  struct Case {
    std::string payload;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"{not json", "record is not JSON"},
      {R"({"t":"party"})", "inconsistent record (unknown record type 'party')"},
      {R"({"t":"job","version":1,"job":"j","initial_workers":1,"max_workers":2})",
       "inconsistent record (a second job record)"},
  };
  for (const Case& c : cases) {
    auto data = std::make_shared<Data>();
    {
      auto j = Journal::Create(Memory(data));
      ASSERT_TRUE(j.ok());
      ASSERT_TRUE((*j)->RecordJob("mlp", 1, 2).ok());
      ASSERT_TRUE((*j)->RecordJoin(W("w0")).ok());
    }
    data->records.push_back({c.payload, false});
    data->records.push_back({R"({"t":"target","workers":2})", false});
    auto j = Journal::Open(Memory(data));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ((*j)->state().records, 2u) << c.payload;
    ASSERT_EQ((*j)->warnings().size(), 1u) << c.payload;
    EXPECT_EQ((*j)->warnings()[0],
              "journal memory: " + c.why + " at byte 2 of 4; using the 2 record(s) before it");
    EXPECT_EQ(data->records.size(), 2u) << "cut after the consistent prefix";
    EXPECT_EQ(data->copy.size(), 4u);
  }
}

TEST_F(JournalTest, AFailedOrOversizedAppendToAnotherStorageChangesNothing) {
  auto data = std::make_shared<Data>();
  auto j = Journal::Create(std::make_unique<MemoryJournalStorage>(data, 200));
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE((*j)->RecordJob("mlp", 1, 4).ok());
  data->failing_appends = 1;
  const Status failed = (*j)->RecordJoin(W("w0"));
  EXPECT_EQ(failed.code(), StatusCode::kInternal) << failed;
  EXPECT_EQ((*j)->state().records, 1u);
  EXPECT_TRUE((*j)->state().standby.empty());
  EXPECT_EQ(data->records.size(), 1u);

  std::vector<std::string> many;
  for (int i = 0; i < 40; ++i) many.push_back("worker-" + std::to_string(i));
  const Status big = (*j)->RecordIds(many);
  EXPECT_EQ(big.code(), StatusCode::kInvalidArgument) << big;
  EXPECT_NE(big.message().find("over the limit"), std::string::npos) << big;
  EXPECT_EQ(data->records.size(), 1u);
  EXPECT_TRUE((*j)->state().seen_ids.empty());

  ASSERT_TRUE((*j)->RecordJoin(W("w0")).ok());
  EXPECT_EQ(data->records.size(), 2u);
  EXPECT_EQ((*j)->state().standby.size(), 1u);
}

TEST_F(JournalTest, AMissingJournalInAnotherStorageIsNotFoundAndOpenCreatesIt) {
  auto data = std::make_shared<Data>();
  MemoryJournalStorage storage(data);
  EXPECT_EQ(Journal::Replay(storage, nullptr).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(JournalEventReader(Memory(data), 0).ReadNew().empty());
  auto j = Journal::Open(Memory(data));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_TRUE((*j)->state().empty());
  EXPECT_TRUE(data->exists);
  ASSERT_TRUE((*j)->RecordJob("mlp", 1, 4).ok());
  EXPECT_EQ(data->records.size(), 1u);
}

}  // namespace
}  // namespace elastra::journal
