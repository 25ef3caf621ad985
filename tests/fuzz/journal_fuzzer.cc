// Fuzz target: the coordinator's journal (coordinator/journal) as a restarted coordinator reads it
// from its state directory: replay (record framing, CRC-32C, the JSON records and their bounds),
// the cut back to the consistent prefix when it is opened for appending, and a coordinator core
// taking the replayed job back (coordinator/restore_manager). The journal lies in an in-memory
// filesystem at /state/journal.bin.
//
// Properties: replay stops inside the file; after Open and one more append, a replay yields the
// journal's state with no warning (the bad tail is gone and the new record follows the last good
// one).
//
// Input: byte 0: bit 0 takes the rest as the file as it is; else the rest is JSON records, one per
// line, each framed here with a valid header so that the mutations reach the records. Bit 1: the
// last byte-1 bytes of the file are cut off (a torn write). Bit 2: Open, append and replay again.
// Bit 3: a CoordinatorCore starts on the state directory and takes the job back.
#include <memory>
#include <string>
#include <vector>

#include "coordinator/coordinator_core.h"
#include "journal/journal.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/memory_env.h"

namespace elastra::fuzz {
namespace {

constexpr char kPath[] = "/state/journal.bin";

std::string Record(std::string_view payload) {
  std::string out(coordinator::Journal::kHeaderBytes, '\0');
  auto put = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>(v >> (8 * i));
  };
  put(0, coordinator::Journal::kMagic);
  put(4, static_cast<uint32_t>(payload.size()));
  put(8, coordinator::Journal::Crc32c(payload.data(), payload.size()));
  out.append(payload);
  return out;
}

}  // namespace
}  // namespace elastra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  using coordinator::Journal;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  const uint8_t flags = in.Byte();
  const uint8_t cut = in.Byte();
  std::string file;
  if (flags & 1) {
    file = in.Rest();
  } else {
    while (!in.empty()) file += fuzz::Record(in.Until("\n"));
  }
  if (flags & 2) file.resize(file.size() - std::min<size_t>(file.size(), cut));
  fuzz::MemoryEnv env;
  env.SetFile(fuzz::kPath, file);

  std::vector<std::string> warnings;
  uint64_t good = 0;
  auto state = Journal::Replay(fuzz::kPath, &warnings, &good, &env);
  CHECK(state.ok()) << state.status();
  CHECK_LE(good, file.size());
  CHECK(good == file.size() || !warnings.empty()) << "replay stopped early without a warning";

  if (flags & 4) {
    auto journal = Journal::Open(fuzz::kPath, &env);
    CHECK(journal.ok()) << journal.status();
    CHECK_EQ((*journal)->state().records, state->records);
    const Status appended = (*journal)->state().empty() ? (*journal)->RecordJob("job", 1, 8)
                                                        : (*journal)->RecordResizeEnd(true, 2);
    CHECK_OK(appended);
    const uint64_t records = (*journal)->state().records;
    journal->reset();
    std::vector<std::string> again_warnings;
    auto again = Journal::Replay(fuzz::kPath, &again_warnings, nullptr, &env);
    CHECK(again.ok()) << again.status();
    CHECK(again_warnings.empty()) << "a journal opened and appended to replays with a warning: "
                                  << again_warnings.front();
    CHECK_EQ(again->records, records);
  }
  if (flags & 8) {
    FakeClock clock;
    coordinator::CoordinatorOptions options;
    options.job = state->job.empty() ? "job" : state->job;
    options.state_dir = "/state";
    options.clock = &clock;
    options.env = &env;
    coordinator::CoordinatorCore core(options);
    if (core.journal_status().ok()) {
      (void)core.Tick();
      clock.Advance(Duration(5000));
      (void)core.Tick();
      (void)core.Snapshot();
    }
  }
  return 0;
}
