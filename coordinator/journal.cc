#include "coordinator/journal.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <span>

#include "common/codec.h"
#include "common/logging.h"

namespace elastra::coordinator {
namespace {

using nlohmann::json;

// Bounds on what a record may hold (a record within them is at most a few MiB).
constexpr size_t kMaxWorkers = 1 << 16;  // the CLI's most workers in a job (launch/cli.h)
constexpr size_t kMaxString = 4096;
constexpr size_t kMaxHistory = 1 << 20;
constexpr size_t kMaxCheckpoints = 1 << 16;

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

// ---- JSON <-> structs, with bounds. Throwing helpers; ApplyRecord turns throws into kCorrupt. --

struct BadRecord {
  std::string why;
};

const json& Field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end()) throw BadRecord{std::string("missing field '") + name + "'"};
  return *it;
}

std::string Str(const json& j, const char* name) {
  const json& v = Field(j, name);
  if (!v.is_string()) throw BadRecord{std::string("field '") + name + "' is not a string"};
  std::string s = v.get<std::string>();
  if (s.size() > kMaxString) throw BadRecord{std::string("field '") + name + "' is too long"};
  return s;
}

int64_t Int(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json& v = Field(j, name);
  if (!v.is_number_integer())
    throw BadRecord{std::string("field '") + name + "' is not an integer"};
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? INT64_MAX
                  : v.get<int64_t>();
  if (x < lo || x > hi) throw BadRecord{std::string("field '") + name + "' is out of range"};
  return x;
}

double Num(const json& j, const char* name) {
  const json& v = Field(j, name);
  if (!v.is_number()) throw BadRecord{std::string("field '") + name + "' is not a number"};
  return v.get<double>();
}

const json& Array(const json& j, const char* name, size_t max) {
  const json& v = Field(j, name);
  if (!v.is_array()) throw BadRecord{std::string("field '") + name + "' is not an array"};
  if (v.size() > max) throw BadRecord{std::string("field '") + name + "' is too long"};
  return v;
}

json LayoutJson(const Layout& l) { return json{{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}}; }
Layout LayoutFrom(const json& j) {
  if (!j.is_object()) throw BadRecord{"layout is not an object"};
  Layout l;
  l.dp = static_cast<int>(Int(j, "dp", 0, 1 << 20));
  l.pp = static_cast<int>(Int(j, "pp", 1, 1 << 20));
  l.tp = static_cast<int>(Int(j, "tp", 1, 1 << 20));
  // Bounded degrees can still multiply past int: world() is trusted only within kMaxWorld.
  if (static_cast<int64_t>(l.dp) * l.pp * l.tp > kMaxWorld) {
    throw BadRecord{"layout " + l.ToString() + " has more than " + std::to_string(kMaxWorld) +
                    " ranks"};
  }
  return l;
}

json WorkerJson(const JournalWorker& w) {
  return json{{"id", w.id}, {"host", w.host}, {"device", w.device}, {"pid", w.pid}};
}
JournalWorker WorkerFrom(const json& j) {
  if (!j.is_object()) throw BadRecord{"worker is not an object"};
  JournalWorker w;
  w.id = Str(j, "id");
  if (w.id.empty()) throw BadRecord{"empty worker id"};
  w.host = Str(j, "host");
  w.device = static_cast<int32_t>(Int(j, "device", -1, INT32_MAX));
  w.pid = Int(j, "pid", 0, INT64_MAX);
  return w;
}
std::vector<JournalWorker> WorkersFrom(const json& j, const char* name) {
  std::vector<JournalWorker> out;
  for (const auto& w : Array(j, name, kMaxWorkers)) out.push_back(WorkerFrom(w));
  return out;
}
json WorkersJson(const std::vector<JournalWorker>& ws) {
  json a = json::array();
  for (const auto& w : ws) a.push_back(WorkerJson(w));
  return a;
}

// The enum named `name`, or a BadRecord naming the field and the unknown name.
template <class E>
E EnumFrom(const json& j, const char* field, const char* what) {
  const std::string name = Str(j, field);
  E v{};
  if (!FromString(name, &v)) throw BadRecord{std::string("unknown ") + what + " '" + name + "'"};
  return v;
}

