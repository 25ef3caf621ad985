// The coordinator's journal: round trips, a torn tail, corrupt bytes, and a CoordinatorCore that
// takes a job back from it (mid-run and mid-reconfiguration), driven with a FakeClock.
#include "coordinator/journal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "common/codec.h"
#include "coordinator/coordinator_core.h"

namespace elastra::coordinator {
namespace {

namespace fs = std::filesystem;
using T = proto::MessageType;

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/journal.bin";
  }
  void TearDown() override { fs::remove_all(dir_); }

  static JournalWorker W(const std::string& id) { return JournalWorker{id, "host-" + id, 0, 42}; }

  // A journal with a job, two joins, a committed generation, a checkpoint and a finished worker.
  void WriteSample() {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    Journal& journal = **j;
    ASSERT_TRUE(journal.RecordJob("mlp", 2, 8).ok());
    ASSERT_TRUE(journal.RecordJoin(W("w0")).ok());
    ASSERT_TRUE(journal.RecordJoin(W("w1")).ok());
    ASSERT_TRUE(journal.RecordChangeBegun(1, ChangeKind::kBuild, {W("w0"), W("w1")}).ok());
    JournalGeneration g;
    g.generation = 1;
    g.reason = proto::GenerationReason::kStart;
    g.layout.dp = 2;
    g.members = {W("w0"), W("w1")};
    g.rebuild_ms = 3.5;
    ASSERT_TRUE(journal.RecordCommit(g).ok());
    ASSERT_TRUE(journal.RecordCheckpoint(20, 1, "/ckpt/step-20").ok());
    ASSERT_TRUE(journal.RecordIds({"w2", "w3"}).ok());
    ASSERT_TRUE(journal.RecordResize(JournalResize{4, false, Layout{}}).ok());
    ASSERT_TRUE(journal.RecordChangeBegun(2, ChangeKind::kPause, {W("w0"), W("w1")}).ok());
  }

