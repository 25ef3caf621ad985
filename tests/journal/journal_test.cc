// The coordinator's journal: round trips, a torn tail, corrupt bytes, faults through the Env, and
// records that never crash the replay.
#include "journal/journal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "protocol/codec.h"
#include "tests/journal/test_util.h"
#include "tests/fuzz/memory_env.h"

namespace elastra::journal {
namespace {

namespace fs = std::filesystem;

TEST_F(JournalTest, Crc32cKnownValue) {
  // The standard check value of CRC-32C.
  EXPECT_EQ(Journal::Crc32c("123456789", 9), 0xE3069283u);
}

TEST_F(JournalTest, RoundTrip) {
  WriteSample();
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->job, "mlp");
  EXPECT_EQ(s->initial_workers, 2);
  EXPECT_EQ(s->max_workers, 8);
  EXPECT_EQ(s->records, 9u);
  ASSERT_EQ(s->history.size(), 1u);
  EXPECT_EQ(s->current()->generation, 1u);
  EXPECT_EQ(s->current()->layout.dp, 2);
  ASSERT_EQ(s->current()->members.size(), 2u);
  EXPECT_EQ(s->current()->members[1].id, "w1");
  EXPECT_EQ(s->current()->members[1].host, "host-w1");
  EXPECT_EQ(s->current()->members[1].pid, 42);
  EXPECT_DOUBLE_EQ(s->current()->rebuild_ms, 3.5);
  EXPECT_TRUE(s->standby.empty());  // both joined workers became members
  ASSERT_EQ(s->checkpoints.size(), 1u);
  EXPECT_EQ(s->checkpoints[0].step, 20);
  EXPECT_EQ(s->checkpoints[0].dir, "/ckpt/step-20");
  EXPECT_TRUE(s->seen_ids.count("w3"));
  ASSERT_TRUE(s->resize.has_value());
  EXPECT_EQ(s->resize->workers, 4);
  EXPECT_TRUE(s->change_in_flight);
  EXPECT_EQ(s->change_target, 2u);
  EXPECT_EQ(s->change_kind, ChangeKind::kPause);
  EXPECT_EQ(s->highest_generation, 2u);

  // Open replays the same and appends after it.
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ((*j)->state().records, 9u);
    JournalGeneration g;
    g.generation = 2;
    g.reason = proto::GenerationReason::kResize;
    g.layout.dp = 1;
    g.members = {W("w0")};
    ASSERT_TRUE((*j)->RecordCommit(g).ok());
    ASSERT_TRUE((*j)->RecordWorkerState("w0", JournalWorkerState::kFinished).ok());
    ASSERT_TRUE((*j)->RecordResizeEnd(true, 2).ok());
    ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFinished, "every member finished").ok());
  }
  s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(warnings.empty());
  EXPECT_FALSE(s->change_in_flight);
  EXPECT_EQ(s->current()->generation, 2u);
  EXPECT_EQ(s->worker_states.at("w0"), JournalWorkerState::kFinished);
  EXPECT_FALSE(s->resize.has_value());
  EXPECT_EQ(s->ended, JobOutcome::kFinished);
}

// The state the workers registered comes back after a restart: the coordinator plans state moves
// with it, and the workers do not join again.
TEST_F(JournalTest, TheRegisteredStateIsReplayed) {
  StateSpec spec;
  spec.num_layers = 2;
  spec.tensors = {TensorSpec{"w", {8, 16}, 2, {1, 0, true}}, TensorSpec{"b", {16}, 4, {}}};
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("job", 2, 4).ok());
    ASSERT_TRUE((*j)->RecordState(spec).ok());
  }
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j.ok()) << j.status();
  const StateSpec& back = (*j)->state().state;
  EXPECT_EQ(back.num_layers, 2);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_EQ(back.tensors[0].name, "w");
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(back.tensors[0].element_size, 2u);
  EXPECT_TRUE(back.tensors[0].rule.zero);
  EXPECT_EQ(back.tensors[0].rule.layer, 0);
  EXPECT_EQ(back.tensors[1].element_size, 4u);
}

