#include "journal/journal.h"

#include <algorithm>
#include <utility>

#include "common/logging.h"
#include "journal/records.h"

namespace elastra::journal {

const char* ToString(JournalWorkerState v) {
  switch (v) {
    case JournalWorkerState::kFinished:
      return "finished";
    case JournalWorkerState::kLost:
      return "lost";
    case JournalWorkerState::kRemoved:
      return "removed";
  }
  return "unknown";
}

const char* ToString(ChangeKind v) {
  switch (v) {
    case ChangeKind::kPause:
      return "pause";
    case ChangeKind::kRecover:
      return "recover";
    case ChangeKind::kBuild:
      return "build";
  }
  return "unknown";
}

const char* ToString(JobOutcome v) {
  switch (v) {
    case JobOutcome::kFinished:
      return "finished";
    case JobOutcome::kFailed:
      return "failed";
  }
  return "unknown";
}

namespace {

// FromString over the names ToString gives, for enums numbered 0..last.
template <class E>
bool ParseName(std::string_view name, E last, E* out) {
  for (int v = 0; v <= static_cast<int>(last); ++v) {
    if (name == ToString(static_cast<E>(v))) {
      *out = static_cast<E>(v);
      return true;
    }
  }
  return false;
}

}  // namespace

bool FromString(std::string_view name, JournalWorkerState* out) {
  return ParseName(name, JournalWorkerState::kRemoved, out);
}
bool FromString(std::string_view name, ChangeKind* out) {
  return ParseName(name, ChangeKind::kBuild, out);
}
bool FromString(std::string_view name, JobOutcome* out) {
  return ParseName(name, JobOutcome::kFailed, out);
}

StatusOr<JournalState> Journal::Replay(const std::string& path, std::vector<std::string>* warnings,
                                       uint64_t* consistent_bytes, Env* env) {
  FileJournalStorage storage(path, env);
  return Replay(storage, warnings, consistent_bytes);
}

StatusOr<JournalState> Journal::Replay(JournalStorage& storage, std::vector<std::string>* warnings,
                                       uint64_t* consistent_position) {
  JournalState state;
  std::string refused;  // why the records refused the record the storage stopped at
  JournalDamage damage;
  // A compacted journal's first payload is its snapshot, the state of the records before it.
  ELASTRA_ASSIGN_OR_RETURN(const uint64_t compacted, storage.Compacted());
  Status snapshot = OkStatus();
  auto read = storage.Read(
      0,
      [&](std::string_view payload, uint64_t next) {
        if (compacted > 0 && state.records == 0) {
          snapshot = next == compacted
                         ? ApplyJournalSnapshot(payload, &state)
                         : CorruptError("journal snapshot ends at record " + std::to_string(next) +
                                        ", not " + std::to_string(compacted));
          state.records = next;
          return snapshot.ok();
        }
        auto record = DecodeJournalRecord(payload, state);
        if (!record.ok()) {
          refused = record.status().message();
          return false;
        }
        ApplyJournalRecord(std::move(record).value(), &state);
        return true;
      },
      &damage);
  if (!read.ok()) return read.status();
  if (compacted > 0 && (!snapshot.ok() || *read < compacted)) {
    // Never a prefix to cut back to: the records the snapshot stands for are gone.
    return CorruptError("journal " + storage.name() + ": " +
                        (snapshot.ok() ? "journal snapshot: " + damage.why : snapshot.message()) +
                        "; the records before " + std::to_string(compacted) +
                        " are only in it, so the journal is not opened");
  }
  const std::string& why = refused.empty() ? damage.why : refused;
  if (!why.empty()) {
    std::string line = "journal " + storage.name() + ": " + why + " at byte " +
                       std::to_string(*read) + " of " + std::to_string(damage.end) +
                       "; using the " + std::to_string(state.records) + " record(s) before it";
    LOG(WARNING) << line;
    if (warnings != nullptr) warnings->push_back(std::move(line));
  }
  if (consistent_position != nullptr) *consistent_position = *read;
  return state;
}

Journal::Journal(std::unique_ptr<JournalStorage> storage, JournalState state,
                 std::vector<std::string> warnings)
    : storage_(std::move(storage)), state_(std::move(state)), warnings_(std::move(warnings)) {}

Journal::~Journal() = default;

StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path, Env* env) {
  return Open(std::make_unique<FileJournalStorage>(path, env));
}

