#include "journal/records.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>
#include <utility>

#include "common/mesh_peers.h"
#include "protocol/codec.h"

namespace elastra::journal {
namespace {

using nlohmann::json;

// ---- JSON <-> structs, with bounds. Throwing helpers; ReadJournalRecord turns throws into
// kCorrupt. ----

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
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > kJournalMaxString) {
    throw BadRecord{std::string("field '") + name + "' is too long"};
  }
  return s;
}

int64_t Int(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json& v = Field(j, name);
  if (!v.is_number_integer()) {
    throw BadRecord{std::string("field '") + name + "' is not an integer"};
  }
  int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? INT64_MAX
                  : v.get<int64_t>();
  if (x < lo || x > hi) throw BadRecord{std::string("field '") + name + "' is out of range"};
  return x;
}

double Num(const json& j, const char* name) {
  const json& v = Field(j, name);
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    throw BadRecord{std::string("field '") + name + "' is not a finite number"};
  }
  return v.get<double>();
}

const json& Array(const json& j, const char* name, size_t max) {
  const json& v = Field(j, name);
  if (!v.is_array()) throw BadRecord{std::string("field '") + name + "' is not an array"};
  if (v.size() > max) throw BadRecord{std::string("field '") + name + "' is too long"};
  return v;
}

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

JournalWorker WorkerFrom(const json& j) {
  if (!j.is_object()) throw BadRecord{"worker is not an object"};
  JournalWorker w;
  w.id = Str(j, "id");
  if (w.id.empty()) throw BadRecord{"empty worker id"};
  w.host = Str(j, "host");
  w.device = static_cast<int32_t>(Int(j, "device", -1, INT32_MAX));
  w.pid = Int(j, "pid", 0, INT64_MAX);
  if (j.contains("mem")) w.memory_bytes = Int(j, "mem", 0, INT64_MAX);  // protocol 9 on
  if (j.contains("rv")) {  // join records of protocol 7 on
    const std::string hex = Str(j, "rv");
    if (!BytesOfHex(hex, &w.rendezvous) || w.rendezvous.size() != kRendezvousEndpointBytes) {
      throw BadRecord{"worker " + w.id + ": rendezvous endpoint '" + hex + "' is not 6 bytes"};
    }
  }
  return w;
}

std::vector<JournalWorker> WorkersFrom(const json& j, const char* name) {
  const json& a = Array(j, name, kJournalMaxWorkers);
  std::vector<JournalWorker> out;
  out.reserve(a.size());
  for (const auto& w : a) out.push_back(WorkerFrom(w));
  return out;
}

// The enum named `name`, or a BadRecord naming the field and the unknown name.
template <class E>
E EnumFrom(const json& j, const char* field, const char* what) {
  const std::string name = Str(j, field);
  E v{};
  if (!FromString(name, &v)) throw BadRecord{std::string("unknown ") + what + " '" + name + "'"};
  return v;
}

StateSpec StateFrom(const json& r) {
  // The StateSpec as the wire encodes it, in hex: it came in one frame.
  const json& v = Field(r, "spec");
  if (!v.is_string() || v.get_ref<const std::string&>().size() > 2 * proto::kMaxFrameBytes) {
    throw BadRecord{"field 'spec' is not a string of at most 2 frames of hex"};
  }
  const std::string& hex = v.get_ref<const std::string&>();
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw BadRecord{"field 'spec' is not hex"};
  };
  std::string bytes;
  bytes.reserve(hex.size() / 2);
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(nibble(hex[i]) * 16 + nibble(hex[i + 1])));
  }
  auto spec = proto::DecodePayload<StateSpec>(bytes);
  if (hex.size() % 2 != 0 || !spec.ok()) throw BadRecord{"field 'spec' is no state"};
  return std::move(spec).value();
}

// Removes the workers `ids` from the standby list in one pass. The set is of the standby list,
// usually a few workers, not of `ids` (every member of a commit): a commit of N members costs N
// lookups in a small set instead of N inserts into a set of N.
template <class Ids>
void EraseStandby(JournalState* s, const Ids& ids) {
  if (s->standby.empty()) return;
  std::unordered_set<std::string_view> standby;
  standby.reserve(s->standby.size());
  for (const JournalWorker& w : s->standby) standby.insert(w.id);
  std::unordered_set<std::string_view> gone;
  for (const auto& id : ids) {
    if (standby.count(id) > 0) gone.insert(id);
  }
  if (gone.empty()) return;
  std::erase_if(s->standby, [&](const JournalWorker& w) { return gone.count(w.id) > 0; });
}