TEST_F(JournalTest, RefusesInconsistentRecordsWithoutWriting) {
  auto j = Journal::Create(path_);
  ASSERT_TRUE(j.ok());
  // Nothing before the job record.
  EXPECT_FALSE((*j)->RecordJoin(W("w0")).ok());
  EXPECT_EQ(FileSize(), 0u);
  ASSERT_TRUE((*j)->RecordJob("mlp", 1, 1).ok());
  const uint64_t size = FileSize();
  JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout.dp = 3;  // three ranks, one member
  g.members = {W("w0")};
  EXPECT_FALSE((*j)->RecordCommit(g).ok());
  // A value outside the enum has no name the journal could read back.
  EXPECT_FALSE((*j)->RecordWorkerState("w0", static_cast<JournalWorkerState>(7)).ok());
  EXPECT_EQ(FileSize(), size);
  EXPECT_EQ((*j)->state().records, 1u);
}

TEST_F(JournalTest, TornTailIsIgnoredWithAWarningAndCutOff) {
  WriteSample();
  const std::string full = ReadAll();
  auto whole = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(whole.ok());
  // Every cut inside the last record (header or payload) leaves the 8 records before it.
  uint64_t last_start = 0;
  {
    std::string bytes = full;
    WriteAll(bytes.substr(0, bytes.size() - 1));
    uint64_t good = 0;
    auto s = Journal::Replay(path_, nullptr, &good);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->records, 8u);
    last_start = good;
  }
  for (uint64_t cut = last_start + 1; cut < full.size(); cut += 3) {
    WriteAll(full.substr(0, cut));
    std::vector<std::string> warnings;
    auto s = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(s.ok()) << cut;
    EXPECT_EQ(s->records, 8u) << cut;
    ASSERT_EQ(warnings.size(), 1u) << cut;
    EXPECT_NE(warnings[0].find("torn"), std::string::npos) << warnings[0];
    EXPECT_FALSE(s->change_in_flight && s->change_target == 2) << cut;
  }
  // Open cuts the torn bytes off; the next record follows the last good one.
  WriteAll(full.substr(0, full.size() - 5));
  {
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j.ok());
    EXPECT_EQ(FileSize(), last_start);
    ASSERT_TRUE((*j)->RecordCheckpoint(30, 1, "/ckpt/step-30").ok());
  }
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, 9u);
  EXPECT_EQ(s->checkpoints.back().step, 30);
}

TEST_F(JournalTest, CorruptByteStopsReplayAtTheLastConsistentRecord) {
  WriteSample();
  std::string bytes = ReadAll();
  uint64_t good = 0;
  // Find where record 4 (the begin of generation 1) starts by cutting after 3 records.
  {
    auto j = Journal::Create(dir_ + "/probe.bin");
    ASSERT_TRUE((*j)->RecordJob("mlp", 2, 8).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("w0")).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("w1")).ok());
    good = fs::file_size(dir_ + "/probe.bin");
  }
  bytes[good + Journal::kHeaderBytes + 5] ^= 0x40;  // inside record 4's payload
  WriteAll(bytes);
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->records, 3u);
  EXPECT_TRUE(s->history.empty());
  EXPECT_EQ(s->standby.size(), 2u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checksum"), std::string::npos) << warnings[0];
  // Open keeps a copy of the damaged file and cuts it back.
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(FileSize(), good);
  EXPECT_TRUE(fs::exists(path_ + ".corrupt"));
  EXPECT_EQ(fs::file_size(path_ + ".corrupt"), bytes.size());
}

