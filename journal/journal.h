// Journal: the coordinator's append-only record of the job in its state directory, so that a
// coordinator killed with SIGKILL and started again takes the job back (docs/journal.md).
//
// Each Record* function builds a typed record and appends it through one path: encoded (JSON text
// exists only there, journal/records.h), checked against the state, written to the storage, and
// applied to state(). The records are kept by a JournalStorage (journal/storage.h): by default the
// file of checksummed records (journal/file_storage.h: a 12-byte header, magic "EJR1", payload
// length, CRC-32C of the payload, then the payload), where every append is fsync'ed before it
// returns. Replay reads records with bounded reads, stops at the first record that is torn (the
// file ends inside it: a kill mid-write), has a bad header or checksum, or does not make sense,
// logs a warning, and returns the state up to there; Open then cuts the storage back to that
// point (a copy of a file with bad bytes in the middle is kept as <path>.corrupt) so later appends
// follow the last consistent record. All file I/O goes through a Env (the project's filesystem
// seam), so tests can fail an append or cut the power. Thread-compatible (owned by the
// coordinator's loop).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/env.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "journal/file_storage.h"
#include "journal/storage.h"
#include "protocol/messages.h"

namespace elastra::journal {

// The journal's vocabulary. Each is written by its name (ToString) inside the JSON records, so the
// file format is the same as when these were plain strings; replay refuses an unknown name.

// What became of a worker (the `worker` record): "finished", "lost", "removed".
enum class JournalWorkerState : uint8_t {
  kFinished = 0,  // a member finished training (keeps its place in the generation)
  kLost = 1,      // a member was declared lost
  kRemoved = 2,   // a standby or leaving worker is gone; the job forgets it
};

// The kind of change of generation begun (the `begin` record): "pause", "recover", "build".
enum class ChangeKind : uint8_t {
  kPause = 0,    // PauseRequest sent for a planned change
  kRecover = 1,  // RecoverRequest sent after a failure
  kBuild = 2,    // NewGeneration sent
};

// How the job ended (the `end` record): "finished", "failed".
enum class JobOutcome : uint8_t {
  kFinished = 0,
  kFailed = 1,
};

const char* ToString(JournalWorkerState v);
const char* ToString(ChangeKind v);
const char* ToString(JobOutcome v);
// False when `name` is none of the enum's names (`out` unchanged).
bool FromString(std::string_view name, JournalWorkerState* out);
bool FromString(std::string_view name, ChangeKind* out);
bool FromString(std::string_view name, JobOutcome* out);

struct JournalWorker {
  std::string id;
  std::string host;
  int32_t device = -1;
  int64_t pid = 0;
  // Where it serves its rendezvous records (JoinRequest::rendezvous): in join records only (a
  // member list does not repeat it; JournalState::rendezvous keeps it).
  std::string rendezvous;
  // The memory it declared for the job's state (JoinRequest::device_memory_bytes; 0: unlimited):
  // in join records only, as "mem" when not 0 (JournalState::memory keeps it).
  int64_t memory_bytes = 0;
};

// One committed generation.
struct JournalGeneration {
  uint64_t generation = 0;
  proto::GenerationReason reason = proto::GenerationReason::kStart;
  Layout layout;
  std::vector<JournalWorker> members;  // by rank
  double downtime_ms = 0;
  double agreement_ms = 0;
  double rebuild_ms = 0;
  double transfer_ms = 0;
  // A recovery generation (reason kFailure): the furthest step a survivor had reached and the step
  // the state was restored to; reached_step - restore_step steps are trained again. -1 when not
  // known (other reasons, or a journal written before they were recorded). Written for
  // GET /v1/events and /metrics; replay does not read them back.
  int64_t reached_step = -1;
  int64_t restore_step = -1;
  // The communicators its members built and those they kept from the generation before
  // (proto::GenerationRecord): "groups_rebuilt" and "groups_kept", written when not 0.
  int32_t groups_rebuilt = 0;
  int32_t groups_kept = 0;
};

struct JournalCheckpoint {
  int64_t step = 0;
  uint64_t generation = 0;
  std::string dir;
};

struct JournalResize {
  int32_t workers = 0;
  bool has_layout = false;
  Layout layout;
};

// What replaying a journal yields: the last consistent state of the job.
struct JournalState {
  std::string job;
  int32_t initial_workers = 0;
  int32_t max_workers = 0;
  // What the coordinator was asked to bind ("tcp://0.0.0.0:0"); empty in a journal written before
  // it was recorded. A restart binds this host with the port of coordinator.json's address.
  std::string bind;
  // The size the job returns to: initial_workers, then each resize's size, then what a `target`
  // record set (a drain that no other host could take).
  int32_t target_workers = 0;
  // The standby workers the job keeps beyond its layout: the job record's, then each `target`
  // record's that names them (0 in a journal written before spares were recorded).
  int32_t spares = 0;
  // The highest generation number ever handed out (begun or committed).
  uint64_t highest_generation = 0;
  // Committed generations, oldest first; back() is the current one.
  std::vector<JournalGeneration> history;
  // Workers of the committed generations that are no longer running in it: kFinished or kLost
  // (a kRemoved worker is forgotten).
  std::map<std::string, JournalWorkerState> worker_states;
  // Workers that joined and hold no rank (by join order).
  std::vector<JournalWorker> standby;
  // Every worker id the job has used or handed out (a restarted coordinator never reuses one).
  std::unordered_set<std::string> seen_ids;
  // Where each worker that joined with one serves its rendezvous records (its latest join), so
  // that a restarted coordinator still hands members their build peers' endpoints.
  std::unordered_map<std::string, std::string> rendezvous;
  // The memory each worker that declared one joined with (its latest join), so that a restarted
  // coordinator still checks layouts against it.
  std::unordered_map<std::string, int64_t> memory;
  std::vector<JournalCheckpoint> checkpoints;  // oldest first
  // A change of generation begun and not committed: its target and the workers asked.
  bool change_in_flight = false;
  uint64_t change_target = 0;
  ChangeKind change_kind = ChangeKind::kPause;  // meaningful while change_in_flight
  std::vector<JournalWorker> change_workers;
  // The change's workers are the committed generation's members (a pause of all of them: its
  // begin record refers to them); change_workers is empty then. ChangeWorkers() reads either.
  bool change_workers_committed = false;
  const std::vector<JournalWorker>& ChangeWorkers() const {
    return change_workers_committed && current() != nullptr ? current()->members : change_workers;
  }
  // An accepted resize not yet done or failed.
  std::optional<JournalResize> resize;
  // Empty while the job runs.
  std::optional<JobOutcome> ended;
  std::string end_reason;
  // The training state the workers registered (the first joiner's), for planning state moves;
  // empty until a `state` record.
  StateSpec state;
  // Records applied.
  uint64_t records = 0;