StatusOr<std::unique_ptr<Journal>> Journal::Create(const std::string& path, Env* env) {
  return Create(std::make_unique<FileJournalStorage>(path, env));
}

StatusOr<std::unique_ptr<Journal>> Journal::Open(std::unique_ptr<JournalStorage> storage) {
  std::vector<std::string> warnings;
  uint64_t good = 0;
  JournalState state;
  auto replayed = Replay(*storage, &warnings, &good);
  if (replayed.ok()) {
    state = std::move(replayed).value();
  } else if (replayed.status().code() != StatusCode::kNotFound) {
    return replayed.status();
  }
  // A copy of what is cut off is kept when replay met bad bytes there.
  ELASTRA_RETURN_IF_ERROR(storage->CutAfter(good, /*keep_copy=*/!warnings.empty()));
  ELASTRA_ASSIGN_OR_RETURN(const uint64_t compacted, storage->Compacted());
  auto journal = std::unique_ptr<Journal>(
      new Journal(std::move(storage), std::move(state), std::move(warnings)));
  journal->compacted_ = compacted;
  return journal;
}

Status Journal::MaybeCompact() {
  if (compact_every_ == 0 || state_.empty() || state_.change_in_flight ||
      state_.records < next_compaction_) {
    return OkStatus();
  }
  // The next try after as many records again, whether this one succeeds or not.
  next_compaction_ = state_.records + compact_every_;
  return Compact();
}

Status Journal::Compact() {
  if (state_.empty()) return FailedPreconditionError("journal " + path() + ": nothing to compact");
  const std::string snapshot = EncodeJournalSnapshot(state_);
  JournalState replayed;
  Status check = ApplyJournalSnapshot(snapshot, &replayed);
  if (check.ok() && !SameJournalState(replayed, state_)) {
    check = InternalError("it replays to another state");
  }
  if (!check.ok()) {
    return InternalError("journal " + path() + ": the journal snapshot at record " +
                         std::to_string(state_.records) + " is not written: " + check.message());
  }
  ELASTRA_RETURN_IF_ERROR(storage_->Compact(state_.records, snapshot));
  compacted_ = state_.records;
  return OkStatus();
}

StatusOr<std::unique_ptr<Journal>> Journal::Create(std::unique_ptr<JournalStorage> storage) {
  ELASTRA_RETURN_IF_ERROR(storage->Clear());
  return std::unique_ptr<Journal>(new Journal(std::move(storage), JournalState{}, {}));
}

Status Journal::Append(JournalRecord&& record) {
  const std::string payload = EncodeJournalRecord(&record);
  if (payload.size() > storage_->max_payload_bytes()) {
    return InvalidArgumentError("journal record of " + std::to_string(payload.size()) +
                                " bytes is over the limit");
  }
  // Checked before the write, applied in place after it: the state is never copied.
  Status checked = CheckJournalRecord(record, state_);
  if (!checked.ok()) return InvalidArgumentError("journal record refused: " + checked.message());
  Status written = storage_->Append(payload);
  if (!written.ok()) return written;
  ApplyJournalRecord(std::move(record), &state_);
  return OkStatus();
}

namespace {

JournalRecord Typed(JournalRecordType type) {
  JournalRecord record;
  record.type = type;
  return record;
}

}  // namespace

Status Journal::RecordJob(const std::string& job, int32_t initial_workers, int32_t max_workers,
                          const std::string& bind, int32_t spares) {
  JournalRecord record = Typed(JournalRecordType::kJob);
  record.job = job;
  record.initial_workers = initial_workers;
  record.max_workers = max_workers;
  record.spares = spares;
  record.has_bind = true;
  record.bind = bind;
  return Append(std::move(record));
}

Status Journal::RecordJoin(const JournalWorker& worker) {
  JournalRecord record = Typed(JournalRecordType::kJoin);
  record.worker = worker;
  return Append(std::move(record));
}

Status Journal::RecordWorkerState(const std::string& id, JournalWorkerState state) {
  JournalRecord record = Typed(JournalRecordType::kWorker);
  record.id = id;
  record.worker_state = state;
  return Append(std::move(record));
}

Status Journal::RecordIds(const std::vector<std::string>& ids) {
  JournalRecord record = Typed(JournalRecordType::kIds);
  record.ids = ids;
  return Append(std::move(record));
}

Status Journal::RecordChangeBegun(uint64_t target, ChangeKind kind,
                                  std::vector<JournalWorker> workers) {
  JournalRecord record = Typed(JournalRecordType::kBegin);
  record.target = target;
  record.kind = kind;
  record.workers = std::move(workers);
  return Append(std::move(record));
}