TEST_F(JournalTest, BadHeadersAndRecordsNeverCrash) {
  const std::string job = Framed(R"({"t":"job","version":1,"job":"j","initial_workers":1,)"
                                 R"("max_workers":2})");
  struct Case {
    std::string name;
    std::string bytes;
    uint64_t records;
  };
  std::string huge_len = Framed("{}");
  huge_len[4] = huge_len[5] = huge_len[6] = huge_len[7] = '\xFF';
  std::string bad_magic = Framed("{}");
  bad_magic[0] = 'X';
  const std::vector<Case> cases = {
      {"empty", "", 0},
      {"short header", "EJR", 0},
      {"huge length", job + huge_len, 1},
      {"bad magic", job + bad_magic, 1},
      {"not json", job + Framed("{not json"), 1},
      {"not an object", job + Framed("[1,2]"), 1},
      {"unknown type", job + Framed(R"({"t":"party"})"), 1},
      {"wrong field type", job + Framed(R"({"t":"checkpoint","step":"x","generation":1,"dir":""})"),
       1},
      {"negative step", job + Framed(R"({"t":"checkpoint","step":-1,"generation":1,"dir":""})"), 1},
      {"commit going back",
       job +
           Framed(R"({"t":"commit","generation":2,"reason":"resize","layout":{"dp":1,"pp":1,"tp":1},)"
                  R"("members":[{"id":"a","host":"h","device":0,"pid":1}],"downtime_ms":0,)"
                  R"("agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})") +
           Framed(R"({"t":"commit","generation":1,"reason":"resize","layout":{"dp":1,"pp":1,"tp":1},)"
                  R"("members":[{"id":"a","host":"h","device":0,"pid":1}],"downtime_ms":0,)"
                  R"("agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})"),
       2},
      {"unknown reason",
       job + Framed(R"({"t":"commit","generation":1,"reason":"growth","layout":{"dp":1,"pp":1,)"
                    R"("tp":1},"members":[{"id":"a","host":"h","device":0,"pid":1}],)"
                    R"("downtime_ms":0,"agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})"),
       1},
      {"world past int",
       job + Framed(R"({"t":"commit","generation":1,"reason":"start","layout":{"dp":65536,"pp":)"
                    R"(65536,"tp":1},"members":[{"id":"a","host":"h","device":0,"pid":1}],)"
                    R"("downtime_ms":0,"agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})"),
       1},
      {"no job first", Framed(R"({"t":"resize_end"})"), 0},
      {"second job", job + job, 1},
      {"unknown version",
       Framed(R"({"t":"job","version":9,"job":"j","initial_workers":1,)"
              R"("max_workers":2})"),
       0},
  };
  for (const auto& c : cases) {
    WriteAll(c.bytes);
    std::vector<std::string> warnings;
    auto s = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.status();
    EXPECT_EQ(s->records, c.records) << c.name;
    EXPECT_EQ(warnings.empty(), c.bytes.empty()) << c.name;
  }
}

TEST_F(JournalTest, UnknownNamesAreRefusedOnReplayWithTheName) {
  const std::string job = Framed(R"({"t":"job","version":1,"job":"j","initial_workers":1,)"
                                 R"("max_workers":2})");
  const std::string join = Framed(R"({"t":"join","worker":{"id":"a","host":"h","device":0,)"
                                  R"("pid":1}})");
  struct Case {
    std::string record;
    std::string warning;
  };
  const std::vector<Case> cases = {
      {R"({"t":"worker","id":"a","state":"retired"})", "unknown worker state 'retired'"},
      {R"({"t":"begin","target":1,"kind":"grow","workers":[]})", "unknown change kind 'grow'"},
      {R"({"t":"end","outcome":"done","reason":"x"})", "unknown outcome 'done'"},
  };
  for (const auto& c : cases) {
    WriteAll(job + join + Framed(c.record));
    std::vector<std::string> warnings;
    auto s = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->records, 2u) << c.record;
    ASSERT_EQ(warnings.size(), 1u) << c.record;
    EXPECT_NE(warnings[0].find(c.warning), std::string::npos) << warnings[0];
  }
  // The names the journal writes read back as the same enums.
  for (auto st : {JournalWorkerState::kFinished, JournalWorkerState::kLost,
                  JournalWorkerState::kRemoved}) {
    JournalWorkerState back{};
    ASSERT_TRUE(FromString(ToString(st), &back));
    EXPECT_EQ(back, st);
  }
  for (auto k : {ChangeKind::kPause, ChangeKind::kRecover, ChangeKind::kBuild}) {
    ChangeKind back{};
    ASSERT_TRUE(FromString(ToString(k), &back));
    EXPECT_EQ(back, k);
  }
  JobOutcome outcome{};
  EXPECT_TRUE(FromString("failed", &outcome));
  EXPECT_EQ(outcome, JobOutcome::kFailed);
  EXPECT_FALSE(FromString("Failed", &outcome));
}

