// The bytes each Record* function writes, against golden texts taken from the journal as it was
// before every record went through one typed append path (the JSON objects of each Record*
// function, dumped and parsed back): a journal written by one version replays in the other, and
// GET /v1/events reads the same records. Strings that need escaping or are not UTF-8, optional
// fields present and absent, and every record type are covered.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "journal/records.h"
#include "tests/journal/test_util.h"

namespace elastra::journal {
namespace {

// `s` as a C++ string literal, to paste a new golden text from a failure's output.
std::string Literal(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];  // octal: at most 3 digits, so no character after it is taken in
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

void ExpectPayloads(const std::vector<std::string>& got, const std::vector<std::string>& golden) {
  EXPECT_EQ(got.size(), golden.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string want = i < golden.size() ? golden[i] : "";
    EXPECT_EQ(got[i], want) << "record " << i << ": " << Literal(got[i]);
  }
}

JournalWorker Worker(const std::string& id, const std::string& host, int32_t device, int64_t pid) {
  return JournalWorker{id, host, device, pid};
}

// Written by the journal as of commit 5d660b2 (one JSON object per Record* function).
const std::vector<std::string> kGolden = {
    "{\"bind\":\"tcp://0.0.0.0:0\",\"initial_workers\":2,\"job\":\"mlp \\\"q\\\"\\tw\357\277\275("
    "\357\277\275\",\"max_workers\":8,\"t\":\"job\",\"version\":1}",
    "{\"t\":\"join\",\"worker\":{\"device\":0,\"host\":\"host-0\",\"id\":\"w0\",\"pid\":1000}}",
    "{\"t\":\"join\",\"worker\":{\"device\":1,\"host\":\"host-1\",\"id\":\"w1\",\"pid\":1001,\"rv"
    "\":\"7f0000011f90\"}}",
    "{\"t\":\"join\",\"worker\":{\"device\":-1,\"host\":\"h\\\\\\n\",\"id\":\"w\357\277\275(\357"
    "\277\275\",\"pid\":7}}",
    "{\"id\":\"w\357\277\275(\357\277\275\",\"state\":\"removed\",\"t\":\"worker\"}",
    "{\"ids\":[\"w2\",\"w3\",\"w\357\277\275(\357\277\275\"],\"t\":\"ids\"}",
    "{\"kind\":\"build\",\"t\":\"begin\",\"target\":1,\"workers\":[{\"device\":0,\"host\":\"host-"
    "0\",\"id\":\"w0\",\"pid\":1000},{\"device\":1,\"host\":\"host-1\",\"id\":\"w1\",\"pid\":1001"
    "}]}",
    "{\"generation\":1,\"layout\":{\"dp\":2,\"pp\":1,\"tp\":1},\"begin\":1,\"reason\":\"start\","
    "\"t\":\"commit\",\"downtime_ms\":12.25,\"agreement_ms\":0,\"rebuild_ms\":0.33333333333333331"
    ",\"transfer_ms\":0}",
    "{\"dir\":\"/ckpt/step-20\",\"generation\":1,\"step\":20,\"t\":\"checkpoint\"}",
    "{\"bytes\":123456789,\"dir\":\"/ckpt/step-30\",\"generation\":1,\"seconds\":2.5,\"step\":30,"
    "\"t\":\"checkpoint\"}",
    "{\"bytes\":0,\"dir\":\"/c\357\277\275\",\"generation\":1,\"seconds\":0.1,\"step\":40,\"t\":"
    "\"checkpoint\"}",
    "{\"has_layout\":false,\"layout\":{\"dp\":1,\"pp\":1,\"tp\":1},\"t\":\"resize\",\"workers\":4"
    "}",
    "{\"has_layout\":true,\"layout\":{\"dp\":2,\"pp\":2,\"tp\":1},\"t\":\"resize\",\"workers\":4}",
    "{\"generation\":1,\"outcome\":\"done\",\"t\":\"resize_end\"}",
    "{\"generation\":7,\"outcome\":\"failed\",\"t\":\"resize_end\"}",
    "{\"error\":\"too small\",\"t\":\"resize_refused\",\"workers\":3}",
    "{\"error\":\"no room\\n\\\"x\\\"\357\277\275\",\"host\":\"host-a\",\"layout\":{\"dp\":2,\"pp"
    "\":2,\"tp\":1},\"t\":\"resize_refused\",\"workers\":6}",
    "{\"host\":\"host-a\",\"t\":\"host_lost\",\"why\":\"agent silent\",\"workers\":[\"w0\",\"w1\""
    "]}",
    "{\"host\":\"h\357\277\275\",\"t\":\"host_lost\",\"why\":\"\",\"workers\":[]}",
    "{\"t\":\"target\",\"workers\":3}",
    "{\"spec\":\"02000000010000000000000001000000000000007702000000000000000800000000000000100000"
    "00000000000200000000000000010000000000000001\",\"t\":\"state\"}",
    "{\"kind\":\"pause\",\"t\":\"begin\",\"target\":2,\"members_of\":1}",
    "{\"kind\":\"build\",\"t\":\"begin\",\"target\":3,\"members_of\":1,\"dropped\":[1],\"added\":"
    "[{\"device\":4,\"host\":\"host-4\",\"id\":\"w4\",\"pid\":1004}]}",
    "{\"generation\":3,\"layout\":{\"dp\":2,\"pp\":1,\"tp\":1},\"members\":[{\"device\":0,\"host"
    "\":\"host-0\",\"id\":\"w0\",\"pid\":1000},{\"device\":5,\"host\":\"host-5\",\"id\":\"w5\",\""
    "pid\":1005}],\"reason\":\"failure\",\"t\":\"commit\",\"downtime_ms\":12.25,\"agreement_ms\":"
    "9.9999999999999995e-08,\"rebuild_ms\":0.33333333333333331,\"transfer_ms\":-1,\"reached_step"
    "\":45,\"restore_step\":40}",
    "{\"id\":\"w0\",\"state\":\"finished\",\"t\":\"worker\"}",
    "{\"id\":\"w5\",\"state\":\"lost\",\"t\":\"worker\"}",
    "{\"kind\":\"recover\",\"t\":\"begin\",\"target\":4,\"workers\":[{\"device\":0,\"host\":\"hos"
    "t-0\",\"id\":\"w0\",\"pid\":1000}]}",
    "{\"kind\":\"build\",\"t\":\"begin\",\"target\":5,\"workers\":[{\"device\":0,\"host\":\"host-"
    "0\",\"id\":\"w0\",\"pid\":1000}]}",
    "{\"generation\":5,\"layout\":{\"dp\":1,\"pp\":1,\"tp\":1},\"begin\":5,\"reason\":\"resize\","
    "\"t\":\"commit\",\"downtime_ms\":12.25,\"agreement_ms\":9.9999999999999995e-08,\"rebuild_ms"
    "\":0.33333333333333331,\"transfer_ms\":-1}",
    "{\"checkpoint_dir\":\"/c\",\"checkpoint_step\":40,\"outcome\":\"finished\",\"reason\":\"ever"
    "y member finished\",\"t\":\"end\"}",
};

const std::vector<std::string> kGoldenShort = {
    "{\"bind\":\"\",\"initial_workers\":1,\"job\":\"j\",\"max_workers\":1,\"t\":\"job\",\"version"
    "\":1}",
    "{\"dir\":\"d\",\"generation\":0,\"seconds\":null,\"step\":1,\"t\":\"checkpoint\"}",
    "{\"outcome\":\"failed\",\"reason\":\"gone\",\"t\":\"end\"}",
};

// Every Record* function, with odd strings and optional fields both ways.
TEST_F(JournalTest, EachRecordIsWrittenAsBefore) {
  const std::string not_utf8 = std::string("w\xc3(") + "\xff";
  JournalWorker rv = Worker("w1", "host-1", 1, 1001);
  rv.rendezvous = std::string("\x7f\x00\x00\x01\x1f\x90", 6);
  StateSpec spec;
  spec.num_layers = 2;
  spec.tensors = {TensorSpec{"w", {8, 16}, 2, {1, 0, true}}};
  Layout layout;
  layout.dp = 2;
  layout.pp = 2;
  JournalState written;
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    Journal& journal = **j;
    ASSERT_TRUE(journal.RecordJob("mlp \"q\"\t" + not_utf8, 2, 8, "tcp://0.0.0.0:0").ok());
    ASSERT_TRUE(journal.RecordJoin(Worker("w0", "host-0", 0, 1000)).ok());
    ASSERT_TRUE(journal.RecordJoin(rv).ok());
    ASSERT_TRUE(journal.RecordJoin(Worker(not_utf8, "h\\\n", -1, 7)).ok());
    ASSERT_TRUE(journal.RecordWorkerState(not_utf8, JournalWorkerState::kRemoved).ok());
    ASSERT_TRUE(journal.RecordIds({"w2", "w3", not_utf8}).ok());
    const std::vector<JournalWorker> two = {Worker("w0", "host-0", 0, 1000), rv};
    ASSERT_TRUE(journal.RecordChangeBegun(1, ChangeKind::kBuild, two).ok());
    JournalGeneration g;
    g.generation = 1;
    g.reason = proto::GenerationReason::kStart;
    g.layout.dp = 2;
    g.members = two;
    g.downtime_ms = 12.25;
    g.rebuild_ms = 1.0 / 3;
    ASSERT_TRUE(journal.RecordCommit(g).ok());
    ASSERT_TRUE(journal.RecordCheckpoint(20, 1, "/ckpt/step-20").ok());
    ASSERT_TRUE(journal.RecordCheckpoint(30, 1, "/ckpt/step-30", 123456789, 2.5).ok());
    ASSERT_TRUE(journal.RecordCheckpoint(40, 1, "/c\xff", 0, 0.1).ok());
    ASSERT_TRUE(journal.RecordResize(JournalResize{4, false, Layout{}}).ok());
    ASSERT_TRUE(journal.RecordResize(JournalResize{4, true, layout}).ok());
    ASSERT_TRUE(journal.RecordResizeEnd(true, 1).ok());
    ASSERT_TRUE(journal.RecordResizeEnd(false, 7).ok());
    ASSERT_TRUE(journal.RecordResizeRefused(3, nullptr, "", "too small").ok());
    ASSERT_TRUE(journal.RecordResizeRefused(6, &layout, "host-a", "no room\n\"x\"\xfe").ok());
    ASSERT_TRUE(journal.RecordHostLost("host-a", "agent silent", {"w0", "w1"}).ok());
    ASSERT_TRUE(journal.RecordHostLost("h\xff", "", {}).ok());
    ASSERT_TRUE(journal.RecordTarget(3).ok());
    ASSERT_TRUE(journal.RecordState(spec).ok());
    ASSERT_TRUE(journal.RecordChangeBegunOfCommitted(2, ChangeKind::kPause).ok());
    ASSERT_TRUE(journal
                    .RecordChangeBegunOfCommitted(3, ChangeKind::kBuild, {1},
                                                  {Worker("w4", "host-4", 4, 1004)})
                    .ok());
    g.generation = 3;
    g.reason = proto::GenerationReason::kFailure;
    g.members = {Worker("w0", "host-0", 0, 1000), Worker("w5", "host-5", 5, 1005)};
    g.agreement_ms = 1e-7;
    g.transfer_ms = std::nan("");
    g.reached_step = 45;
    g.restore_step = 40;
    ASSERT_TRUE(journal.RecordCommit(g).ok());
    ASSERT_TRUE(journal.RecordWorkerState("w0", JournalWorkerState::kFinished).ok());
    ASSERT_TRUE(journal.RecordWorkerState("w5", JournalWorkerState::kLost).ok());
    ASSERT_TRUE(journal.RecordChangeBegun(4, ChangeKind::kRecover, {g.members[0]}).ok());
    ASSERT_TRUE(journal.RecordChangeBegun(5, ChangeKind::kBuild, {g.members[0]}).ok());
    g.generation = 5;
    g.layout.dp = 1;
    g.reason = proto::GenerationReason::kResize;
    g.reached_step = -1;
    ASSERT_TRUE(journal.RecordCommitOfBegun(g).ok());
    ASSERT_TRUE(journal.RecordEnd(JobOutcome::kFinished, "every member finished", 40, "/c").ok());
    written = journal.state();
  }
  ExpectPayloads(Payloads(ReadAll()), kGolden);