  bool empty() const { return records == 0; }
  const JournalGeneration* current() const { return history.empty() ? nullptr : &history.back(); }
};

struct JournalRecord;  // journal/records.h

class Journal {
 public:
  // The file's format (FileJournalStorage).
  static constexpr uint32_t kMagic = FileJournalStorage::kMagic;
  static constexpr uint32_t kHeaderBytes = FileJournalStorage::kHeaderBytes;
  static constexpr uint32_t kMaxRecordBytes = FileJournalStorage::kMaxRecordBytes;

  // Opens the journal at `path` (created, mode 0600, when missing), replays it and readies it for
  // appending after the last consistent record. kInternal when the file cannot be opened or cut.
  // `env` is not owned and must outlive the journal.
  static StatusOr<std::unique_ptr<Journal>> Open(const std::string& path,
                                                 Env* env = Env::Default());
  // Opens `path` as a new, empty journal: an older file there is replaced.
  static StatusOr<std::unique_ptr<Journal>> Create(const std::string& path,
                                                   Env* env = Env::Default());
  // Replays `path` read-only. `warnings` (may be null) gets one line per record skipped;
  // `consistent_bytes` (may be null) the length of the consistent prefix. kNotFound when missing,
  // kInternal when it cannot be read.
  static StatusOr<JournalState> Replay(const std::string& path, std::vector<std::string>* warnings,
                                       uint64_t* consistent_bytes = nullptr,
                                       Env* env = Env::Default());