void EraseStandby(JournalState* s, const std::string& id) {
  std::erase_if(s->standby, [&](const JournalWorker& w) { return w.id == id; });
}

// The record `r` as typed values, each field within its bounds. What depends on the state is
// CheckJournalRecord's, which ReadJournalRecord calls next.
JournalRecord Read(const json& r) {
  if (!r.is_object()) throw BadRecord{"record is not an object"};
  const std::string type = Str(r, "t");
  JournalRecord rec;
  if (type == "job") {
    const int64_t version = Int(r, "version", 0, INT32_MAX);
    if (version != 1) throw BadRecord{"unknown journal version " + std::to_string(version)};
    rec.type = JournalRecordType::kJob;
    rec.job = Str(r, "job");
    rec.initial_workers = static_cast<int32_t>(Int(r, "initial_workers", 0, 1 << 20));
    rec.max_workers = static_cast<int32_t>(Int(r, "max_workers", 0, 1 << 20));
    rec.has_bind = r.contains("bind");  // absent in older journals
    if (rec.has_bind) rec.bind = Str(r, "bind");
    if (r.contains("spares")) rec.spares = static_cast<int32_t>(Int(r, "spares", 0, 1 << 20));
  } else if (type == "join") {
    rec.type = JournalRecordType::kJoin;
    rec.worker = WorkerFrom(Field(r, "worker"));
  } else if (type == "worker") {
    rec.type = JournalRecordType::kWorker;
    rec.id = Str(r, "id");
    rec.worker_state = EnumFrom<JournalWorkerState>(r, "state", "worker state");
  } else if (type == "ids") {
    rec.type = JournalRecordType::kIds;
    for (const auto& id : Array(r, "ids", kJournalMaxWorkers)) {
      if (!id.is_string() || id.get_ref<const std::string&>().size() > kJournalMaxString) {
        throw BadRecord{"a worker id is not a short string"};
      }
      rec.ids.push_back(id.get_ref<const std::string&>());
    }
  } else if (type == "begin") {
    rec.type = JournalRecordType::kBegin;
    rec.target = static_cast<uint64_t>(Int(r, "target", 1, INT64_MAX));
    rec.kind = EnumFrom<ChangeKind>(r, "kind", "change kind");
    if (r.contains("members_of")) {
      // The workers are the committed generation's members (written so since 2026-12-04 for a
      // pause of every member: 16,384 of them were listed again).
      if (r.contains("workers")) {
        throw BadRecord{"a begin record with both 'members_of' and 'workers'"};
      }
      rec.workers_of = static_cast<uint64_t>(Int(r, "members_of", 1, INT64_MAX));
      // Since 2026-12-05 a build written as a difference from them: the ranks it drops, the
      // workers it adds behind the others (CheckJournalRecord: ranks of that generation).
      if (r.contains("dropped")) {
        int64_t last = -1;
        for (const auto& d : Array(r, "dropped", kJournalMaxWorkers)) {
          if (!d.is_number_integer() || d.get<int64_t>() <= last || d.get<int64_t>() > INT32_MAX) {
            throw BadRecord{"'dropped' is not a rising list of the committed members' ranks"};
          }
          last = d.get<int64_t>();
          rec.dropped.push_back(static_cast<int32_t>(last));
        }
      }
      if (r.contains("added")) rec.workers = WorkersFrom(r, "added");
    } else {
      rec.workers = WorkersFrom(r, "workers");
    }
  } else if (type == "commit") {
    rec.type = JournalRecordType::kCommit;
    JournalGeneration& g = rec.generation;
    g.generation = static_cast<uint64_t>(Int(r, "generation", 1, INT64_MAX));
    const std::string reason = Str(r, "reason");
    if (!proto::FromString(reason, &g.reason)) {
      throw BadRecord{"unknown generation reason '" + reason + "'"};
    }
    g.layout = LayoutFrom(Field(r, "layout"));
    if (r.contains("begin")) {
      // The members are those of the build begun for this generation (written so since
      // 2026-12-02: a commit of 16,384 members listed them a second time).
      if (r.contains("members")) throw BadRecord{"a commit with both 'begin' and 'members'"};
      if (static_cast<uint64_t>(Int(r, "begin", 1, INT64_MAX)) != g.generation) {
        throw BadRecord{"the commit of generation " + std::to_string(g.generation) +
                        " refers to another generation's begin record"};
      }
      rec.members_begun = true;
    } else {
      g.members = WorkersFrom(r, "members");
    }
    g.downtime_ms = Num(r, "downtime_ms");
    g.agreement_ms = Num(r, "agreement_ms");
    g.rebuild_ms = Num(r, "rebuild_ms");
    g.transfer_ms = Num(r, "transfer_ms");
    if (r.contains("groups_rebuilt") || r.contains("groups_kept")) {
      g.groups_rebuilt = static_cast<int32_t>(Int(r, "groups_rebuilt", 0, 1 << 22));
      g.groups_kept = static_cast<int32_t>(Int(r, "groups_kept", 0, 1 << 22));
    }
  } else if (type == "checkpoint") {
    rec.type = JournalRecordType::kCheckpoint;
    rec.checkpoint.step = Int(r, "step", 0, INT64_MAX);
    rec.checkpoint.generation = static_cast<uint64_t>(Int(r, "generation", 0, INT64_MAX));
    rec.checkpoint.dir = Str(r, "dir");
  } else if (type == "resize") {
    rec.type = JournalRecordType::kResize;
    rec.resize.workers = static_cast<int32_t>(Int(r, "workers", 1, 1 << 20));
    rec.resize.has_layout =
        Field(r, "has_layout").is_boolean() && Field(r, "has_layout").get<bool>();
    rec.resize.layout = LayoutFrom(Field(r, "layout"));
  } else if (type == "target") {
    rec.type = JournalRecordType::kTarget;
    rec.target_workers = static_cast<int32_t>(Int(r, "workers", 1, 1 << 20));
    if (r.contains("spares")) rec.spares = static_cast<int32_t>(Int(r, "spares", 0, 1 << 20));
  } else if (type == "state") {
    rec.type = JournalRecordType::kState;
    rec.state = StateFrom(r);
  } else if (type == "resize_end") {
    rec.type = JournalRecordType::kResizeEnd;
  } else if (type == "resize_refused") {
    rec.type = JournalRecordType::kResizeRefused;  // an event only: the job did not change
  } else if (type == "host_lost") {
    rec.type = JournalRecordType::kHostLost;  // an event only: its workers' records follow
  } else if (type == "waiting") {
    rec.type = JournalRecordType::kWaiting;  // an event only: the recovery goes on when it can
  } else if (type == "end") {
    rec.type = JournalRecordType::kEnd;
    rec.outcome = EnumFrom<JobOutcome>(r, "outcome", "outcome");
    rec.reason = Str(r, "reason");
  } else {
    throw BadRecord{"unknown record type '" + type + "'"};
  }
  return rec;
}

}  // namespace