  // What the writer applied is what replay reads back.
  std::vector<std::string> warnings;
  auto s = Journal::Replay(path_, &warnings);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(s->records, written.records);
  EXPECT_EQ(s->job, written.job);
  EXPECT_EQ(s->seen_ids, written.seen_ids);
  EXPECT_EQ(s->worker_states, written.worker_states);
  EXPECT_EQ(s->rendezvous, written.rendezvous);
  ASSERT_EQ(s->standby.size(), written.standby.size());
  for (size_t i = 0; i < s->standby.size(); ++i) {
    EXPECT_EQ(s->standby[i].id, written.standby[i].id);
    EXPECT_EQ(s->standby[i].host, written.standby[i].host);
  }
  ASSERT_EQ(s->checkpoints.size(), written.checkpoints.size());
  EXPECT_EQ(s->checkpoints[2].dir, written.checkpoints[2].dir);
  ASSERT_EQ(s->history.size(), 3u);
  ASSERT_EQ(written.history.size(), 3u);
  EXPECT_EQ(s->history[1].transfer_ms, written.history[1].transfer_ms);
  EXPECT_EQ(s->history[1].reached_step, written.history[1].reached_step);
  EXPECT_EQ(s->history[2].members.size(), 1u);
  EXPECT_EQ(s->target_workers, written.target_workers);
  EXPECT_EQ(s->state.num_layers, 2);
  EXPECT_EQ(s->ended, JobOutcome::kFinished);
}

// A job record without a bind address, a checkpoint without its size, and an end without a
// checkpoint.
TEST_F(JournalTest, ShortRecordsAreWrittenAsBefore) {
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("j", 1, 1).ok());
    // A save time that is no number (no JSON number either: the library writes null).
    ASSERT_TRUE((*j)->RecordCheckpoint(1, 0, "d", -1, INFINITY).ok());
    ASSERT_TRUE((*j)->RecordEnd(JobOutcome::kFailed, "gone").ok());
  }
  ExpectPayloads(Payloads(ReadAll()), kGoldenShort);
}