  // The same over any storage (the three above use a FileJournalStorage at `path`): Open replays
  // `storage` and cuts it back to its consistent prefix, Create clears it, and Replay reads it
  // (`consistent_position`: the end of the consistent prefix, as the storage counts). The
  // storage's error when it cannot be read, cut or cleared; Replay: kNotFound when it holds no
  // journal. A compacted journal (JournalStorage::Compacted) replays its snapshot first; a
  // snapshot that cannot be read or is of an unknown version is kCorrupt naming "journal
  // snapshot", and Open then cuts nothing (the records it stands for are gone).
  static StatusOr<std::unique_ptr<Journal>> Open(std::unique_ptr<JournalStorage> storage);
  static StatusOr<std::unique_ptr<Journal>> Create(std::unique_ptr<JournalStorage> storage);
  static StatusOr<JournalState> Replay(JournalStorage& storage, std::vector<std::string>* warnings,
                                       uint64_t* consistent_position = nullptr);

  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const JournalState& state() const { return state_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  // The storage's name: the file's path.
  const std::string& path() const { return storage_->name(); }

  // Each appends one record, fsyncs it, and applies it to state(). The storage's error when the
  // write failed (a file: the Env's, kResourceExhausted for a full disk, kInternal otherwise; the
  // state is then unchanged and no part of the record stays in the file), kInvalidArgument when a
  // field is out of bounds or the record does not fit the state (nothing is written then).
  Status RecordJob(const std::string& job, int32_t initial_workers, int32_t max_workers,
                   const std::string& bind = "", int32_t spares = 0);
  Status RecordJoin(const JournalWorker& worker);
  Status RecordWorkerState(const std::string& id, JournalWorkerState state);
  Status RecordIds(const std::vector<std::string>& ids);
  // The two records that list every member take their lists by value: a caller that moves them
  // in saves a copy of N workers. A commit whose members are the workers of the build begun for
  // its generation (the same ids, hosts, devices and pids, in the same order) is written with a
  // reference to that begin record instead of the list (docs/journal.md).
  Status RecordChangeBegun(uint64_t target, ChangeKind kind, std::vector<JournalWorker> workers);
  // A change begun with the committed generation's members, by rank, less those at the ranks in
  // `dropped` (ascending), then the `added` workers (a pause of all of them: neither; a grow:
  // only added; a shrink or a recovery: dropped, and standby workers added): written with a
  // reference to that generation and the difference. kInvalidArgument when nothing is committed.
  Status RecordChangeBegunOfCommitted(uint64_t target, ChangeKind kind,
                                      std::vector<int32_t> dropped = {},
                                      std::vector<JournalWorker> added = {});
  Status RecordCommit(JournalGeneration generation);
  // A commit whose members are the workers of the build begun for its generation, whatever
  // generation.members holds (the caller knows they are the same): kInvalidArgument when that
  // build is not the change in flight.
  Status RecordCommitOfBegun(JournalGeneration generation);
  // `bytes`: the shard files' total size; `seconds`: the save time (the slowest rank's write
  // plus the commit). Each -1 when not known (then not written).
  Status RecordCheckpoint(int64_t step, uint64_t generation, const std::string& dir,
                          int64_t bytes = -1, double seconds = -1);
  Status RecordResize(const JournalResize& resize);
  // How the resize ended: `done` (the job runs at the size asked) or failed, and the committed
  // generation it ended at.
  Status RecordResizeEnd(bool done, uint64_t generation);
  // A resize (host empty) or drain (of `host`) the coordinator refused, and why: an event for
  // GET /v1/events; no state of the job's (replay skips it).
  Status RecordResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                             const std::string& why);
  // A host the coordinator declared lost (its agent silent while its workers missed their
  // deadlines), with why and the workers that left the job with it: an event for GET /v1/events;
  // no state of the job's (replay skips it; the workers' own `worker` records carry that).
  // A recovery whose live workers fit no layout, and why: it waits for workers. An event for
  // GET /v1/events; no state of the job's (replay skips it).
  Status RecordWaiting(const std::string& why);
  Status RecordHostLost(const std::string& host, const std::string& why,
                        const std::vector<std::string>& workers);
  // `spares` -1: the spares kept do not change.
  Status RecordTarget(int32_t workers, int32_t spares = -1);
  // The training state the workers registered (recorded once, when the first one joined).
  Status RecordState(const StateSpec& state);
  // `checkpoint_step` and `checkpoint_dir`: the job's last committed checkpoint (the one a
  // --resume starts from), written only when there is one (step >= 0).
  Status RecordEnd(JobOutcome outcome, const std::string& reason, int64_t checkpoint_step = -1,
                   const std::string& checkpoint_dir = "");

  // Compaction (docs/ha.md, "Compaction"; a storage that can: etcd's). Every `records` records
  // (0, the default: never), MaybeCompact replaces the records written so far with a snapshot of
  // state() (EncodeJournalSnapshot), when no change is in flight.
  void set_compact_every(uint64_t records) {
    compact_every_ = records;
    next_compaction_ = compacted_ + records;
  }
  // Compacts when `compact_every` records were written since the last snapshot (or the last try)
  // and no change is in flight; OK when not due. Errors as Compact's.
  Status MaybeCompact();
  // Replaces the records written so far with a snapshot of state(), first checked to replay to
  // it: kInternal when it does not (nothing written), else the storage's error
  // (kFailedPrecondition for a storage that cannot compact, or when its fence refused it).
  Status Compact();
  // The position the journal's snapshot ends at; 0 when it was never compacted.
  uint64_t compacted() const { return compacted_; }

  // CRC-32C (Castagnoli) of `data`.
  static uint32_t Crc32c(const void* data, size_t size) {
    return ::elastra::journal::Crc32c(data, size);
  }

 private:
  Journal(std::unique_ptr<JournalStorage> storage, JournalState state,
          std::vector<std::string> warnings);
  // The one append path of every Record* function: encodes `record` (records.h), checks its size
  // and the record against state_, writes it to the storage and applies it to state_.
  Status Append(JournalRecord&& record);
  Status AppendCommit(JournalGeneration generation, bool members_begun);

  std::unique_ptr<JournalStorage> storage_;
  JournalState state_;
  std::vector<std::string> warnings_;
  uint64_t compacted_ = 0;
  uint64_t compact_every_ = 0;
  uint64_t next_compaction_ = 0;  // MaybeCompact's next try, as state_.records counts
};

}  // namespace elastra::journal