StatusOr<JournalRecord> ReadJournalRecord(const json& r, const JournalState& state) {
  JournalRecord record;
  try {
    record = Read(r);
  } catch (const BadRecord& b) {
    return CorruptError(b.why);
  } catch (const std::exception& ex) {
    return CorruptError(ex.what());
  }
  ELASTRA_RETURN_IF_ERROR(CheckJournalRecord(record, state));
  return record;
}

StatusOr<JournalRecord> DecodeJournalRecord(std::string_view text, const JournalState& state) {
  const json r = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (r.is_discarded()) return CorruptError("record is not JSON");
  auto record = ReadJournalRecord(r, state);
  if (!record.ok()) return CorruptError("inconsistent record (" + record.status().message() + ")");
  return record;
}

void ApplyJournalRecord(JournalRecord rec, JournalState* s) {
  switch (rec.type) {
    case JournalRecordType::kJob:
      s->job = std::move(rec.job);
      s->initial_workers = rec.initial_workers;
      s->max_workers = rec.max_workers;
      s->target_workers = rec.initial_workers;
      s->spares = std::max(rec.spares, 0);
      if (rec.has_bind) s->bind = std::move(rec.bind);
      break;
    case JournalRecordType::kJoin:
      // Only a worker seen before can be on the standby list (a retried join).
      if (s->seen_ids.count(rec.worker.id)) EraseStandby(s, rec.worker.id);
      s->worker_states.erase(rec.worker.id);
      s->seen_ids.insert(rec.worker.id);
      if (rec.worker.rendezvous.empty()) {
        s->rendezvous.erase(rec.worker.id);
      } else {
        s->rendezvous[rec.worker.id] = rec.worker.rendezvous;
      }
      if (rec.worker.memory_bytes > 0) {
        s->memory[rec.worker.id] = rec.worker.memory_bytes;
      } else {
        s->memory.erase(rec.worker.id);
      }
      s->standby.push_back(std::move(rec.worker));
      break;
    case JournalRecordType::kWorker:
      EraseStandby(s, rec.id);
      if (rec.worker_state == JournalWorkerState::kRemoved) {
        s->worker_states.erase(rec.id);
      } else {
        s->worker_states[rec.id] = rec.worker_state;
      }
      break;
    case JournalRecordType::kIds:
      for (auto& id : rec.ids) s->seen_ids.insert(std::move(id));
      break;
    case JournalRecordType::kBegin:
      s->change_in_flight = true;
      s->change_target = rec.target;
      s->change_kind = rec.kind;
      s->highest_generation = std::max(s->highest_generation, rec.target);
      // Committed members were added to seen_ids with their commit.
      for (const auto& w : rec.workers) s->seen_ids.insert(w.id);
      if (rec.workers_of != 0 && (!rec.dropped.empty() || !rec.workers.empty())) {
        s->change_workers =
            LessDroppedThenAdded(s->current()->members, rec.dropped, std::move(rec.workers));
        s->change_workers_committed = false;
        break;
      }
      s->change_workers = std::move(rec.workers);
      s->change_workers_committed = rec.workers_of != 0;
      break;
    case JournalRecordType::kCommit: {
      JournalGeneration& g = rec.generation;
      // Members taken from the begin record were added to seen_ids when it was applied.
      if (rec.members_begun) g.members = std::move(s->change_workers);
      // Each pass only when it can change something: at 16,384 members each costs milliseconds.
      if (!rec.members_begun) {
        for (const auto& m : g.members) s->seen_ids.insert(m.id);
      }
      if (!s->worker_states.empty()) {
        for (const auto& m : g.members) s->worker_states.erase(m.id);
      }
      if (!s->standby.empty()) {
        std::vector<std::string_view> ids;
        ids.reserve(g.members.size());
        for (const auto& m : g.members) ids.push_back(m.id);
        EraseStandby(s, ids);
      }
      s->highest_generation = std::max(s->highest_generation, g.generation);
      s->history.push_back(std::move(g));
      s->change_in_flight = false;
      s->change_target = 0;
      s->change_kind = ChangeKind::kPause;
      s->change_workers.clear();
      s->change_workers_committed = false;
      break;
    }
    case JournalRecordType::kCheckpoint:
      if (s->checkpoints.size() >= kJournalMaxCheckpoints) {
        s->checkpoints.erase(s->checkpoints.begin());
      }
      s->checkpoints.push_back(std::move(rec.checkpoint));
      break;
    case JournalRecordType::kResize:
      s->target_workers = rec.resize.workers;
      s->resize = rec.resize;
      break;
    case JournalRecordType::kResizeEnd:
      s->resize.reset();
      break;
    case JournalRecordType::kTarget:
      s->target_workers = rec.target_workers;
      if (rec.spares >= 0) s->spares = rec.spares;
      break;
    case JournalRecordType::kState:
      s->state = std::move(rec.state);
      break;
    case JournalRecordType::kResizeRefused:
    case JournalRecordType::kHostLost:
    case JournalRecordType::kWaiting:
      break;
    case JournalRecordType::kEnd:
      s->ended = rec.outcome;
      s->end_reason = std::move(rec.reason);
      s->change_in_flight = false;
      s->resize.reset();
      break;
  }
  ++s->records;
}

json LayoutJson(const Layout& l) { return json{{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}}; }

std::string HexOf(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

bool BytesOfHex(const std::string& hex, std::string* bytes) {
  if (hex.size() % 2 != 0) return false;
  auto nibble = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  bytes->clear();
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes->push_back(static_cast<char>(hi << 4 | lo));
  }
  return true;
}

}  // namespace elastra::journal
