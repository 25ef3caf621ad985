// The journal tests' fixture: a fresh state directory with the journal's path in it, a sample
// journal, raw access to the file, and a correctly framed record around any payload. Shared by
// journal_test.cc (the journal file) and journal_restart_test.cc (a core restarted from it).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "journal/journal.h"

namespace elastra::journal {

// The payloads of the journal's records, in order.
inline std::vector<std::string> Payloads(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + Journal::kHeaderBytes <= bytes.size()) {
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) {
      length |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + 4 + i])) << (8 * i);
    }
    out.push_back(bytes.substr(at + Journal::kHeaderBytes, length));
    at += Journal::kHeaderBytes + length;
  }
  return out;
}

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-journal-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/journal.bin";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

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

  uint64_t FileSize() { return std::filesystem::file_size(path_); }
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

}  // namespace elastra::journal