void EraseStandby(JournalState* s, const std::string& id) {
  s->standby.erase(std::remove_if(s->standby.begin(), s->standby.end(),
                                  [&](const JournalWorker& w) { return w.id == id; }),
                   s->standby.end());
}

// A join or worker record, read whole before it changes anything: these come once per worker and
// are applied in place (the other records copy the state, O(workers x generations): docs/scale.md).
struct WorkerRecord {
  bool join = false;
  JournalWorker worker;  // join
  std::string id;        // worker
  JournalWorkerState state = JournalWorkerState::kRemoved;
};

bool IsWorkerRecord(const json& r) {
  if (!r.is_object()) return false;
  auto t = r.find("t");
  return t != r.end() && t->is_string() && (*t == "join" || *t == "worker");
}

StatusOr<WorkerRecord> ReadWorkerRecord(const json& r, const JournalState& state) {
  try {
    WorkerRecord w;
    w.join = Str(r, "t") == "join";
    if (state.empty()) throw BadRecord{"the first record is not a job record"};
    if (w.join) {
      w.worker = WorkerFrom(Field(r, "worker"));
      if (state.standby.size() >= kMaxWorkers && !state.seen_ids.count(w.worker.id)) {
        throw BadRecord{"too many standby workers"};
      }
    } else {
      w.id = Str(r, "id");
      w.state = EnumFrom<JournalWorkerState>(r, "state", "worker state");
      if (w.state != JournalWorkerState::kRemoved && !state.worker_states.count(w.id) &&
          state.worker_states.size() >= kMaxHistory) {
        throw BadRecord{"too many worker states"};
      }
    }
    return w;
  } catch (const BadRecord& b) {
    return CorruptError(b.why);
  } catch (const std::exception& ex) {
    return CorruptError(ex.what());
  }
}

void ApplyWorkerRecord(const WorkerRecord& w, JournalState* s) {
  if (w.join) {
    // Only a worker seen before can be on the standby list (a retried join).
    if (s->seen_ids.count(w.worker.id)) EraseStandby(s, w.worker.id);
    s->worker_states.erase(w.worker.id);
    s->seen_ids.insert(w.worker.id);
    s->standby.push_back(w.worker);
  } else {
    EraseStandby(s, w.id);
    if (w.state == JournalWorkerState::kRemoved) {
      s->worker_states.erase(w.id);
    } else {
      s->worker_states[w.id] = w.state;
    }
  }
  ++s->records;
}