TEST_F(JournalTest, AFailedAppendLeavesNothingAndTheNextRecordFollowsTheLastGoodOne) {
  FaultInjectionEnv env(Env::Default());
  auto j = Journal::Open(path_, &env);
  ASSERT_TRUE(j.ok()) << j.status();
  Journal& journal = **j;
  ASSERT_TRUE(journal.RecordJob("mlp", 1, 4).ok());
  ASSERT_TRUE(journal.RecordJoin(W("w0")).ok());
  const uint64_t size = FileSize();

  env.FailNthWrite(1);  // an I/O error: nothing is written
  Status failed = journal.RecordJoin(W("w1"));
  EXPECT_EQ(failed.code(), StatusCode::kInternal) << failed;
  EXPECT_EQ(journal.state().records, 2u);
  EXPECT_EQ(FileSize(), size);

  env.SetDiskSpace(5);  // a full disk: the first 5 bytes of the record land, then ENOSPC
  Status full = journal.RecordJoin(W("w1"));
  EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full;
  EXPECT_EQ(journal.state().records, 2u);
  EXPECT_EQ(FileSize(), size) << "a torn record was left for the next append to follow";

  env.Reset();
  ASSERT_TRUE(journal.RecordJoin(W("w2")).ok());
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty()) << warnings[0];
  EXPECT_EQ(s->records, 3u);
  ASSERT_EQ(s->standby.size(), 2u);
  EXPECT_EQ(s->standby[1].id, "w2");
}

TEST_F(JournalTest, EveryRecordSurvivesAPowerCut) {
  FaultInjectionEnv env(Env::Default());
  {
    auto j = Journal::Open(path_, &env);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("mlp", 1, 4).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("w0")).ok());
    ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFailed, "gone").ok());
  }
  // Drops unsynced data, and the file itself if its directory entry was never synced.
  ASSERT_TRUE(env.SimulatePowerLoss().ok());
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, 3u);
  EXPECT_EQ(s->ended, JobOutcome::kFailed);
}

TEST_F(JournalTest, RandomDamageNeverCrashes) {
  WriteSample();
  const std::string good = ReadAll();
  std::mt19937 rng(7);
  for (int i = 0; i < 400; ++i) {
    std::string bytes = good;
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < flips; ++k) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (i % 3 == 0) bytes.resize(rng() % bytes.size());
    if (i % 5 == 0) {  // pure noise
      bytes.resize(rng() % 4096);
      for (auto& b : bytes) b = static_cast<char>(rng());
    }
    WriteAll(bytes);
    auto s = Journal::Replay(path_, nullptr);
    ASSERT_TRUE(s.ok()) << i;
    EXPECT_LE(s->records, 9u);
    auto j = Journal::Open(path_);
    ASSERT_TRUE(j.ok()) << i;
  }
}

// The spares: the job record's, then each target record's that names them.
TEST_F(JournalTest, TheSparesSurviveReplay) {
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->RecordJob("mlp", 2, 8, "", /*spares=*/1).ok());
    EXPECT_EQ((*j)->state().spares, 1);
    ASSERT_TRUE((*j)->RecordTarget(2, 3).ok());  // a resize that named spares
    ASSERT_TRUE((*j)->RecordTarget(4).ok());     // a target change that leaves them
    EXPECT_FALSE((*j)->RecordTarget(4, -2).ok());
  }
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->spares, 3);
  EXPECT_EQ(s->target_workers, 4);
  WriteAll(Framed(R"({"t":"job","version":1,"job":"j","initial_workers":4,"max_workers":8})") +
           Framed(R"({"t":"target","workers":4,"spares":-1})"));
  std::vector<std::string> warnings;
  auto bad = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->records, 1u) << "spares below 0 stop replay";
  EXPECT_FALSE(warnings.empty());
}

