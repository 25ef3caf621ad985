// The journal's commit record that refers to the build begun for its generation instead of
// listing its members again (docs/journal.md): written only when the members are those of that
// begin record, replayed to the same state as a commit that lists them, refused by replay when no
// such build is in flight, and older journals that list them still replay.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "journal/journal.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

JournalGeneration Generation(uint64_t number, std::vector<JournalWorker> members) {
  JournalGeneration g;
  g.generation = number;
  g.reason = proto::GenerationReason::kResize;
  g.layout.dp = static_cast<int>(members.size());
  g.members = std::move(members);
  g.downtime_ms = 4.5;
  return g;
}

void ExpectSameWorkers(const std::vector<JournalWorker>& a, const std::vector<JournalWorker>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].id, b[i].id) << i;
    EXPECT_EQ(a[i].host, b[i].host) << i;
    EXPECT_EQ(a[i].device, b[i].device) << i;
    EXPECT_EQ(a[i].pid, b[i].pid) << i;
  }
}

TEST_F(JournalTest, ACommitOfTheBuildBegunRefersToItsBeginAndReplaysToTheSameState) {
  JournalWorker odd_device = W("w2");
  odd_device.device = 5;
  odd_device.pid = 9001;
  const std::vector<JournalWorker> members = {W("w1"), odd_device, W("w0")};
  JournalState written;
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("job", 3, 4).ok());
    for (const auto& w : members) ASSERT_TRUE((*j)->RecordJoin(w).ok());
    ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kBuild, members).ok());
    ASSERT_TRUE((*j)->RecordCommit(Generation(1, members)).ok());
    written = (*j)->state();
  }
  const std::vector<std::string> records = Payloads(ReadAll());
  ASSERT_EQ(records.size(), 6u);
  const std::string& commit = records.back();
  EXPECT_NE(commit.find("\"t\":\"commit\""), std::string::npos) << commit;
  EXPECT_NE(commit.find("\"begin\":1"), std::string::npos) << commit;
  EXPECT_EQ(commit.find("\"members\""), std::string::npos) << commit;
  EXPECT_EQ(commit.find("w1"), std::string::npos) << "the members are not listed again";

  // What the writer held is what replay reads back: the begin's workers, by rank.
  ASSERT_EQ(written.history.size(), 1u);
  ExpectSameWorkers(written.history[0].members, members);
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(s->history.size(), 1u);
  ExpectSameWorkers(s->history[0].members, members);
  EXPECT_EQ(s->history[0].layout.dp, 3);
  EXPECT_EQ(s->history[0].downtime_ms, 4.5);
  EXPECT_FALSE(s->change_in_flight);
  EXPECT_TRUE(s->change_workers.empty());
  EXPECT_TRUE(s->standby.empty()) << "the members left the standby list";
  EXPECT_EQ(s->seen_ids, written.seen_ids);
  EXPECT_EQ(s->records, written.records);

  // Opened again, the next change commits after it the same way.
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j.ok()) << j.status();
  const std::vector<JournalWorker> two = {W("w0"), W("w1")};
  ASSERT_TRUE((*j)->RecordChangeBegun(2, ChangeKind::kPause, members).ok());
  ASSERT_TRUE((*j)->RecordChangeBegun(3, ChangeKind::kBuild, two).ok());
  ASSERT_TRUE((*j)->RecordCommit(Generation(3, two)).ok());
  ExpectSameWorkers((*j)->state().current()->members, two);
  j->reset();
  auto again = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(again->history.size(), 2u);
  ExpectSameWorkers(again->history[1].members, two);
  ExpectSameWorkers(again->history[0].members, members);
}

