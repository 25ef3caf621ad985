// The journal's records: typed (JournalRecord), checked against the state they follow
// (CheckJournalRecord), applied (ApplyJournalRecord), and turned into the text a storage keeps and
// back (EncodeJournalRecord, DecodeJournalRecord): JSON exists only at that edge.
//
// A record is checked whole before anything changes, then applied in place (ApplyJournalRecord,
// which cannot fail), so an append costs the size of its record and never a copy of the state:
// the state holds every committed generation's members, O(workers x generations)
// (docs/scale.md). Append and replay use the same check and the same apply, so a journal replays
// to the state its writer held.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "elastra/status.h"
#include "journal/journal.h"

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
  kResizeRefused,
  kHostLost,
  kWaiting,
  kTarget,
  kState,
  kEnd,
};

// One record. Only the fields of its type are set. Some fields are written for GET /v1/events and
// /metrics only: replay does not read them back (their defaults then).
struct JournalRecord {
  JournalRecordType type = JournalRecordType::kJob;
  // job
  std::string job, bind;
  bool has_bind = false;
  int32_t initial_workers = 0, max_workers = 0;
  // join
  JournalWorker worker;
  // worker
  std::string id;
  JournalWorkerState worker_state = JournalWorkerState::kRemoved;
  // ids; host_lost: the workers that left the job with the host
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
  // checkpoint; its shard files' total size and its save time, each -1 when not known (not
  // written then; replay does not read them)
  JournalCheckpoint checkpoint;
  int64_t checkpoint_bytes = -1;
  double checkpoint_seconds = -1;
  // resize; resize_refused: its workers, and its layout when has_layout
  JournalResize resize;
  // resize_end: done (else failed), at this committed generation (replay does not read them)
  bool resize_done = false;
  uint64_t resize_generation = 0;
  // resize_refused: the drain's host (empty for a resize) and why; host_lost: the host and why;
  // waiting: why the job waits for workers (replay reads none of these records' fields)
  std::string host, why;
  // target
  int32_t target_workers = 0;
  // job, target: the standby workers kept beyond the layout (CoordinatorOptions::spares); -1: not
  // written (a job record: none; a target record: unchanged)
  int32_t spares = -1;
  // state
  StateSpec state;
  // end; the job's last committed checkpoint when end_checkpoint_step >= 0 (replay does not read
  // them)
  JobOutcome outcome = JobOutcome::kFinished;
  std::string reason;
  int64_t end_checkpoint_step = -1;
  std::string end_checkpoint_dir;
};

// The workers of a begin record written as a difference: `committed` less the entries at the
// ranks in `dropped` (rising), then `added`. Replay and the events reader (events.cc)
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

// The text a storage keeps for `record`: a JSON object with its keys in the JSON library's order
// (alphabetical), or for a begin or commit record ChangeRecordText's. `record` is changed to what
// replay reads back from that text: a string that is not UTF-8 as the JSON library replaces it, a
// commit's timing that is not a finite number as -1 (not known) and its reached and restore steps
// as -1 (replay does not read them).
std::string EncodeJournalRecord(JournalRecord* record);
// `text` read as the record that follows `state`: kCorrupt "record is not JSON", or
// "inconsistent record (WHY)" as ReadJournalRecord refuses it. `state` is not changed.
StatusOr<JournalRecord> DecodeJournalRecord(std::string_view text, const JournalState& state);
// `r` read as the record that follows `state`: kCorrupt naming what is wrong when it is not one
// (a missing or out-of-range field, an unknown type, or what CheckJournalRecord refuses).
StatusOr<JournalRecord> ReadJournalRecord(const nlohmann::json& r, const JournalState& state);
// kCorrupt naming what is wrong when `record` cannot follow `state`: a field out of the bounds
// ReadJournalRecord enforces on its text (a name no enum value has, a string too long), or a
// record that does not fit the state (no job record first, a generation committed out of order, a
// reference to a change or generation that is not the one in flight or committed, a bound on the
// state passed). The one check of every record, on append and on replay.
Status CheckJournalRecord(const JournalRecord& record, const JournalState& state);
// Applies a record CheckJournalRecord accepted against this same state.
void ApplyJournalRecord(JournalRecord record, JournalState* state);

// The journal's snapshot (docs/ha.md, "Compaction"): the state of a journal as one record,
// {"t":"snapshot","version":1,"records":[...]}, whose records are ordinary ones, the fewest that
// replay to that state (the job, the ids used, each committed generation as a build begun from
// the one before and its commit, the standby workers' joins, the workers' states, the
// checkpoints, the change in flight, the end, the resize and the target). A reader that does not
// know the version refuses it.
inline constexpr uint64_t kJournalSnapshotVersion = 1;
// The snapshot of `state`.
std::string EncodeJournalSnapshot(const JournalState& state);
// Replays the snapshot `text` into `state` (its `records` count is left to the caller: the
// position the snapshot ends at). kCorrupt naming "journal snapshot" when it is none, of another
// version, or one of its records is refused (`state` unchanged then).
Status ApplyJournalSnapshot(std::string_view text, JournalState* state);
// Whether replay yields the same job from `a` and `b`: every field but `records`, a member
// list's workers compared as member lists keep them (their id, host, device and pid).
bool SameJournalState(const JournalState& a, const JournalState& b);

// The text of a `begin` or `commit` record (the two that list every member), built from typed
// values without JSON objects (at 16,384 workers the objects cost tens of ms a record), and the
// record changed as EncodeJournalRecord says. A commit with members_begun is written with
// "begin": its generation in place of its members; a begin with workers_of with "members_of":
// that generation.
std::string ChangeRecordText(JournalRecord* record);
// Replaces the bytes of `s` that are not UTF-8 as the JSON library does when it writes them
// (error_handler_t::replace): each maximal invalid sequence becomes U+FFFD. False when `s` was
// UTF-8 (unchanged).
bool ReplaceInvalidUtf8(std::string* s);

nlohmann::json LayoutJson(const Layout& layout);
// Lower-case hex of `bytes`, and back (false for text that is not hex of whole bytes).
std::string HexOf(const std::string& bytes);
bool BytesOfHex(const std::string& hex, std::string* bytes);

}  // namespace elastra::journal