TEST_F(JournalTest, TheTargetAndTheBindAddressSurviveReplay) {
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->RecordJob("mlp", 2, 8, "tcp://0.0.0.0:0").ok());
    EXPECT_EQ((*j)->state().target_workers, 2);
    ASSERT_TRUE((*j)->RecordResize(JournalResize{5, false, Layout{}}).ok());
    EXPECT_EQ((*j)->state().target_workers, 5);
    ASSERT_TRUE((*j)->RecordResizeEnd(true, 2).ok());
    ASSERT_TRUE((*j)->RecordTarget(3).ok());  // a drain no other host could take
  }
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->bind, "tcp://0.0.0.0:0");
  EXPECT_EQ(s->target_workers, 3);
  // A journal from before these fields: no bind, the target is the start size.
  WriteAll(Framed(R"({"t":"job","version":1,"job":"j","initial_workers":4,"max_workers":8})"));
  auto old = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->records, 1u);
  EXPECT_EQ(old->bind, "");
  EXPECT_EQ(old->target_workers, 4);
  EXPECT_EQ(old->spares, 0);
  // A target out of range stops replay there, like any bad record.
  WriteAll(Framed(R"({"t":"job","version":1,"job":"j","initial_workers":4,"max_workers":8})") +
           Framed(R"({"t":"target","workers":0})"));
  std::vector<std::string> warnings;
  auto bad = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->records, 1u);
  EXPECT_EQ(warnings.size(), 1u);
}

// A job of 10,000 workers: their joins and state changes are applied in place, a generation of all
// of them is journaled (more than the 4,096 a record once held) and replays the same. In memory
// (fuzz::MemoryEnv, whose Sync does nothing): 10,000 fsyncs took from 6 s to past the test's 30 s
// with the disk, by how busy the machine was; the file's own syncs are tested above.
TEST_F(JournalTest, TenThousandWorkersJoinCommitAndReplay) {
  constexpr int kN = 10000;
  fuzz::MemoryEnv env;
  JournalGeneration g;
  {
    auto j = Journal::Create(path_, &env);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->RecordJob("big", kN, kN).ok());
    for (int i = 0; i < kN; ++i) ASSERT_TRUE((*j)->RecordJoin(W("w" + std::to_string(i))).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("w7")).ok());  // a retried join: still one standby entry
    EXPECT_EQ((*j)->state().standby.size(), static_cast<size_t>(kN));
    g.generation = 1;
    g.reason = proto::GenerationReason::kStart;
    g.layout.dp = kN;
    g.members = (*j)->state().standby;
    ASSERT_TRUE((*j)->RecordCommit(g).ok());
    EXPECT_TRUE((*j)->state().standby.empty());
    ASSERT_TRUE((*j)->RecordWorkerState("w5", JournalWorkerState::kLost).ok());
    // A refused worker record changes nothing.
    EXPECT_FALSE((*j)->RecordWorkerState("w6", static_cast<JournalWorkerState>(9)).ok());
    EXPECT_EQ((*j)->state().records, static_cast<uint64_t>(kN + 4));
  }
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings, nullptr, &env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, static_cast<uint64_t>(kN + 4));
  ASSERT_NE(s->current(), nullptr);
  EXPECT_EQ(s->current()->members.size(), static_cast<size_t>(kN));
  EXPECT_EQ(s->worker_states.at("w5"), JournalWorkerState::kLost);
  EXPECT_EQ(s->worker_states.count("w6"), 0u);
  EXPECT_EQ(s->seen_ids.size(), static_cast<size_t>(kN));
}