// Only the members the build began with, as its begin record listed them, are taken from it: any
// other commit lists its members.
TEST_F(JournalTest, ACommitThatDiffersFromTheBuildBegunListsItsMembers) {
  auto j = Journal::Create(path_);
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE((*j)->RecordJob("job", 2, 4).ok());
  const std::vector<JournalWorker> begun = {W("w0"), W("w1")};
  // A worker's host differs from the begin record's.
  ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kBuild, begun).ok());
  JournalWorker moved = W("w1");
  moved.host = "elsewhere";
  ASSERT_TRUE((*j)->RecordCommit(Generation(1, {W("w0"), moved})).ok());
  // The ranks differ.
  ASSERT_TRUE((*j)->RecordChangeBegun(2, ChangeKind::kBuild, begun).ok());
  ASSERT_TRUE((*j)->RecordCommit(Generation(2, {W("w1"), W("w0")})).ok());
  // The change in flight is a pause, not the build of this generation.
  ASSERT_TRUE((*j)->RecordChangeBegun(3, ChangeKind::kPause, begun).ok());
  ASSERT_TRUE((*j)->RecordCommit(Generation(3, begun)).ok());
  // The build in flight is of another generation.
  ASSERT_TRUE((*j)->RecordChangeBegun(4, ChangeKind::kBuild, begun).ok());
  ASSERT_TRUE((*j)->RecordCommit(Generation(5, begun)).ok());
  // No change in flight.
  ASSERT_TRUE((*j)->RecordCommit(Generation(6, begun)).ok());
  const JournalState written = (*j)->state();
  j->reset();

  int commits = 0;
  for (const std::string& r : Payloads(ReadAll())) {
    if (r.find("\"t\":\"commit\"") == std::string::npos) continue;
    ++commits;
    EXPECT_NE(r.find("\"members\""), std::string::npos) << r;
    EXPECT_EQ(r.find("\"begin\""), std::string::npos) << r;
  }
  EXPECT_EQ(commits, 5);
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(s->history.size(), 5u);
  EXPECT_EQ(s->history[0].members[1].host, "elsewhere");
  EXPECT_EQ(s->history[1].members[0].id, "w1");
  for (size_t i = 0; i < 5; ++i) {
    ExpectSameWorkers(s->history[i].members, written.history[i].members);
  }
}

// RecordCommitOfBegun (the coordinator's commit of the build it began) takes the members from the
// begin record whatever it is given, and is refused, writing nothing, when that build is not the
// change in flight.
TEST_F(JournalTest, ACommitOfTheBuildBegunIsRefusedWhenNoSuchBuildIsInFlight) {
  auto j = Journal::Create(path_);
  ASSERT_TRUE(j.ok());
  ASSERT_TRUE((*j)->RecordJob("job", 2, 4).ok());
  const std::vector<JournalWorker> begun = {W("w0"), W("w1")};
  const uint64_t before = FileSize();
  EXPECT_EQ((*j)->RecordCommitOfBegun(Generation(1, begun)).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kPause, begun).ok());
  const uint64_t paused = FileSize();
  EXPECT_GT(paused, before);
  EXPECT_FALSE((*j)->RecordCommitOfBegun(Generation(1, begun)).ok());
  ASSERT_TRUE((*j)->RecordChangeBegun(2, ChangeKind::kBuild, begun).ok());
  EXPECT_FALSE((*j)->RecordCommitOfBegun(Generation(3, begun)).ok());
  const uint64_t built = FileSize();
  JournalGeneration g = Generation(2, begun);
  g.members = {W("someone else")};
  ASSERT_TRUE((*j)->RecordCommitOfBegun(g).ok());
  EXPECT_GT(FileSize(), built);
  ExpectSameWorkers((*j)->state().current()->members, begun);
  j->reset();
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->history.size(), 1u);
  ExpectSameWorkers(s->history[0].members, begun);
}