Status Journal::RecordChangeBegunOfCommitted(uint64_t target, ChangeKind kind,
                                             std::vector<int32_t> dropped,
                                             std::vector<JournalWorker> added) {
  if (state_.current() == nullptr) {
    return InvalidArgumentError("journal record refused: no generation is committed");
  }
  JournalRecord record = Typed(JournalRecordType::kBegin);
  record.target = target;
  record.kind = kind;
  record.workers_of = state_.current()->generation;
  record.dropped = std::move(dropped);
  record.workers = std::move(added);
  return Append(std::move(record));
}

namespace {

bool SameWorkers(const std::vector<JournalWorker>& a, const std::vector<JournalWorker>& b) {
  return std::equal(
      a.begin(), a.end(), b.begin(), b.end(), [](const JournalWorker& x, const JournalWorker& y) {
        return x.id == y.id && x.host == y.host && x.device == y.device && x.pid == y.pid;
      });
}

}  // namespace

Status Journal::RecordCommit(JournalGeneration g) {
  // The members the build of this generation began with, as its begin record listed them (the
  // usual commit): the record refers to that begin instead of listing them again.
  const bool begun = state_.change_in_flight && state_.change_kind == ChangeKind::kBuild &&
                     state_.change_target == g.generation &&
                     SameWorkers(g.members, state_.change_workers);
  return AppendCommit(std::move(g), begun);
}

Status Journal::RecordCommitOfBegun(JournalGeneration g) {
  return AppendCommit(std::move(g), true);
}

Status Journal::AppendCommit(JournalGeneration g, bool members_begun) {
  JournalRecord record = Typed(JournalRecordType::kCommit);
  record.members_begun = members_begun;
  if (members_begun) g.members.clear();
  record.generation = std::move(g);
  return Append(std::move(record));
}

Status Journal::RecordCheckpoint(int64_t step, uint64_t generation, const std::string& dir,
                                 int64_t bytes, double seconds) {
  JournalRecord record = Typed(JournalRecordType::kCheckpoint);
  record.checkpoint = JournalCheckpoint{step, generation, dir};
  record.checkpoint_bytes = bytes;
  record.checkpoint_seconds = seconds;
  return Append(std::move(record));
}

Status Journal::RecordHostLost(const std::string& host, const std::string& why,
                               const std::vector<std::string>& workers) {
  JournalRecord record = Typed(JournalRecordType::kHostLost);
  record.host = host;
  record.why = why;
  record.ids = workers;
  return Append(std::move(record));
}

Status Journal::RecordWaiting(const std::string& why) {
  JournalRecord record = Typed(JournalRecordType::kWaiting);
  record.why = why;
  return Append(std::move(record));
}

Status Journal::RecordResize(const JournalResize& resize) {
  JournalRecord record = Typed(JournalRecordType::kResize);
  record.resize = resize;
  return Append(std::move(record));
}

Status Journal::RecordResizeEnd(bool done, uint64_t generation) {
  JournalRecord record = Typed(JournalRecordType::kResizeEnd);
  record.resize_done = done;
  record.resize_generation = generation;
  return Append(std::move(record));
}

Status Journal::RecordResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                                    const std::string& why) {
  JournalRecord record = Typed(JournalRecordType::kResizeRefused);
  record.resize.workers = workers;
  record.resize.has_layout = layout != nullptr;
  if (layout != nullptr) record.resize.layout = *layout;
  record.host = host;
  record.why = why;
  return Append(std::move(record));
}

Status Journal::RecordState(const StateSpec& state) {
  JournalRecord record = Typed(JournalRecordType::kState);
  record.state = state;
  return Append(std::move(record));
}

Status Journal::RecordTarget(int32_t workers, int32_t spares) {
  JournalRecord record = Typed(JournalRecordType::kTarget);
  record.target_workers = workers;
  record.spares = spares;
  return Append(std::move(record));
}

Status Journal::RecordEnd(JobOutcome outcome, const std::string& reason, int64_t checkpoint_step,
                          const std::string& checkpoint_dir) {
  JournalRecord record = Typed(JournalRecordType::kEnd);
  record.outcome = outcome;
  record.reason = reason;
  record.end_checkpoint_step = checkpoint_step;
  record.end_checkpoint_dir = checkpoint_dir;
  return Append(std::move(record));
}

}  // namespace elastra::journal
