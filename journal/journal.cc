#include "journal/journal.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <span>
#include <utility>

#include "protocol/codec.h"
#include "common/logging.h"
#include "journal/records.h"

namespace elastra::journal {
namespace {

using nlohmann::json;

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}

// JSON text of a record; bytes that are not UTF-8 (a worker id from the wire) are replaced.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// kInvalidArgument for a record's text over the journal's bound.
Status CheckRecordSize(const std::string& payload) {
  if (payload.size() <= Journal::kMaxRecordBytes) return OkStatus();
  return InvalidArgumentError("journal record of " + std::to_string(payload.size()) +
                              " bytes is over the limit");
}

// The record's JSON text, and the record as replay will read it back. Dump replaces bytes that
// are not UTF-8, so such a record is read back from its text; any other reads back as built.
std::string DumpForReplay(json* r) {
  try {
    return r->dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const json::type_error&) {
    std::string text = Dump(*r);
    *r = json::parse(text, nullptr, /*allow_exceptions=*/false);
    return text;
  }
}

std::string Frame(const std::string& payload) {
  std::string out(Journal::kHeaderBytes, '\0');
  auto* h = reinterpret_cast<uint8_t*>(out.data());
  PutU32(h, Journal::kMagic);
  PutU32(h + 4, static_cast<uint32_t>(payload.size()));
  PutU32(h + 8, Journal::Crc32c(payload.data(), payload.size()));
  out += payload;
  return out;
}

// Copies `from` to `to` (mode 0600, replaced when it exists) in bounded pieces.
Status CopyFile(Env* env, const std::string& from, const std::string& to) {
  ELASTRA_ASSIGN_OR_RETURN(auto in, env->NewRandomAccessFile(from));
  ELASTRA_ASSIGN_OR_RETURN(const uint64_t size, in->Size());
  ELASTRA_ASSIGN_OR_RETURN(auto out, env->NewAppendableFile(to));
  ELASTRA_RETURN_IF_ERROR(env->TruncateFile(to, 0));
  std::vector<std::byte> buffer(std::min<uint64_t>(size, 1u << 20));
  for (uint64_t at = 0; at < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), size - at));
    ELASTRA_RETURN_IF_ERROR(in->Read(at, n, buffer.data()));
    ELASTRA_RETURN_IF_ERROR(out->Append(std::span<const std::byte>(buffer.data(), n)));
    at += n;
  }
  ELASTRA_RETURN_IF_ERROR(out->Sync());
  return out->Close();
}

}  // namespace

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

uint32_t Journal::Crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t c = 0xFFFFFFFFu;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

StatusOr<JournalState> Journal::Replay(const std::string& path, std::vector<std::string>* warnings,
                                       uint64_t* consistent_bytes, Env* env) {
  auto opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no journal at " + path);
    }
    return InternalError("opening the journal " + path + ": " + opened.status().message());
  }
  const std::unique_ptr<RandomAccessFile> file = std::move(opened).value();
  auto size = file->Size();
  if (!size.ok()) {
    return InternalError("reading the journal " + path + ": " + size.status().message());
  }
  const uint64_t file_size = *size;
  JournalState state;
  uint64_t offset = 0;
  auto warn = [&](const std::string& why) {
    std::string line = "journal " + path + ": " + why + " at byte " + std::to_string(offset) +
                       " of " + std::to_string(file_size) + "; using the " +
                       std::to_string(state.records) + " record(s) before it";
    LOG(WARNING) << line;
    if (warnings != nullptr) warnings->push_back(line);
  };
  auto read = [&](uint64_t at, size_t n, void* out) {
    Status s = file->Read(at, n, static_cast<std::byte*>(out));
    return s.ok() ? s : InternalError("reading the journal " + path + ": " + s.message());
  };
  std::string payload;
  while (offset < file_size) {
    if (file_size - offset < kHeaderBytes) {
      warn("torn record header (the writer was stopped mid-write)");
      break;
    }
    uint8_t header[kHeaderBytes];
    ELASTRA_RETURN_IF_ERROR(read(offset, kHeaderBytes, header));
    const uint32_t magic = GetU32(header);
    const uint32_t length = GetU32(header + 4);
    const uint32_t crc = GetU32(header + 8);
    if (magic != kMagic) {
      warn("bad record magic");
      break;
    }
    if (length > kMaxRecordBytes) {
      warn("record length " + std::to_string(length) + " over the limit");
      break;
    }
    if (offset + kHeaderBytes + length > file_size) {
      warn("torn record (the file ends inside it; the writer was stopped mid-write)");
      break;
    }
    payload.resize(length);
    ELASTRA_RETURN_IF_ERROR(read(offset + kHeaderBytes, length, payload.data()));
    if (Crc32c(payload.data(), payload.size()) != crc) {
      warn("record checksum mismatch");
      break;
    }
    json r = json::parse(payload, nullptr, /*allow_exceptions=*/false);
    if (r.is_discarded()) {
      warn("record is not JSON");
      break;
    }
    auto record = ReadJournalRecord(r, state);
    if (!record.ok()) {
      warn("inconsistent record (" + record.status().message() + ")");
      break;
    }
    ApplyJournalRecord(std::move(record).value(), &state);
    offset += kHeaderBytes + length;
  }
  if (consistent_bytes != nullptr) *consistent_bytes = offset;
  return state;
}