  uint64_t FileSize() { return fs::file_size(path_); }
  std::string ReadAll() {
    std::ifstream in(path_, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void WriteAll(const std::string& bytes) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  // A framed record with a correct checksum around any payload.
  static std::string Framed(const std::string& payload) {
    std::string h(Journal::kHeaderBytes, '\0');
    auto put = [&](size_t at, uint32_t v) {
      for (int i = 0; i < 4; ++i) h[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    };
    put(0, Journal::kMagic);
    put(4, static_cast<uint32_t>(payload.size()));
    put(8, Journal::Crc32c(payload.data(), payload.size()));
    return h + payload;
  }

  std::string dir_;
  std::string path_;
};

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
    ASSERT_TRUE((*j)->RecordResizeEnd().ok());
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
  checkpoint::FaultInjectionEnv env(checkpoint::Env::Default());
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
  checkpoint::FaultInjectionEnv env(checkpoint::Env::Default());
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

TEST_F(JournalTest, TheTargetAndTheBindAddressSurviveReplay) {
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok());
    ASSERT_TRUE((*j)->RecordJob("mlp", 2, 8, "tcp://0.0.0.0:0").ok());
    EXPECT_EQ((*j)->state().target_workers, 2);
    ASSERT_TRUE((*j)->RecordResize(JournalResize{5, false, Layout{}}).ok());
    EXPECT_EQ((*j)->state().target_workers, 5);
    ASSERT_TRUE((*j)->RecordResizeEnd().ok());
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
  // A target out of range stops replay there, like any bad record.
  WriteAll(Framed(R"({"t":"job","version":1,"job":"j","initial_workers":4,"max_workers":8})") +
           Framed(R"({"t":"target","workers":0})"));
  std::vector<std::string> warnings;
  auto bad = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->records, 1u);
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(JournalTest, MissingFileIsNotFound) {
  auto s = Journal::Replay(dir_ + "/nothing.bin", nullptr);
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
}

// ---- A CoordinatorCore that takes a job back from its journal. ----

class RestartTest : public JournalTest {
 protected:
  std::unique_ptr<CoordinatorCore> NewCore(int initial_workers,
                                           checkpoint::Env* env = checkpoint::Env::Default()) {
    CoordinatorOptions o;
    o.env = env;
    o.job = "job";
    o.initial_workers = initial_workers;
    o.max_workers = 8;
    o.heartbeat_interval = Duration(200);
    o.heartbeat_timeout = Duration(1500);
    o.clock = &clock_;
    o.state_dir = dir_;
    auto core = std::make_unique<CoordinatorCore>(o);
    EXPECT_TRUE(core->journal_status().ok()) << core->journal_status();
    return core;
  }

  template <class P>
  std::vector<proto::Envelope> Send(CoordinatorCore& core, const std::string& sender,
                                    proto::Role role, T type, const P& payload,
                                    uint64_t rid = 0, const std::string& identity_suffix = "") {
    proto::Envelope e;
    e.type = type;
    e.job = "job";
    e.sender = sender;
    e.request_id = rid;
    e.payload = proto::EncodePayload(payload);
    return Decode(core.Handle("id-" + sender + identity_suffix, role, e));
  }
  static std::vector<proto::Envelope> Decode(const std::vector<Outgoing>& out) {
    std::vector<proto::Envelope> v;
    for (const auto& o : out) {
      auto e = proto::DecodeEnvelope(o.frame);
      if (e.ok()) v.push_back(*e);
    }
    return v;
  }
  static std::vector<proto::Envelope> OfType(const std::vector<proto::Envelope>& v, T type) {
    std::vector<proto::Envelope> out;
    for (const auto& e : v) {
      if (e.type == type) out.push_back(e);
    }
    return out;
  }

  // Two workers join and generation 1 commits.
  void StartTwo(CoordinatorCore& core) {
    for (const std::string id : {"w0", "w1"}) {
      Send(core, id, proto::Role::kWorker, T::kJoin, proto::JoinRequest{id, "host-" + id, 0, 100}, 1);
    }
    for (const std::string id : {"w0", "w1"}) {
      Send(core, id, proto::Role::kWorker, T::kGenerationReady, proto::GenerationReady{1, 1.0, 0.0, 0});
    }
    ASSERT_EQ(core.state(), proto::JobState::kRunning);
    ASSERT_EQ(core.generation(), 1u);
  }

  FakeClock clock_;
};

// A journal that cannot be written (a full disk) is logged; the job itself goes on.
TEST_F(RestartTest, AJournalThatCannotBeWrittenDoesNotStopTheJob) {
  checkpoint::FaultInjectionEnv env(checkpoint::Env::Default());
  auto core = NewCore(2, &env);
  env.SetDiskSpace(0);
  StartTwo(*core);
  EXPECT_EQ(env.writes(), 5) << "the job record, then join, join, begin, commit: each tried once";
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->records, 1u);  // the job record written before the disk filled
  // A resize still runs: the workers are asked to pause.
  auto paused = Send(*core, "admin", proto::Role::kAdmin, T::kResize,
                     proto::ResizeRequest{1, false, {}, false}, 2);
  EXPECT_EQ(OfType(paused, T::kPauseRequest).size(), 2u);
  EXPECT_EQ(core->state(), proto::JobState::kPausing);
}

TEST_F(RestartTest, TakesBackARunningJobAndWorkersSimplyContinue) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{5});
  }
  auto core = NewCore(2);  // the restart: a new core on the same state directory
  EXPECT_TRUE(core->restored());
  EXPECT_EQ(core->generation(), 1u);
  EXPECT_EQ(core->state(), proto::JobState::kRunning);
  EXPECT_EQ(core->membership().Members(), (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(core->membership().Find("w1")->host, "host-w1");
  ASSERT_EQ(core->history().size(), 1u);
  EXPECT_EQ(core->layout().dp, 2);
  // Heartbeats refresh the deadlines and are acknowledged; no recovery, no other message.
  clock_.Advance(Duration(1000));
  for (const std::string id : {"w0", "w1"}) {
    auto out = Send(*core, id, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{7});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].type, T::kHeartbeatAck);
    EXPECT_EQ(proto::DecodePayload<proto::HeartbeatAck>(out[0].payload)->generation, 1u);
  }
  clock_.Advance(Duration(1000));
  EXPECT_TRUE(Decode(core->Tick()).empty());
  EXPECT_EQ(core->state(), proto::JobState::kRunning);
  // A member that never comes back is lost after the heartbeat timeout, as usual.
  for (int i = 0; i < 10; ++i) {
    clock_.Advance(Duration(200));
    Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{8});
    core->Tick();
  }
  EXPECT_EQ(core->membership().Find("w1")->state, WorkerState::kLost);
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
}

TEST_F(RestartTest, ChangeInFlightRunsARecoveryRoundAndThePendingResizeContinues) {
  uint64_t pause_target = 0;
  {
    auto core = NewCore(2);
    StartTwo(*core);
    ASSERT_TRUE(core->RecordCheckpoint(10, 1, dir_ + "/ckpt/step-10").ok());
    auto out =
        Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, true}, 9);
    auto pauses = OfType(out, T::kPauseRequest);
    ASSERT_EQ(pauses.size(), 2u);
    pause_target = proto::DecodePayload<proto::PauseRequest>(pauses[0].payload)->target_generation;
  }
  auto core = NewCore(2);
  EXPECT_TRUE(core->restored());
  EXPECT_EQ(core->generation(), 1u);
  // A resize while the restart is settling is refused.
  auto refused =
      Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{2, false, {}, false}, 3);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].type, T::kError);
  // Nothing is sent before the workers are heard from (their ROUTER identities are unknown).
  EXPECT_TRUE(Decode(core->Tick()).empty());
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  EXPECT_TRUE(Decode(core->Tick()).empty());
  Send(*core, "w1", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{12}, 0, "-new");
  auto out = Decode(core->Tick());
  auto recovers = OfType(out, T::kRecoverRequest);
  ASSERT_EQ(recovers.size(), 2u);
  const uint64_t target =
      proto::DecodePayload<proto::RecoverRequest>(recovers[0].payload)->target_generation;
  EXPECT_GT(target, pause_target);  // never a number the workers may have seen
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
  // The workers answer with their commits and the recovery builds and commits.
  std::vector<proto::Envelope> gens;
  for (const std::string id : {"w0", "w1"}) {
    auto o = Send(*core, id, proto::Role::kWorker, T::kPaused, proto::PausedReport{target, 12, {10, 12}, true});
    for (auto& e : OfType(o, T::kNewGeneration)) gens.push_back(e);
  }
  ASSERT_EQ(gens.size(), 2u);
  auto ng = proto::DecodePayload<proto::NewGeneration>(gens[0].payload);
  EXPECT_EQ(ng->restore_step, 12);
  EXPECT_EQ(ng->members.size(), 2u);
  // The committed checkpoint survived the restart: the generation names it for a disk fallback.
  EXPECT_EQ(ng->checkpoint_dir, dir_ + "/ckpt/step-10");
  ASSERT_EQ(core->checkpoints().size(), 1u);
  EXPECT_EQ(core->checkpoints()[0].step, 10);
  std::vector<proto::Envelope> after;
  for (const std::string id : {"w0", "w1"}) {
    after = Send(*core, id, proto::Role::kWorker, T::kGenerationReady, proto::GenerationReady{target, 1, 0, 0});
  }
  EXPECT_EQ(core->generation(), target);
  // The journaled resize (to 1 worker) goes on: a pause for the next generation.
  auto pauses = OfType(after, T::kPauseRequest);
  EXPECT_EQ(pauses.size(), 2u);
  EXPECT_EQ(core->state(), proto::JobState::kPausing);
}