// Applies one decoded record. The state is changed only when the whole record is valid.
Status ApplyRecord(const json& r, JournalState* state) {
  if (IsWorkerRecord(r)) {
    auto w = ReadWorkerRecord(r, *state);
    if (!w.ok()) return w.status();
    ApplyWorkerRecord(*w, state);
    return OkStatus();
  }
  try {
    if (!r.is_object()) throw BadRecord{"record is not an object"};
    const std::string type = Str(r, "t");
    JournalState s = *state;
    if (s.empty() && type != "job") throw BadRecord{"the first record is not a job record"};
    if (type == "job") {
      if (!s.empty()) throw BadRecord{"a second job record"};
      const int64_t version = Int(r, "version", 0, INT32_MAX);
      if (version != 1) throw BadRecord{"unknown journal version " + std::to_string(version)};
      s.job = Str(r, "job");
      s.initial_workers = static_cast<int32_t>(Int(r, "initial_workers", 0, 1 << 20));
      s.max_workers = static_cast<int32_t>(Int(r, "max_workers", 0, 1 << 20));
      s.target_workers = s.initial_workers;
      if (r.contains("bind")) s.bind = Str(r, "bind");  // absent in older journals
    } else if (type == "join") {
      JournalWorker w = WorkerFrom(Field(r, "worker"));
      EraseStandby(&s, w.id);
      s.worker_states.erase(w.id);
      s.seen_ids.insert(w.id);
      if (s.standby.size() >= kMaxWorkers) throw BadRecord{"too many standby workers"};
      s.standby.push_back(w);
    } else if (type == "worker") {
      const std::string id = Str(r, "id");
      const auto st = EnumFrom<JournalWorkerState>(r, "state", "worker state");
      EraseStandby(&s, id);
      if (st == JournalWorkerState::kRemoved) {
        s.worker_states.erase(id);
      } else {
        if (s.worker_states.size() >= kMaxHistory) throw BadRecord{"too many worker states"};
        s.worker_states[id] = st;
      }
    } else if (type == "ids") {
      for (const auto& id : Array(r, "ids", kMaxWorkers)) {
        if (!id.is_string() || id.get<std::string>().size() > kMaxString) {
          throw BadRecord{"a worker id is not a short string"};
        }
        s.seen_ids.insert(id.get<std::string>());
      }
      if (s.seen_ids.size() > kMaxHistory) throw BadRecord{"too many worker ids"};
    } else if (type == "begin") {
      const uint64_t target = static_cast<uint64_t>(Int(r, "target", 1, INT64_MAX));
      const auto kind = EnumFrom<ChangeKind>(r, "kind", "change kind");
      s.change_in_flight = true;
      s.change_target = target;
      s.change_kind = kind;
      s.change_workers = WorkersFrom(r, "workers");
      s.highest_generation = std::max(s.highest_generation, target);
      for (const auto& w : s.change_workers) s.seen_ids.insert(w.id);
    } else if (type == "commit") {
      JournalGeneration g;
      g.generation = static_cast<uint64_t>(Int(r, "generation", 1, INT64_MAX));
      if (s.current() != nullptr && g.generation <= s.current()->generation) {
        throw BadRecord{"generation " + std::to_string(g.generation) +
                        " committed after generation " + std::to_string(s.current()->generation)};
      }
      const std::string reason = Str(r, "reason");
      if (!proto::FromString(reason, &g.reason)) {
        throw BadRecord{"unknown generation reason '" + reason + "'"};
      }
      g.layout = LayoutFrom(Field(r, "layout"));
      g.members = WorkersFrom(r, "members");
      if (g.members.empty()) throw BadRecord{"a generation without members"};
      if (static_cast<size_t>(g.layout.world()) != g.members.size()) {
        throw BadRecord{"layout " + g.layout.ToString() + " does not match " +
                        std::to_string(g.members.size()) + " members"};
      }
      g.downtime_ms = Num(r, "downtime_ms");
      g.agreement_ms = Num(r, "agreement_ms");
      g.rebuild_ms = Num(r, "rebuild_ms");
      g.transfer_ms = Num(r, "transfer_ms");
      if (s.history.size() >= kMaxHistory) throw BadRecord{"too many generations"};
      for (const auto& m : g.members) {
        EraseStandby(&s, m.id);
        s.worker_states.erase(m.id);
        s.seen_ids.insert(m.id);
      }
      s.highest_generation = std::max(s.highest_generation, g.generation);
      s.history.push_back(std::move(g));
      s.change_in_flight = false;
      s.change_target = 0;
      s.change_kind = ChangeKind::kPause;
      s.change_workers.clear();
    } else if (type == "checkpoint") {
      JournalCheckpoint c;
      c.step = Int(r, "step", 0, INT64_MAX);
      c.generation = static_cast<uint64_t>(Int(r, "generation", 0, INT64_MAX));
      c.dir = Str(r, "dir");
      if (s.checkpoints.size() >= kMaxCheckpoints) s.checkpoints.erase(s.checkpoints.begin());
      s.checkpoints.push_back(std::move(c));
    } else if (type == "resize") {
      JournalResize z;
      z.workers = static_cast<int32_t>(Int(r, "workers", 1, 1 << 20));
      z.has_layout = Field(r, "has_layout").is_boolean() && Field(r, "has_layout").get<bool>();
      z.layout = LayoutFrom(Field(r, "layout"));
      s.resize = z;
      s.target_workers = z.workers;
    } else if (type == "target") {
      s.target_workers = static_cast<int32_t>(Int(r, "workers", 1, 1 << 20));
    } else if (type == "state") {
      // The StateSpec as the wire encodes it, in hex: it came in one frame.
      const json& v = Field(r, "spec");
      if (!v.is_string() || v.get_ref<const std::string&>().size() > 2 * proto::kMaxFrameBytes) {
        throw BadRecord{"field 'spec' is not a string of at most 2 frames of hex"};
      }
      const std::string& hex = v.get_ref<const std::string&>();
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2) {
        auto nibble = [](char c) -> int {
          if (c >= '0' && c <= '9') return c - '0';
          if (c >= 'a' && c <= 'f') return c - 'a' + 10;
          throw BadRecord{"field 'spec' is not hex"};
        };
        bytes.push_back(static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
      }
      auto spec = proto::DecodePayload<StateSpec>(bytes);
      if (hex.size() % 2 != 0 || !spec.ok()) throw BadRecord{"field 'spec' is no state"};
      s.state = std::move(spec).value();
    } else if (type == "resize_end") {
      s.resize.reset();
    } else if (type == "resize_refused" || type == "host_lost") {
      // An event only: the job did not change.
    } else if (type == "end") {
      s.ended = EnumFrom<JobOutcome>(r, "outcome", "outcome");
      s.end_reason = Str(r, "reason");
      s.change_in_flight = false;
      s.resize.reset();
    } else {
      throw BadRecord{"unknown record type '" + type + "'"};
    }
    ++s.records;
    *state = std::move(s);
    return OkStatus();
  } catch (const BadRecord& b) {
    return CorruptError(b.why);
  } catch (const std::exception& ex) {
    return CorruptError(ex.what());
  }
}