Journal::Journal(std::string path, Env* env,
                 std::unique_ptr<WritableFile> file, uint64_t size, JournalState state,
                 std::vector<std::string> warnings)
    : path_(std::move(path)),
      env_(env),
      file_(std::move(file)),
      size_(size),
      state_(std::move(state)),
      warnings_(std::move(warnings)) {}

Journal::~Journal() { file_->Close().IgnoreError(); }

StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path, Env* env) {
  std::vector<std::string> warnings;
  uint64_t good = 0;
  JournalState state;
  auto replayed = Replay(path, &warnings, &good, env);
  if (replayed.ok()) {
    state = std::move(replayed).value();
  } else if (replayed.status().code() != StatusCode::kNotFound) {
    return replayed.status();
  }
  auto file = env->NewAppendableFile(path);
  if (!file.ok()) {
    return InternalError("opening the journal " + path + ": " + file.status().message());
  }
  auto size = env->GetFileSize(path);
  if (!size.ok()) {
    return InternalError("opening the journal " + path + ": " + size.status().message());
  }
  if (*size != good) {
    // Bad bytes after the consistent prefix: keep a copy for inspection, then cut them off so the
    // next record follows the last good one.
    if (!warnings.empty()) CopyFile(env, path, path + ".corrupt").IgnoreError();
    Status cut = env->TruncateFile(path, good);
    if (!cut.ok()) {
      return InternalError("cutting the journal " + path +
                           " back to its consistent part: " + cut.message());
    }
  }
  env->SyncDir(DirName(path)).IgnoreError();
  return std::unique_ptr<Journal>(
      new Journal(path, env, std::move(file).value(), good, std::move(state), std::move(warnings)));
}

StatusOr<std::unique_ptr<Journal>> Journal::Create(const std::string& path, Env* env) {
  auto file = env->NewAppendableFile(path);
  Status s = file.status();
  if (s.ok()) s = env->TruncateFile(path, 0);
  if (!s.ok()) return InternalError("creating the journal " + path + ": " + s.message());
  env->SyncDir(DirName(path)).IgnoreError();
  return std::unique_ptr<Journal>(
      new Journal(path, env, std::move(file).value(), 0, JournalState{}, {}));
}

Status Journal::Append(json r) {
  const std::string payload = DumpForReplay(&r);
  ELASTRA_RETURN_IF_ERROR(CheckRecordSize(payload));
  // Read and checked before the write, applied in place after it: the state is never copied.
  auto record = ReadJournalRecord(r, state_);
  if (!record.ok()) {
    return InvalidArgumentError("journal record refused: " + record.status().message());
  }
  return Write(payload, std::move(record).value());
}

Status Journal::AppendChange(JournalRecord&& record) {
  const std::string text = ChangeRecordText(&record);
  ELASTRA_RETURN_IF_ERROR(CheckRecordSize(text));
  Status checked = CheckChangeRecord(record, state_);
  if (!checked.ok()) return InvalidArgumentError("journal record refused: " + checked.message());
  // The state holds what replay reads back, and replay does not read these two.
  record.generation.reached_step = -1;
  record.generation.restore_step = -1;
  return Write(text, std::move(record));
}

Status Journal::Write(const std::string& payload, JournalRecord&& record) {
  const std::string frame = Frame(payload);
  Status s = file_->Append(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(frame.data()), frame.size()));
  if (s.ok()) s = file_->Sync();
  if (!s.ok()) {
    // Leave no part of the record behind for the next append to follow.
    env_->TruncateFile(path_, size_).IgnoreError();
    return s.WithContext("appending to the journal");
  }
  size_ += frame.size();
  ApplyJournalRecord(std::move(record), &state_);
  return OkStatus();
}

