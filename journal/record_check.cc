// CheckJournalRecord (see records.h): the one check of a typed record, on append before it is
// written and on replay after its text was read, so that the rules live in one place. The bounds
// are those ReadJournalRecord enforces on a record's text, so that a record appended replays.
#include <cmath>
#include <string>
#include <string_view>
#include <unordered_set>

#include "common/mesh_peers.h"
#include "journal/records.h"
#include "protocol/codec.h"

namespace elastra::journal {
namespace {

constexpr uint64_t kMaxId = static_cast<uint64_t>(INT64_MAX);
constexpr int64_t kMaxSize = 1 << 20;  // of a job, a resize, a target, a layout's degree

Status OutOfRange(const char* field) {
  return CorruptError(std::string("field '") + field + "' is out of range");
}

Status CheckString(const std::string& value, const char* field) {
  if (value.size() <= kJournalMaxString) return OkStatus();
  return CorruptError(std::string("field '") + field + "' is too long");
}

// kCorrupt naming the enum's value when it has no name, as replay names an unknown one.
template <class E>
Status CheckName(E value, const char* what) {
  E back{};
  if (FromString(ToString(value), &back)) return OkStatus();
  return CorruptError(std::string("unknown ") + what + " '" + ToString(value) + "'");
}

Status CheckLayout(const Layout& l) {
  if (l.dp < 0 || l.dp > kMaxSize || l.pp < 1 || l.pp > kMaxSize || l.tp < 1 || l.tp > kMaxSize ||
      static_cast<int64_t>(l.dp) * l.pp * l.tp > kMaxWorld) {
    return CorruptError("layout " + l.ToString() + " is out of range");
  }
  return OkStatus();
}

Status CheckWorker(const JournalWorker& w) {
  if (w.id.empty()) return CorruptError("empty worker id");
  if (w.id.size() > kJournalMaxString || w.host.size() > kJournalMaxString) {
    return CorruptError("worker " + w.id.substr(0, 64) + ": a field is too long");
  }
  if (w.device < -1 || w.pid < 0 || w.memory_bytes < 0) {
    return CorruptError("worker " + w.id + ": device, pid or memory out of range");
  }
  return OkStatus();
}

Status CheckWorkers(const std::vector<JournalWorker>& ws) {
  if (ws.size() > kJournalMaxWorkers) return CorruptError("too many workers in one record");
  for (const JournalWorker& w : ws) ELASTRA_RETURN_IF_ERROR(CheckWorker(w));
  return OkStatus();
}

// Why a commit of `generation` cannot take its members from the change in flight in `s` (no
// build of that generation begun and not committed); nullptr when it can.
const char* BegunMismatch(const JournalState& s, uint64_t generation) {
  if (!s.change_in_flight || s.change_kind != ChangeKind::kBuild || s.change_target != generation) {
    return "a commit refers to a begin record that is not the build in flight";
  }
  return nullptr;
}

// Why a begin record cannot take its workers from committed generation `generation` in `s` (it
// is not the newest committed one); nullptr when it can.
const char* CommittedMismatch(const JournalState& s, uint64_t generation) {
  if (s.current() == nullptr || s.current()->generation != generation) {
    return "a begin record refers to the members of a generation that is not the committed one";
  }
  return nullptr;
}

Status CheckJob(const JournalRecord& rec, const JournalState& s) {
  if (!s.empty()) return CorruptError("a second job record");
  ELASTRA_RETURN_IF_ERROR(CheckString(rec.job, "job"));
  if (rec.has_bind) ELASTRA_RETURN_IF_ERROR(CheckString(rec.bind, "bind"));
  if (rec.initial_workers < 0 || rec.initial_workers > kMaxSize) {
    return OutOfRange("initial_workers");
  }
  if (rec.max_workers < 0 || rec.max_workers > kMaxSize) return OutOfRange("max_workers");
  if (rec.spares < -1 || rec.spares > kMaxSize) return OutOfRange("spares");
  return OkStatus();
}

// A worker's join, a worker's state, the ids handed out: each bounded with the state it adds to.
Status CheckWorkerRecord(const JournalRecord& rec, const JournalState& s) {
  if (rec.type == JournalRecordType::kJoin) {
    const JournalWorker& w = rec.worker;
    ELASTRA_RETURN_IF_ERROR(CheckWorker(w));
    if (!w.rendezvous.empty() && w.rendezvous.size() != kRendezvousEndpointBytes) {
      return CorruptError("worker " + w.id + ": rendezvous endpoint '" + HexOf(w.rendezvous) +
                          "' is not 6 bytes");
    }
    if (s.standby.size() >= kJournalMaxWorkers && !s.seen_ids.count(w.id)) {
      return CorruptError("too many standby workers");
    }
    return OkStatus();
  }
  if (rec.type == JournalRecordType::kWorker) {
    ELASTRA_RETURN_IF_ERROR(CheckString(rec.id, "id"));
    ELASTRA_RETURN_IF_ERROR(CheckName(rec.worker_state, "worker state"));
    if (rec.worker_state != JournalWorkerState::kRemoved && !s.worker_states.count(rec.id) &&
        s.worker_states.size() >= kJournalMaxHistory) {
      return CorruptError("too many worker states");
    }
    return OkStatus();
  }
  if (rec.ids.size() > kJournalMaxWorkers) return CorruptError("field 'ids' is too long");
  std::unordered_set<std::string_view> fresh;
  for (const std::string& id : rec.ids) {
    if (id.size() > kJournalMaxString) return CorruptError("a worker id is not a short string");
    if (!s.seen_ids.count(id)) fresh.insert(id);
  }
  if (s.seen_ids.size() + fresh.size() > kJournalMaxHistory) {
    return CorruptError("too many worker ids");
  }
  return OkStatus();
}

Status CheckBegin(const JournalRecord& rec, const JournalState& s) {
  ELASTRA_RETURN_IF_ERROR(CheckName(rec.kind, "change kind"));
  if (rec.target < 1 || rec.target > kMaxId) return OutOfRange("target");
  if (rec.workers_of != 0) {
    if (const char* why = CommittedMismatch(s, rec.workers_of)) return CorruptError(why);
    const size_t committed = s.current()->members.size();
    for (size_t i = 0; i < rec.dropped.size(); ++i) {
      if (rec.dropped[i] < 0 || static_cast<size_t>(rec.dropped[i]) >= committed ||
          (i > 0 && rec.dropped[i] <= rec.dropped[i - 1])) {
        return CorruptError("'dropped' is not a rising list of the committed members' ranks");
      }
    }
    if (committed - rec.dropped.size() + rec.workers.size() == 0) {
      return CorruptError("a begin record without workers");
    }
  } else if (!rec.dropped.empty()) {
    return CorruptError("a begin record drops ranks of no generation");
  }
  return CheckWorkers(rec.workers);
}

Status CheckCommit(const JournalRecord& rec, const JournalState& s) {
  const JournalGeneration& g = rec.generation;
  if (g.generation < 1 || g.generation > kMaxId) return OutOfRange("generation");
  if (s.current() != nullptr && g.generation <= s.current()->generation) {
    return CorruptError("generation " + std::to_string(g.generation) +
                        " committed after generation " + std::to_string(s.current()->generation));
  }
  proto::GenerationReason reason;
  if (!proto::FromString(proto::ToString(g.reason), &reason)) {
    return CorruptError(std::string("unknown generation reason '") + proto::ToString(g.reason) +
                        "'");
  }
  ELASTRA_RETURN_IF_ERROR(CheckLayout(g.layout));
  if (rec.members_begun) {
    if (!g.members.empty()) return CorruptError("a commit with both 'begin' and 'members'");
    if (const char* why = BegunMismatch(s, g.generation)) return CorruptError(why);
  }
  const size_t members = rec.members_begun ? s.change_workers.size() : g.members.size();
  if (members == 0) return CorruptError("a generation without members");
  if (static_cast<size_t>(g.layout.world()) != members) {
    return CorruptError("layout " + g.layout.ToString() + " does not match " +
                        std::to_string(members) + " members");
  }
  for (const auto& [value, field] :
       {std::pair{g.downtime_ms, "downtime_ms"}, std::pair{g.agreement_ms, "agreement_ms"},
        std::pair{g.rebuild_ms, "rebuild_ms"}, std::pair{g.transfer_ms, "transfer_ms"}}) {
    if (!std::isfinite(value)) {
      return CorruptError(std::string("field '") + field + "' is not a finite number");
    }
  }
  if (s.history.size() >= kJournalMaxHistory) return CorruptError("too many generations");
  return CheckWorkers(g.members);
}

}  // namespace

Status CheckJournalRecord(const JournalRecord& rec, const JournalState& s) {
  if (rec.type == JournalRecordType::kJob) return CheckJob(rec, s);
  if (s.empty()) return CorruptError("the first record is not a job record");
  switch (rec.type) {
    case JournalRecordType::kJob:
      break;
    case JournalRecordType::kJoin:
    case JournalRecordType::kWorker:
    case JournalRecordType::kIds:
      return CheckWorkerRecord(rec, s);
    case JournalRecordType::kBegin:
      return CheckBegin(rec, s);
    case JournalRecordType::kCommit:
      return CheckCommit(rec, s);
    case JournalRecordType::kCheckpoint:
      if (rec.checkpoint.step < 0) return OutOfRange("step");
      if (rec.checkpoint.generation > kMaxId) return OutOfRange("generation");
      return CheckString(rec.checkpoint.dir, "dir");
    case JournalRecordType::kResize:
      if (rec.resize.workers < 1 || rec.resize.workers > kMaxSize) return OutOfRange("workers");
      return CheckLayout(rec.resize.layout);
    case JournalRecordType::kTarget:
      if (rec.target_workers < 1 || rec.target_workers > kMaxSize) return OutOfRange("workers");
      if (rec.spares < -1 || rec.spares > kMaxSize) return OutOfRange("spares");
      break;
    case JournalRecordType::kState:
      // Its text is the wire's encoding in hex, which replay reads as at most one frame.
      if (proto::EncodePayload(rec.state).size() > proto::kMaxFrameBytes) {
        return CorruptError("field 'spec' is not a string of at most 2 frames of hex");
      }
      break;
    case JournalRecordType::kEnd:
      ELASTRA_RETURN_IF_ERROR(CheckName(rec.outcome, "outcome"));
      return CheckString(rec.reason, "reason");
    case JournalRecordType::kResizeEnd:
    case JournalRecordType::kResizeRefused:
    case JournalRecordType::kHostLost:
    case JournalRecordType::kWaiting:
      break;  // events only: replay reads none of their fields
  }
  return OkStatus();
}

}  // namespace elastra::journal