// JSON text of a record; bytes that are not UTF-8 (a worker id from the wire) are replaced.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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
Status CopyFile(checkpoint::Env* env, const std::string& from, const std::string& to) {
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
    case JournalWorkerState::kFinished: return "finished";
    case JournalWorkerState::kLost: return "lost";
    case JournalWorkerState::kRemoved: return "removed";
  }
  return "unknown";
}

const char* ToString(ChangeKind v) {
  switch (v) {
    case ChangeKind::kPause: return "pause";
    case ChangeKind::kRecover: return "recover";
    case ChangeKind::kBuild: return "build";
  }
  return "unknown";
}

const char* ToString(JobOutcome v) {
  switch (v) {
    case JobOutcome::kFinished: return "finished";
    case JobOutcome::kFailed: return "failed";
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
                                       uint64_t* consistent_bytes, checkpoint::Env* env) {
  auto opened = env->NewRandomAccessFile(path);
  if (!opened.ok()) {
    if (opened.status().code() == StatusCode::kNotFound) {
      return NotFoundError("no journal at " + path);
    }
    return InternalError("opening the journal " + path + ": " + opened.status().message());
  }
  const std::unique_ptr<checkpoint::RandomAccessFile> file = std::move(opened).value();
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
    Status applied = ApplyRecord(r, &state);
    if (!applied.ok()) {
      warn("inconsistent record (" + applied.message() + ")");
      break;
    }
    offset += kHeaderBytes + length;
  }
  if (consistent_bytes != nullptr) *consistent_bytes = offset;
  return state;
}

Journal::Journal(std::string path, checkpoint::Env* env,
                 std::unique_ptr<checkpoint::WritableFile> file, uint64_t size, JournalState state,
                 std::vector<std::string> warnings)
    : path_(std::move(path)),
      env_(env),
      file_(std::move(file)),
      size_(size),
      state_(std::move(state)),
      warnings_(std::move(warnings)) {}

Journal::~Journal() { file_->Close().IgnoreError(); }

StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& path, checkpoint::Env* env) {
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
  env->SyncDir(checkpoint::DirName(path)).IgnoreError();
  return std::unique_ptr<Journal>(new Journal(path, env, std::move(file).value(), good,
                                              std::move(state), std::move(warnings)));
}

StatusOr<std::unique_ptr<Journal>> Journal::Create(const std::string& path, checkpoint::Env* env) {
  auto file = env->NewAppendableFile(path);
  Status s = file.status();
  if (s.ok()) s = env->TruncateFile(path, 0);
  if (!s.ok()) return InternalError("creating the journal " + path + ": " + s.message());
  env->SyncDir(checkpoint::DirName(path)).IgnoreError();
  return std::unique_ptr<Journal>(
      new Journal(path, env, std::move(file).value(), 0, JournalState{}, {}));
}