TEST_F(JournalTest, ReplayRefusesACommitThatRefersToNoBuildInFlight) {
  const std::string job = Framed(R"({"t":"job","version":1,"job":"j","initial_workers":1,)"
                                 R"("max_workers":2})");
  auto begin = [](const std::string& kind, int target) {
    return Framed(R"({"kind":")" + kind + R"(","t":"begin","target":)" + std::to_string(target) +
                  R"(,"workers":[{"device":0,"host":"h","id":"a","pid":1}]})");
  };
  auto commit = [](int generation, const std::string& members) {
    return Framed(R"({"generation":)" + std::to_string(generation) +
                  R"(,"layout":{"dp":1,"pp":1,"tp":1})" + members +
                  R"(,"reason":"resize","t":"commit","downtime_ms":0,"agreement_ms":0,)"
                  R"("rebuild_ms":0,"transfer_ms":0})");
  };
  const std::string listed = R"(,"members":[{"device":0,"host":"h","id":"a","pid":1}])";
  struct Case {
    std::string name;
    std::string bytes;
    uint64_t records;  // replayed before the replay stops
    bool warns;
  };
  const std::vector<Case> cases = {
      {"refers to its build", job + begin("build", 1) + commit(1, R"(,"begin":1)"), 3, false},
      {"lists its members (older journals)", job + begin("build", 1) + commit(1, listed), 3,
       false},
      {"no change in flight", job + commit(1, R"(,"begin":1)"), 1, true},
      {"a pause in flight", job + begin("pause", 1) + commit(1, R"(,"begin":1)"), 2, true},
      {"another generation's build", job + begin("build", 2) + commit(1, R"(,"begin":1)"), 2,
       true},
      {"another generation's begin", job + begin("build", 1) + commit(1, R"(,"begin":2)"), 2,
       true},
      {"both begin and members", job + begin("build", 1) + commit(1, R"(,"begin":1)" + listed), 2,
       true},
      {"a layout of another size",
       job + begin("build", 1) +
           Framed(R"({"generation":1,"layout":{"dp":2,"pp":1,"tp":1},"begin":1,)"
                  R"("reason":"resize","t":"commit","downtime_ms":0,"agreement_ms":0,)"
                  R"("rebuild_ms":0,"transfer_ms":0})"),
       2, true},
  };
  for (const auto& c : cases) {
    WriteAll(c.bytes);
    std::vector<std::string> warnings;
    auto s = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.status();
    EXPECT_EQ(s->records, c.records) << c.name;
    EXPECT_EQ(!warnings.empty(), c.warns) << c.name;
    if (c.records == 3) {
      ASSERT_EQ(s->history.size(), 1u) << c.name;
      ASSERT_EQ(s->history[0].members.size(), 1u) << c.name;
      EXPECT_EQ(s->history[0].members[0].id, "a") << c.name;
      EXPECT_EQ(s->history[0].members[0].host, "h") << c.name;
    }
  }
}