TEST_F(RestartTest, UnheardWorkersAreRecoveredAfterTheHeartbeatTimeout) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, false}, 9);
  }
  auto core = NewCore(2);
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{3}, 0, "-new");
  EXPECT_TRUE(Decode(core->Tick()).empty());
  clock_.Advance(Duration(1600));
  Send(*core, "w0", proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{3}, 0, "-new");
  auto out = Decode(core->Tick());
  // w1 missed its deadline: it is lost and w0 is asked to recover.
  EXPECT_EQ(core->membership().Find("w1")->state, WorkerState::kLost);
  EXPECT_EQ(OfType(out, T::kRecoverRequest).size(), 1u);
  EXPECT_EQ(core->state(), proto::JobState::kRecovering);
}

TEST_F(RestartTest, FinishedWorkersAndTheJobEndSurviveARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "w0", proto::Role::kWorker, T::kLeave,
         proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 4);
  }
  {
    auto core = NewCore(2);
    EXPECT_EQ(core->membership().Find("w0")->state, WorkerState::kFinished);
    EXPECT_EQ(core->state(), proto::JobState::kRunning);
    Send(*core, "w1", proto::Role::kWorker, T::kLeave,
         proto::LeaveRequest{proto::LeaveReason::kFinished, "finished"}, 4);
    EXPECT_EQ(core->state(), proto::JobState::kFinished);
  }
  auto core = NewCore(2);
  EXPECT_EQ(core->state(), proto::JobState::kFinished);
  // An agent registering after the restart learns that the job is over.
  auto out = Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 4}, 2);
  auto shutdown = OfType(out, T::kShutdown);
  ASSERT_EQ(shutdown.size(), 1u);
  EXPECT_EQ(proto::DecodePayload<proto::Shutdown>(shutdown[0].payload)->exit_code, 0);
}

TEST_F(RestartTest, WorkerIdsAreNeverReusedAfterARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    auto reg = Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 8}, 2);
    auto out =
        Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{3, false, {}, false}, 9);
    (void)reg;
    (void)out;
  }
  auto core = NewCore(2);
  // After the restart, the resize to 3 continues and asks the agent for a fresh id (not w2).
  Send(*core, "agent", proto::Role::kAdmin, T::kAgentRegister, proto::AgentRegister{"h", 8}, 2);
  for (const std::string id : {"w0", "w1"}) {
    Send(*core, id, proto::Role::kWorker, T::kHeartbeat, proto::Heartbeat{1}, 0, "-new");
  }
  auto out = Decode(core->Tick());
  auto spawns = OfType(out, T::kSpawnRequest);
  ASSERT_EQ(spawns.size(), 1u);
  auto req = proto::DecodePayload<proto::SpawnRequest>(spawns[0].payload);
  ASSERT_EQ(req->worker_ids.size(), 1u);
  EXPECT_EQ(req->worker_ids[0], "w3");
}

TEST_F(RestartTest, TheTargetSurvivesARestart) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
    Send(*core, "admin", proto::Role::kAdmin, T::kResize, proto::ResizeRequest{1, false, {}, false},
         9);
    EXPECT_EQ(core->target_workers(), 1);
  }
  auto core = NewCore(2);
  EXPECT_EQ(core->target_workers(), 1);
}

TEST_F(RestartTest, AJournalOfAnotherJobIsRefused) {
  {
    auto core = NewCore(2);
    StartTwo(*core);
  }
  CoordinatorOptions o;
  o.job = "other";
  o.clock = &clock_;
  o.state_dir = dir_;
  CoordinatorCore core(o);
  EXPECT_EQ(core.journal_status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace elastra::coordinator