Status Journal::RecordJob(const std::string& job, int32_t initial_workers, int32_t max_workers,
                          const std::string& bind) {
  return Append(json{{"t", "job"},
                     {"version", 1},
                     {"job", job},
                     {"initial_workers", initial_workers},
                     {"max_workers", max_workers},
                     {"bind", bind}});
}

Status Journal::RecordJoin(const JournalWorker& worker) {
  json w = WorkerJson(worker);
  if (!worker.rendezvous.empty()) w["rv"] = HexOf(worker.rendezvous);
  return Append(json{{"t", "join"}, {"worker", std::move(w)}});
}

Status Journal::RecordWorkerState(const std::string& id, JournalWorkerState state) {
  return Append(json{{"t", "worker"}, {"id", id}, {"state", ToString(state)}});
}

Status Journal::RecordIds(const std::vector<std::string>& ids) {
  return Append(json{{"t", "ids"}, {"ids", ids}});
}

Status Journal::RecordChangeBegun(uint64_t target, ChangeKind kind,
                                  std::vector<JournalWorker> workers) {
  JournalRecord record;
  record.type = JournalRecordType::kBegin;
  record.target = target;
  record.kind = kind;
  record.workers = std::move(workers);
  return AppendChange(std::move(record));
}

Status Journal::RecordChangeBegunOfCommitted(uint64_t target, ChangeKind kind,
                                             std::vector<int32_t> dropped,
                                             std::vector<JournalWorker> added) {
  if (state_.current() == nullptr) {
    return InvalidArgumentError("journal record refused: no generation is committed");
  }
  JournalRecord record;
  record.type = JournalRecordType::kBegin;
  record.target = target;
  record.kind = kind;
  record.workers_of = state_.current()->generation;
  record.dropped = std::move(dropped);
  record.workers = std::move(added);
  return AppendChange(std::move(record));
}

namespace {

bool SameWorkers(const std::vector<JournalWorker>& a, const std::vector<JournalWorker>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                    [](const JournalWorker& x, const JournalWorker& y) {
                      return x.id == y.id && x.host == y.host && x.device == y.device &&
                             x.pid == y.pid;
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

Status Journal::RecordCommitOfBegun(JournalGeneration g) { return AppendCommit(std::move(g), true); }

Status Journal::AppendCommit(JournalGeneration g, bool members_begun) {
  JournalRecord record;
  record.type = JournalRecordType::kCommit;
  record.members_begun = members_begun;
  if (members_begun) g.members.clear();
  record.generation = std::move(g);
  return AppendChange(std::move(record));
}

Status Journal::RecordCheckpoint(int64_t step, uint64_t generation, const std::string& dir,
                                 int64_t bytes, double seconds) {
  json r = {{"t", "checkpoint"}, {"step", step}, {"generation", generation}, {"dir", dir}};
  if (bytes >= 0) r["bytes"] = bytes;
  if (seconds >= 0) r["seconds"] = seconds;
  return Append(std::move(r));
}

Status Journal::RecordHostLost(const std::string& host, const std::string& why,
                               const std::vector<std::string>& workers) {
  return Append(json{{"t", "host_lost"}, {"host", host}, {"why", why}, {"workers", workers}});
}

Status Journal::RecordResize(const JournalResize& z) {
  return Append(json{{"t", "resize"},
                     {"workers", z.workers},
                     {"has_layout", z.has_layout},
                     {"layout", LayoutJson(z.layout)}});
}

Status Journal::RecordResizeEnd(bool done, uint64_t generation) {
  return Append(json{{"t", "resize_end"}, {"outcome", done ? "done" : "failed"},
                     {"generation", generation}});
}

Status Journal::RecordResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                                    const std::string& why) {
  json r = {{"t", "resize_refused"}, {"workers", workers}, {"error", why}};
  if (layout != nullptr) r["layout"] = LayoutJson(*layout);
  if (!host.empty()) r["host"] = host;
  return Append(std::move(r));
}

Status Journal::RecordState(const StateSpec& state) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : proto::EncodePayload(state)) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return Append(json{{"t", "state"}, {"spec", hex}});
}

Status Journal::RecordTarget(int32_t workers) {
  return Append(json{{"t", "target"}, {"workers", workers}});
}

Status Journal::RecordEnd(JobOutcome outcome, const std::string& reason, int64_t checkpoint_step,
                          const std::string& checkpoint_dir) {
  json r{{"t", "end"}, {"outcome", ToString(outcome)}, {"reason", reason}};
  if (checkpoint_step >= 0) {
    r["checkpoint_step"] = checkpoint_step;
    r["checkpoint_dir"] = checkpoint_dir;
  }
  return Append(r);
}

}  // namespace elastra::journal
