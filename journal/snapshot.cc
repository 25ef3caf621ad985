// The journal's snapshot (see records.h): the state of a journal as the fewest ordinary records
// that replay to it, inside one `snapshot` record, so that replaying a compacted journal takes the
// same checks and the same apply as replaying the records it stands for.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "journal/records.h"
#include "protocol/codec.h"

namespace elastra::journal {
namespace {

using nlohmann::json;

JournalRecord Typed(JournalRecordType type) {
  JournalRecord record;
  record.type = type;
  return record;
}

// What a member list keeps of a worker (a begin or commit record writes no rendezvous or memory).
bool SameMember(const JournalWorker& a, const JournalWorker& b) {
  return a.id == b.id && a.host == b.host && a.device == b.device && a.pid == b.pid;
}

bool SameMembers(const std::vector<JournalWorker>& a, const std::vector<JournalWorker>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), SameMember);
}

// A join record keeps all of a worker.
bool SameJoined(const JournalWorker& a, const JournalWorker& b) {
  return SameMember(a, b) && a.rendezvous == b.rendezvous && a.memory_bytes == b.memory_bytes;
}

bool SameGeneration(const JournalGeneration& a, const JournalGeneration& b) {
  return a.generation == b.generation && a.reason == b.reason && a.layout == b.layout &&
         SameMembers(a.members, b.members) && a.downtime_ms == b.downtime_ms &&
         a.agreement_ms == b.agreement_ms && a.rebuild_ms == b.rebuild_ms &&
         a.transfer_ms == b.transfer_ms && a.groups_rebuilt == b.groups_rebuilt &&
         a.groups_kept == b.groups_kept;
}

bool SameCheckpoint(const JournalCheckpoint& a, const JournalCheckpoint& b) {
  return a.step == b.step && a.generation == b.generation && a.dir == b.dir;
}

bool SameResize(const std::optional<JournalResize>& a, const std::optional<JournalResize>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a ||
         (a->workers == b->workers && a->has_layout == b->has_layout && a->layout == b->layout);
}

// Generation `g` as a build begun from `before`'s members (the ranks it drops, the workers it
// adds behind the others) and its commit referring to it, as the coordinator writes most
// changes; or its commit listing its members when it keeps none of `before`'s first, or all.
void AddGeneration(const JournalGeneration* before, const JournalGeneration& g,
                   std::vector<JournalRecord>* out) {
  JournalRecord commit = Typed(JournalRecordType::kCommit);
  commit.generation = g;
  if (before != nullptr) {
    std::vector<int32_t> dropped;
    size_t kept = 0;
    for (size_t r = 0; r < before->members.size(); ++r) {
      if (kept < g.members.size() && SameMember(before->members[r], g.members[kept])) {
        ++kept;
      } else {
        dropped.push_back(static_cast<int32_t>(r));
      }
    }
    // The same members as before: a begin that drops and adds none would refer to the committed
    // members instead of listing them, which a commit cannot take its members from.
    if (kept > 0 && (!dropped.empty() || kept < g.members.size())) {
      JournalRecord begin = Typed(JournalRecordType::kBegin);
      begin.target = g.generation;
      begin.kind = ChangeKind::kBuild;
      begin.workers_of = before->generation;
      begin.dropped = std::move(dropped);
      begin.workers.assign(g.members.begin() + static_cast<std::ptrdiff_t>(kept), g.members.end());
      out->push_back(std::move(begin));
      commit.members_begun = true;
      commit.generation.members.clear();
    }
  }
  out->push_back(std::move(commit));
}

JournalRecord Join(const JournalWorker& worker) {
  JournalRecord join = Typed(JournalRecordType::kJoin);
  join.worker = worker;
  return join;
}

JournalRecord Worker(const std::string& id, JournalWorkerState state) {
  JournalRecord record = Typed(JournalRecordType::kWorker);
  record.id = id;
  record.worker_state = state;
  return record;
}