// A pause's begin record refers to the committed members it pauses instead of listing them
// (written through RecordChangeBegunOfCommitted); replay reads the same change back, a restart
// in the middle of that pause sees its workers, and replay refuses a reference to a generation
// that is not the committed one.
TEST_F(JournalTest, APauseOfTheCommittedMembersRefersToThemAndReplays) {
  const std::vector<JournalWorker> members = {W("w1"), W("w0")};
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("job", 2, 4).ok());
    EXPECT_EQ((*j)->RecordChangeBegunOfCommitted(1, ChangeKind::kPause).code(),
              StatusCode::kInvalidArgument)
        << "nothing is committed yet";
    for (const auto& w : members) ASSERT_TRUE((*j)->RecordJoin(w).ok());
    ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kBuild, members).ok());
    ASSERT_TRUE((*j)->RecordCommit(Generation(1, members)).ok());
    ASSERT_TRUE((*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kPause).ok());
    const JournalState& s = (*j)->state();
    EXPECT_TRUE(s.change_in_flight);
    EXPECT_TRUE(s.change_workers.empty());
    ExpectSameWorkers(s.ChangeWorkers(), members);
  }
  const std::vector<std::string> records = Payloads(ReadAll());
  const std::string& pause = records.back();
  EXPECT_NE(pause.find("\"members_of\":1"), std::string::npos) << pause;
  EXPECT_EQ(pause.find("w1"), std::string::npos) << "the members are not listed again";

  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_TRUE(s->change_in_flight);
  EXPECT_EQ(s->change_kind, ChangeKind::kPause);
  EXPECT_EQ(s->change_target, 2u);
  ExpectSameWorkers(s->ChangeWorkers(), members);

  // The build after it lists its own workers, and its commit replays as before.
  auto j = Journal::Open(path_);
  ASSERT_TRUE(j.ok()) << j.status();
  const std::vector<JournalWorker> grown = {W("w1"), W("w0"), W("w2")};
  ASSERT_TRUE((*j)->RecordJoin(W("w2")).ok());
  ASSERT_TRUE((*j)->RecordChangeBegun(2, ChangeKind::kBuild, grown).ok());
  EXPECT_FALSE((*j)->state().change_workers_committed);
  ASSERT_TRUE((*j)->RecordCommit(Generation(2, grown)).ok());
  j->reset();
  auto again = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(warnings.empty());
  ASSERT_EQ(again->history.size(), 2u);
  ExpectSameWorkers(again->history[1].members, grown);
  ExpectSameWorkers(again->history[0].members, members);

  // A reference to anything but the committed generation stops the replay there.
  const std::string job = Framed(R"({"t":"job","version":1,"job":"j","initial_workers":1,)"
                                 R"("max_workers":2})");
  const std::string build = Framed(
      R"({"kind":"build","t":"begin","target":1,)"
      R"("workers":[{"device":0,"host":"h","id":"a","pid":1}]})");
  const std::string commit = Framed(
      R"({"generation":1,"layout":{"dp":1,"pp":1,"tp":1},"begin":1,"reason":"resize",)"
      R"("t":"commit","downtime_ms":0,"agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})");
  auto pause_of = [](const std::string& rest) {
    return Framed(R"({"kind":"pause","t":"begin","target":2)" + rest + "}");
  };
  struct Case {
    std::string name;
    std::string bytes;
    uint64_t records;
    bool warns;
  };
  const std::vector<Case> cases = {
      {"the committed one", job + build + commit + pause_of(R"(,"members_of":1)"), 4, false},
      {"nothing committed", job + pause_of(R"(,"members_of":1)"), 1, true},
      {"another generation", job + build + commit + pause_of(R"(,"members_of":2)"), 3, true},
      {"both members_of and workers",
       job + build + commit +
           pause_of(R"(,"members_of":1,"workers":[{"device":0,"host":"h","id":"a","pid":1}])"),
       3, true},
  };
  for (const auto& c : cases) {
    WriteAll(c.bytes);
    auto r = Journal::Replay(path_, &warnings);
    warnings.clear();
    r = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(r.ok()) << c.name << ": " << r.status();
    EXPECT_EQ(r->records, c.records) << c.name;
    EXPECT_EQ(!warnings.empty(), c.warns) << c.name;
    if (c.records == 4) {
      ASSERT_EQ(r->ChangeWorkers().size(), 1u) << c.name;
      EXPECT_EQ(r->ChangeWorkers()[0].id, "a") << c.name;
    }
  }
}