Status Journal::Append(const std::string& payload) {
  if (payload.size() > kMaxRecordBytes) {
    return InvalidArgumentError("journal record of " + std::to_string(payload.size()) +
                                " bytes is over the limit");
  }
  json r = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  // A join or worker record is read first and applied in place once written; any other record is
  // applied to a copy of the state.
  std::optional<WorkerRecord> worker;
  JournalState next;
  if (IsWorkerRecord(r)) {
    auto w = ReadWorkerRecord(r, state_);
    if (!w.ok()) return InvalidArgumentError("journal record refused: " + w.status().message());
    worker = std::move(w).value();
  } else {
    next = state_;
    Status applied = ApplyRecord(r, &next);
    if (!applied.ok()) return InvalidArgumentError("journal record refused: " + applied.message());
  }
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
  if (worker) {
    ApplyWorkerRecord(*worker, &state_);
  } else {
    state_ = std::move(next);
  }
  return OkStatus();
}

Status Journal::RecordJob(const std::string& job, int32_t initial_workers, int32_t max_workers,
                          const std::string& bind) {
  return Append(Dump(json{{"t", "job"},
                          {"version", 1},
                          {"job", job},
                          {"initial_workers", initial_workers},
                          {"max_workers", max_workers},
                          {"bind", bind}}));
}

Status Journal::RecordJoin(const JournalWorker& worker) {
  return Append(Dump(json{{"t", "join"}, {"worker", WorkerJson(worker)}}));
}

Status Journal::RecordWorkerState(const std::string& id, JournalWorkerState state) {
  return Append(Dump(json{{"t", "worker"}, {"id", id}, {"state", ToString(state)}}));
}

Status Journal::RecordIds(const std::vector<std::string>& ids) {
  return Append(Dump(json{{"t", "ids"}, {"ids", ids}}));
}

Status Journal::RecordChangeBegun(uint64_t target, ChangeKind kind,
                                  const std::vector<JournalWorker>& workers) {
  return Append(Dump(json{{"t", "begin"},
                          {"target", target},
                          {"kind", ToString(kind)},
                          {"workers", WorkersJson(workers)}}));
}

Status Journal::RecordCommit(const JournalGeneration& g) {
  json r = {{"t", "commit"},
            {"generation", g.generation},
            {"reason", proto::ToString(g.reason)},
            {"layout", LayoutJson(g.layout)},
            {"members", WorkersJson(g.members)},
            {"downtime_ms", g.downtime_ms},
            {"agreement_ms", g.agreement_ms},
            {"rebuild_ms", g.rebuild_ms},
            {"transfer_ms", g.transfer_ms}};
  if (g.reached_step >= 0 && g.restore_step >= 0) {
    r["reached_step"] = g.reached_step;
    r["restore_step"] = g.restore_step;
  }
  return Append(Dump(r));
}

Status Journal::RecordCheckpoint(int64_t step, uint64_t generation, const std::string& dir,
                                 int64_t bytes, double seconds) {
  json r = {{"t", "checkpoint"}, {"step", step}, {"generation", generation}, {"dir", dir}};
  if (bytes >= 0) r["bytes"] = bytes;
  if (seconds >= 0) r["seconds"] = seconds;
  return Append(Dump(r));
}

Status Journal::RecordHostLost(const std::string& host, const std::string& why,
                               const std::vector<std::string>& workers) {
  return Append(Dump(json{{"t", "host_lost"}, {"host", host}, {"why", why}, {"workers", workers}}));
}

Status Journal::RecordResize(const JournalResize& z) {
  return Append(Dump(json{{"t", "resize"},
                          {"workers", z.workers},
                          {"has_layout", z.has_layout},
                          {"layout", LayoutJson(z.layout)}}));
}

Status Journal::RecordResizeEnd() { return Append(Dump(json{{"t", "resize_end"}})); }

Status Journal::RecordResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                                    const std::string& why) {
  json r = {{"t", "resize_refused"}, {"workers", workers}, {"error", why}};
  if (layout != nullptr) r["layout"] = LayoutJson(*layout);
  if (!host.empty()) r["host"] = host;
  return Append(Dump(r));
}

Status Journal::RecordState(const StateSpec& state) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : proto::EncodePayload(state)) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return Append(Dump(json{{"t", "state"}, {"spec", hex}}));
}

Status Journal::RecordTarget(int32_t workers) {
  return Append(Dump(json{{"t", "target"}, {"workers", workers}}));
}

Status Journal::RecordEnd(JobOutcome outcome, const std::string& reason) {
  return Append(Dump(json{{"t", "end"}, {"outcome", ToString(outcome)}, {"reason", reason}}));
}

}  // namespace elastra::coordinator