// Strings that are not UTF-8 are written as the JSON library replaces them, without the library
// parsing them back: random byte strings, rich in the bytes where UTF-8 sequences start or break,
// come out of ReplaceInvalidUtf8 as the library's text of them reads back.
TEST(ReplaceInvalidUtf8Test, ReplacesAsTheJsonLibraryDoes) {
  using nlohmann::json;
  const unsigned char edges[] = {0x00, 0x1f, 0x22, 0x41, 0x5c, 0x7f, 0x80, 0x8f, 0x90, 0x9f,
                                 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xe1, 0xec, 0xed,
                                 0xee, 0xef, 0xf0, 0xf1, 0xf3, 0xf4, 0xf5, 0xfe, 0xff};
  std::mt19937 rng(32);
  int replaced = 0;
  for (int i = 0; i < 50000; ++i) {
    std::string s(rng() % 12, '\0');
    for (char& c : s) c = static_cast<char>(edges[rng() % sizeof(edges)]);
    const std::string text = json(s).dump(-1, ' ', false, json::error_handler_t::replace);
    const std::string want = json::parse(text).get<std::string>();
    std::string got = s;
    const bool changed = ReplaceInvalidUtf8(&got);
    ASSERT_EQ(got, want) << Literal(s);
    EXPECT_EQ(changed, want != s) << Literal(s);
    replaced += changed;
  }
  EXPECT_GT(replaced, 1000) << "the strings hardly ever needed a replacement";
}