// A build's begin record that keeps the committed members in order, less some, with others
// added behind them, lists only that difference ("dropped" ranks, "added" workers); replay reads
// the same workers back, the commit after it refers to it as before, and replay refuses a
// difference that does not fit the committed members.
TEST_F(JournalTest, ABuildWrittenAsADifferenceFromTheCommittedMembersReplays) {
  const std::vector<JournalWorker> members = {W("w0"), W("w1"), W("w2"), W("w3")};
  const std::vector<JournalWorker> built = {W("w0"), W("w2"), W("w4")};
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("job", 4, 8).ok());
    for (const auto& w : members) ASSERT_TRUE((*j)->RecordJoin(w).ok());
    ASSERT_TRUE((*j)->RecordChangeBegun(1, ChangeKind::kBuild, members).ok());
    ASSERT_TRUE((*j)->RecordCommit(Generation(1, members)).ok());
    ASSERT_TRUE((*j)->RecordJoin(W("w4")).ok());
    // Refused, nothing written: ranks out of order, out of range, or every worker dropped.
    EXPECT_FALSE((*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kBuild, {3, 1}, {}).ok());
    EXPECT_FALSE((*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kBuild, {4}, {}).ok());
    EXPECT_FALSE((*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kBuild, {0, 1, 2, 3}, {}).ok());
    ASSERT_TRUE(
        (*j)->RecordChangeBegunOfCommitted(2, ChangeKind::kBuild, {1, 3}, {W("w4")}).ok());
    ExpectSameWorkers((*j)->state().ChangeWorkers(), built);
    ASSERT_TRUE((*j)->RecordCommit(Generation(2, built)).ok());
  }
  const std::vector<std::string> records = Payloads(ReadAll());
  const std::string& begin = records[records.size() - 2];
  EXPECT_NE(begin.find("\"members_of\":1,\"dropped\":[1,3],\"added\":[{"), std::string::npos)
      << begin;
  EXPECT_EQ(begin.find("w2"), std::string::npos) << "the kept members are not listed again";
  EXPECT_NE(records.back().find("\"begin\":2"), std::string::npos) << records.back();

  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, records.size());
  ASSERT_EQ(s->history.size(), 2u);
  ExpectSameWorkers(s->history[1].members, built);
  ExpectSameWorkers(s->history[0].members, members);

  const std::string job = Framed(R"({"t":"job","version":1,"job":"j","initial_workers":2,)"
                                 R"("max_workers":4})");
  const std::string build = Framed(
      R"({"kind":"build","t":"begin","target":1,"workers":[)"
      R"({"device":0,"host":"h","id":"a","pid":1},{"device":0,"host":"h","id":"b","pid":2}]})");
  const std::string commit = Framed(
      R"({"generation":1,"layout":{"dp":2,"pp":1,"tp":1},"begin":1,"reason":"resize",)"
      R"("t":"commit","downtime_ms":0,"agreement_ms":0,"rebuild_ms":0,"transfer_ms":0})");
  auto build_of = [](const std::string& rest) {
    return Framed(R"({"kind":"build","t":"begin","target":2,"members_of":1)" + rest + "}");
  };
  const std::string c = R"({"device":0,"host":"h","id":"c","pid":3})";
  struct Case {
    std::string name;
    std::string bytes;
    uint64_t records;
    std::vector<std::string> workers;  // when it replays
  };
  const std::vector<Case> cases = {
      {"a grow", job + build + commit + build_of(R"(,"added":[)" + c + "]"), 4, {"a", "b", "c"}},
      {"a shrink", job + build + commit + build_of(R"(,"dropped":[0])"), 4, {"b"}},
      {"a replacement", job + build + commit + build_of(R"(,"dropped":[1],"added":[)" + c + "]"),
       4, {"a", "c"}},
      {"ranks not rising", job + build + commit + build_of(R"(,"dropped":[1,0])"), 3, {}},
      {"a rank out of range", job + build + commit + build_of(R"(,"dropped":[2])"), 3, {}},
      {"a rank not a number", job + build + commit + build_of(R"(,"dropped":["0"])"), 3, {}},
      {"every worker dropped", job + build + commit + build_of(R"(,"dropped":[0,1])"), 3, {}},
  };
  for (const auto& k : cases) {
    WriteAll(k.bytes);
    warnings.clear();
    auto r = Journal::Replay(path_, &warnings);
    ASSERT_TRUE(r.ok()) << k.name << ": " << r.status();
    EXPECT_EQ(r->records, k.records) << k.name;
    EXPECT_EQ(warnings.empty(), !k.workers.empty()) << k.name;
    std::vector<std::string> ids;
    if (r->change_in_flight) {
      for (const auto& w : r->ChangeWorkers()) ids.push_back(w.id);
    }
    EXPECT_EQ(ids, k.workers) << k.name;
  }
}

}  // namespace
}  // namespace elastra::journal