// The records that replay to `s`, in the order they must be applied.
std::vector<JournalRecord> SnapshotRecords(const JournalState& s) {
  std::vector<JournalRecord> out;
  JournalRecord job = Typed(JournalRecordType::kJob);
  job.job = s.job;
  job.initial_workers = s.initial_workers;
  job.max_workers = s.max_workers;
  job.has_bind = true;
  job.bind = s.bind;
  job.spares = s.spares;
  out.push_back(std::move(job));
  if (proto::EncodePayload(s.state) != proto::EncodePayload(StateSpec{})) {
    JournalRecord state = Typed(JournalRecordType::kState);
    state.state = s.state;
    out.push_back(std::move(state));
  }
  // Every id used, sorted so that a snapshot of one state is one text.
  std::vector<std::string> ids(s.seen_ids.begin(), s.seen_ids.end());
  std::sort(ids.begin(), ids.end());
  for (size_t at = 0; at < ids.size(); at += kJournalMaxWorkers) {
    JournalRecord record = Typed(JournalRecordType::kIds);
    const size_t end = std::min(ids.size(), at + kJournalMaxWorkers);
    record.ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(at),
                      ids.begin() + static_cast<std::ptrdiff_t>(end));
    out.push_back(std::move(record));
  }
  for (size_t i = 0; i < s.history.size(); ++i) {
    // A generation handed out and never committed: a begin the next commit ends.
    if (i + 1 == s.history.size() && s.highest_generation > s.history[i].generation &&
        !(s.change_in_flight && s.change_target >= s.highest_generation)) {
      JournalRecord begin = Typed(JournalRecordType::kBegin);
      begin.target = s.highest_generation;
      out.push_back(std::move(begin));
    }
    AddGeneration(i == 0 ? nullptr : &s.history[i - 1], s.history[i], &out);
  }
  // The rendezvous endpoints and memory of workers off the standby list: a join, then removed.
  std::map<std::string, JournalWorker> known;
  for (const auto& [id, rv] : s.rendezvous) known[id].rendezvous = rv;
  for (const auto& [id, bytes] : s.memory) known[id].memory_bytes = bytes;
  for (const JournalWorker& w : s.standby) known.erase(w.id);
  for (auto& [id, w] : known) {
    w.id = id;
    out.push_back(Join(w));
    out.push_back(Worker(id, JournalWorkerState::kRemoved));
  }
  for (const JournalWorker& w : s.standby) out.push_back(Join(w));
  for (const auto& [id, state] : s.worker_states) out.push_back(Worker(id, state));
  for (const JournalCheckpoint& c : s.checkpoints) {
    JournalRecord record = Typed(JournalRecordType::kCheckpoint);
    record.checkpoint = c;
    out.push_back(std::move(record));
  }
  // The change in flight (or the one an end record stopped: its fields stay in the state).
  JournalRecord end = Typed(JournalRecordType::kEnd);
  end.outcome = s.ended.value_or(JobOutcome::kFinished);
  end.reason = s.end_reason;
  if (s.ended && s.change_in_flight) out.push_back(end);
  if (s.change_in_flight || s.change_target != 0) {
    JournalRecord begin = Typed(JournalRecordType::kBegin);
    begin.target = s.change_target;
    begin.kind = s.change_kind;
    if (s.change_workers_committed && s.current() != nullptr) {
      begin.workers_of = s.current()->generation;
    } else {
      begin.workers = s.change_workers;
    }
    out.push_back(std::move(begin));
  }
  if (s.ended && !s.change_in_flight) out.push_back(end);
  // An end record drops the resize: the resize follows it.
  if (s.resize) {
    JournalRecord resize = Typed(JournalRecordType::kResize);
    resize.resize = *s.resize;
    out.push_back(std::move(resize));
  }
  if (s.target_workers != (s.resize ? s.resize->workers : s.initial_workers)) {
    JournalRecord target = Typed(JournalRecordType::kTarget);
    target.target_workers = s.target_workers;
    out.push_back(std::move(target));
  }
  return out;
}

}  // namespace

std::string EncodeJournalSnapshot(const JournalState& state) {
  std::string text = "{\"t\":\"snapshot\",\"version\":" + std::to_string(kJournalSnapshotVersion) +
                     ",\"records\":[";
  std::vector<JournalRecord> records = SnapshotRecords(state);
  for (size_t i = 0; i < records.size(); ++i) {
    if (i > 0) text.push_back(',');
    text += EncodeJournalRecord(&records[i]);
  }
  text += "]}";
  return text;
}

Status ApplyJournalSnapshot(std::string_view text, JournalState* state) {
  const json r = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  const auto type = r.is_object() ? r.find("t") : r.end();
  if (!r.is_object() || type == r.end() || *type != "snapshot") {
    return CorruptError("journal snapshot is not a snapshot record");
  }
  const auto found = r.find("version");
  const json version = found == r.end() ? json() : *found;
  if (!version.is_number_unsigned() || version.get<uint64_t>() != kJournalSnapshotVersion) {
    return CorruptError("journal snapshot version " + version.dump() +
                        " is not known to this coordinator (it knows version " +
                        std::to_string(kJournalSnapshotVersion) + ")");
  }
  const auto records = r.find("records");
  if (records == r.end() || !records->is_array() || records->empty()) {
    return CorruptError("journal snapshot without records");
  }
  JournalState s;
  for (size_t i = 0; i < records->size(); ++i) {
    auto record = ReadJournalRecord((*records)[i], s);
    if (!record.ok()) {
      return CorruptError("journal snapshot: record " + std::to_string(i) + ": " +
                          record.status().message());
    }
    ApplyJournalRecord(std::move(record).value(), &s);
  }
  *state = std::move(s);
  return OkStatus();
}

bool SameJournalState(const JournalState& a, const JournalState& b) {
  return a.job == b.job && a.initial_workers == b.initial_workers &&
         a.max_workers == b.max_workers && a.bind == b.bind &&
         a.target_workers == b.target_workers && a.spares == b.spares &&
         a.highest_generation == b.highest_generation &&
         std::equal(a.history.begin(), a.history.end(), b.history.begin(), b.history.end(),
                    SameGeneration) &&
         a.worker_states == b.worker_states &&
         std::equal(a.standby.begin(), a.standby.end(), b.standby.begin(), b.standby.end(),
                    SameJoined) &&
         a.seen_ids == b.seen_ids && a.rendezvous == b.rendezvous && a.memory == b.memory &&
         std::equal(a.checkpoints.begin(), a.checkpoints.end(), b.checkpoints.begin(),
                    b.checkpoints.end(), SameCheckpoint) &&
         a.change_in_flight == b.change_in_flight && a.change_target == b.change_target &&
         a.change_kind == b.change_kind && SameMembers(a.change_workers, b.change_workers) &&
         a.change_workers_committed == b.change_workers_committed &&
         SameResize(a.resize, b.resize) && a.ended == b.ended && a.end_reason == b.end_reason &&
         proto::EncodePayload(a.state) == proto::EncodePayload(b.state);
}

}  // namespace elastra::journal