// A worker's declared memory (protocol 9) is written with its join, only when it declared one, and
// read back for a restarted coordinator; a later join without it forgets it.
TEST_F(JournalTest, AJoinKeepsTheMemoryItDeclared) {
  JournalWorker w = Worker("w0", "host-0", 0, 1000);
  w.memory_bytes = int64_t{3} << 30;
  {
    auto j = Journal::Create(path_);
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->RecordJob("j", 2, 2).ok());
    ASSERT_TRUE((*j)->RecordJoin(w).ok());
    ASSERT_TRUE((*j)->RecordJoin(Worker("w1", "host-1", 0, 1001)).ok());
    EXPECT_EQ((*j)->state().memory.at("w0"), int64_t{3} << 30);
  }
  const std::vector<std::string> payloads = Payloads(ReadAll());
  ASSERT_EQ(payloads.size(), 3u);
  EXPECT_EQ(payloads[1],
            "{\"t\":\"join\",\"worker\":{\"device\":0,\"host\":\"host-0\",\"id\":\"w0\","
            "\"mem\":3221225472,\"pid\":1000}}");
  auto s = Journal::Replay(path_, nullptr);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->memory.size(), 1u);
  EXPECT_EQ(s->memory.at("w0"), int64_t{3} << 30);
}

}  // namespace
}  // namespace elastra::journal
