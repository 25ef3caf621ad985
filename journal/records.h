// The journal's records as JSON (journal/journal.h has the file format): building them,
// reading one into a typed record checked against the state it follows, and applying it.
//
// A record is read whole and checked before anything changes (ReadJournalRecord), then applied in
// place (ApplyJournalRecord, which cannot fail), so an append costs the size of its record and
// never a copy of the state: the state holds every committed generation's members, O(workers x
// generations) (docs/scale.md). Replay and Append use the same two steps, so a journal replays
// to the state its writer held.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "journal/journal.h"
#include "elastra/status.h"

namespace elastra::journal {

// Bounds on what a record may hold (a record within them is at most a few MiB).
inline constexpr size_t kJournalMaxWorkers = 1 << 16;  // the CLI's most (launch/cli.h)
inline constexpr size_t kJournalMaxString = 4096;
inline constexpr size_t kJournalMaxHistory = 1 << 20;
inline constexpr size_t kJournalMaxCheckpoints = 1 << 16;

enum class JournalRecordType : uint8_t {
  kJob,
  kJoin,
  kWorker,
  kIds,
  kBegin,
  kCommit,
  kCheckpoint,
  kResize,
  kResizeEnd,
  kTarget,
  kState,
  kEvent,
  kEnd,
};

// One record, read and checked. Only the fields of its type are set.
struct JournalRecord {
  JournalRecordType type = JournalRecordType::kEvent;
  // job
  std::string job, bind;
  bool has_bind = false;
  int32_t initial_workers = 0, max_workers = 0;
  // join
  JournalWorker worker;
  // worker
  std::string id;
  JournalWorkerState worker_state = JournalWorkerState::kRemoved;
  // ids
  std::vector<std::string> ids;
  // begin
  uint64_t target = 0;
  ChangeKind kind = ChangeKind::kPause;
  std::vector<JournalWorker> workers;
  // Not 0: the change's workers are the members of this generation, the committed one of the
  // state it follows (a record written with "members_of" in place of "workers"), less those at
  // the ranks in `dropped` (ascending), followed by `workers` ("dropped" and "added" in the text;
  // both empty for a pause of every member).
  uint64_t workers_of = 0;
  std::vector<int32_t> dropped;
  // commit
  JournalGeneration generation;
  // The commit's members are the workers of the `build` begin record of the same generation, in
  // flight in the state it follows (a record written with "begin" instead of "members"): Apply
  // moves them from the state's change_workers, and generation.members stays empty until then.
  bool members_begun = false;
  // checkpoint
  JournalCheckpoint checkpoint;
  // resize
  JournalResize resize;
  // target
  int32_t target_workers = 0;
  // state
  StateSpec state;
  // end
  JobOutcome outcome = JobOutcome::kFinished;
  std::string reason;
};

// The workers of a begin record written as a difference: `committed` less the entries at the
// ranks in `dropped` (rising), then `added`. Replay and the events reader (http_events.cc)
// both rebuild the list with it, of records or of ids.
template <class T>
std::vector<T> LessDroppedThenAdded(const std::vector<T>& committed,
                                    const std::vector<int32_t>& dropped, std::vector<T> added) {
  std::vector<T> out;
  out.reserve(committed.size() + added.size());
  size_t next = 0;
  for (size_t r = 0; r < committed.size(); ++r) {
    if (next < dropped.size() && static_cast<size_t>(dropped[next]) == r) {
      ++next;
      continue;
    }
    out.push_back(committed[r]);
  }
  for (T& a : added) out.push_back(std::move(a));
  return out;
}

// `r` read as the record that follows `state`: kCorrupt naming what is wrong when it is not one
// (a missing or out-of-range field, an unknown type, a generation committed out of order, a
// bound passed). `state` is not changed.
StatusOr<JournalRecord> ReadJournalRecord(const nlohmann::json& r, const JournalState& state);
// Applies a record ReadJournalRecord accepted against this same state.
void ApplyJournalRecord(JournalRecord record, JournalState* state);

// The text of a `begin` or `commit` record (the two that list every member), built from typed
// values without JSON objects (at 16,384 workers the objects cost tens of ms a record). The record
// is changed to what replay reads back from that text: a string that is not UTF-8 as the JSON
// library replaces it, a timing that is not a finite number as -1 (not known). A commit with
// members_begun is written with "begin": its generation in place of its members; a begin with
// workers_of with "members_of": that generation.
std::string ChangeRecordText(JournalRecord* record);
// A `begin` or `commit` record built from typed values, checked against every bound
// ReadJournalRecord enforces on the same record read from its text, and against `state`.
Status CheckChangeRecord(const JournalRecord& record, const JournalState& state);

nlohmann::json LayoutJson(const Layout& layout);
nlohmann::json WorkerJson(const JournalWorker& worker);
// Lower-case hex of `bytes`, and back (false for text that is not hex of whole bytes).
std::string HexOf(const std::string& bytes);
bool BytesOfHex(const std::string& hex, std::string* bytes);

}  // namespace elastra::journal