// A begin or commit record is written from typed values, a string that needs escaping (or is not
// UTF-8) as the JSON library writes it; it replays to the state its writer held, and the typed
// path refuses what replay would refuse. A timing that is not a number is written as not known
// (-1).
TEST_F(JournalTest, ChangeRecordsReplayWhicheverWayTheyWereWritten) {
  const std::string odd = std::string("w\"q\\") + '\x01' + "\xff";  // quote, backslash, bytes
  auto j = Journal::Create(path_);
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE((*j)->RecordJob("job", 2, 2).ok());
  JournalWorker plain = W("w0");
  plain.device = 3;
  plain.pid = 77;
  JournalWorker escaped = W(odd);
  ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kBuild, {plain, escaped}).ok());
  JournalGeneration g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.layout.dp = 1;
  g.members = {plain};
  g.downtime_ms = 12.25;
  g.rebuild_ms = 1.0 / 3;
  g.reached_step = 9;
  g.restore_step = 5;
  ASSERT_TRUE((*j)->RecordCommit(g).ok());  // typed text
  g.generation = 2;
  g.layout.dp = 2;
  g.members = {plain, escaped};
  ASSERT_TRUE((*j)->RecordCommit(g).ok());  // an id escaped by the JSON library
  g.generation = 3;
  g.members = {plain, W("w1")};
  g.transfer_ms = std::nan("");
  ASSERT_TRUE((*j)->RecordCommit(g).ok());
  // Refused as replay would refuse them, and nothing written.
  const uint64_t size = FileSize();
  JournalGeneration bad = g;
  bad.transfer_ms = 0;
  bad.generation = 3;  // not after 3
  EXPECT_FALSE((*j)->RecordCommit(bad).ok());
  bad.generation = 4;
  bad.layout.dp = 3;  // 3 ranks, 2 members
  EXPECT_FALSE((*j)->RecordCommit(bad).ok());
  bad.layout.dp = 2;
  bad.members[1].pid = -1;
  EXPECT_FALSE((*j)->RecordCommit(bad).ok());
  bad.members[1] = W("");
  EXPECT_FALSE((*j)->RecordCommit(bad).ok());
  EXPECT_FALSE((*j)->RecordChangeBegun(0, ChangeKind::kBuild, {plain}).ok());
  EXPECT_FALSE((*j)->RecordChangeBegun(5, static_cast<ChangeKind>(9), {plain}).ok());
  EXPECT_EQ(FileSize(), size);
  const JournalState written = (*j)->state();

  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, written.records);
  ASSERT_EQ(s->history.size(), 3u);
  ASSERT_EQ(written.history.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const JournalGeneration &a = s->history[i], &b = written.history[i];
    EXPECT_EQ(a.generation, b.generation);
    ASSERT_EQ(a.members.size(), b.members.size());
    for (size_t m = 0; m < a.members.size(); ++m) {
      EXPECT_EQ(a.members[m].id, b.members[m].id) << i;
      EXPECT_EQ(a.members[m].host, b.members[m].host);
      EXPECT_EQ(a.members[m].device, b.members[m].device);
      EXPECT_EQ(a.members[m].pid, b.members[m].pid);
    }
    EXPECT_EQ(a.downtime_ms, b.downtime_ms);  // exactly: 17 digits round-trip
    EXPECT_EQ(a.rebuild_ms, b.rebuild_ms);
    EXPECT_EQ(a.reached_step, b.reached_step);
  }
  EXPECT_EQ(s->history[0].members[0].device, 3);
  EXPECT_EQ(s->history[0].members[0].pid, 77);
  EXPECT_EQ(s->history[0].rebuild_ms, 1.0 / 3);
  EXPECT_EQ(s->history[2].transfer_ms, -1);
  // The id that is not UTF-8 comes back as the JSON library wrote it, in both states alike.
  EXPECT_NE(s->history[1].members[1].id, odd);
  EXPECT_EQ(s->seen_ids, written.seen_ids);
  EXPECT_FALSE(s->change_in_flight);
}

TEST_F(JournalTest, MissingFileIsNotFound) {
  auto s = Journal::Replay(dir_ + "/nothing.bin", nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace elastra::journal
