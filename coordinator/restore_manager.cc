#include "coordinator/restore_manager.h"

#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/logging.h"
#include "coordinator/journal_location.h"

namespace elastra::coordinator {

Status RestoreManager::Open() {
  const std::string where = JournalLocation(*options_);
  auto storage = OpenJournalStorage(*options_);
  if (!storage.ok()) return storage.status().WithContext("the journal (" + where + ")");
  auto journal = Journal::Open(std::move(storage).value());
  if (!journal.ok()) return journal.status().WithContext("opening the journal (" + where + ")");
  LOG(INFO) << "journal: " << where;
  journal_->Attach(std::move(journal).value());
  // Only etcd's journal compacts (docs/ha.md, "Compaction"); the file keeps every record.
  if (!options_->etcd.empty()) {
    journal_->journal()->set_compact_every(options_->journal_compact_records);
  }
  const JournalState& s = journal_->journal()->state();
  if (s.empty()) {
    return journal_->journal()->RecordJob(options_->job, options_->initial_workers,
                                          options_->max_workers, options_->bind_address,
                                          options_->spares);
  }
  if (s.job != options_->job) {
    return FailedPreconditionError("the journal (" + where + ") belongs to job '" + s.job +
                                   "', not '" + options_->job + "'");
  }
  Restore(s);
  return OkStatus();
}

void RestoreManager::Restore(const JournalState& s) {
  restored_ = true;
  const TimePoint now = clock_->Now();
  CommittedJob job;
  job.highest_generation = s.highest_generation;
  checkpoints_->Restore(s.checkpoints);
  for (const auto& id : s.seen_ids) membership_->MarkSeen(id);
  for (const auto& g : s.history) {
    HistoryEntry h;
    h.generation = g.generation;
    h.reason = g.reason;
    h.layout = g.layout;
    for (const auto& m : g.members) h.workers.push_back(m.id);
    h.timings.downtime_ms = g.downtime_ms;
    h.timings.agreement_ms = g.agreement_ms;
    h.timings.rebuild_ms = g.rebuild_ms;
    h.timings.transfer_ms = g.transfer_ms;
    h.timings.groups_rebuilt = g.groups_rebuilt;
    h.timings.groups_kept = g.groups_kept;
    job.history.push_back(std::move(h));
  }
  auto restore_worker = [&](const JournalWorker& w) {
    proto::JoinRequest join;
    join.worker_id = w.id;
    join.host = w.host;
    join.device = w.device;
    join.pid = w.pid;
    if (auto rv = s.rendezvous.find(w.id); rv != s.rendezvous.end()) join.rendezvous = rv->second;
    if (auto m = s.memory.find(w.id); m != s.memory.end()) join.device_memory_bytes = m->second;
    membership_->Join(join, /*identity=*/"").IgnoreError();
  };
  auto state_of = [&](const std::string& id) -> std::optional<JournalWorkerState> {
    auto it = s.worker_states.find(id);
    if (it == s.worker_states.end()) return std::nullopt;
    return it->second;
  };
  // Members: the committed generation's, then (a change in flight) the workers it involved.
  std::vector<std::string> members;
  std::unordered_set<std::string> listed;  // members' ids: a restart mid-change is O(N), not O(N^2)
  if (const JournalGeneration* g = s.current()) {
    job.generation = g->generation;
    job.layout = g->layout;
    job.state = proto::JobState::kRunning;
    for (const auto& m : g->members) {
      job.members.push_back(m.id);
      if (state_of(m.id) == JournalWorkerState::kLost) continue;
      restore_worker(m);
      members.push_back(m.id);
      listed.insert(m.id);
    }
  }
  if (s.change_in_flight) {
    for (const auto& w : s.ChangeWorkers()) {
      if (listed.count(w.id) > 0) continue;
      if (state_of(w.id).has_value()) continue;
      restore_worker(w);
      members.push_back(w.id);
      listed.insert(w.id);
    }
  }
  for (const auto& w : s.standby) {
    if (listed.count(w.id) > 0) continue;
    restore_worker(w);
    if (const WorkerInfo* info = membership_->Find(w.id)) health_->Beat(info->slot);
  }
  membership_->AssignRanks(members);
  for (const auto& id : members) {
    if (state_of(id) == JournalWorkerState::kFinished) {
      membership_->SetState(id, WorkerState::kFinished);
    } else {
      // A fresh deadline: its heartbeats resume once it reconnects.
      if (const WorkerInfo* info = membership_->Find(id)) health_->Beat(info->slot);
    }
  }
  resizes_->Restore(s.resize, s.target_workers, s.spares);
  if (s.ended == JobOutcome::kFinished) job.state = proto::JobState::kFinished;
  if (s.ended == JobOutcome::kFailed) job.state = proto::JobState::kFailed;
  generations_->Restore(std::move(job));
  pending_ = !generations_->job_over();
  resizes_->set_restoring(pending_);
  recover_ = s.change_in_flight;
  why_ = "the coordinator restarted while changing to generation " +
         std::to_string(s.change_target) + " (" + ToString(s.change_kind) + ")";
  deadline_ = now + options_->heartbeat_timeout;
  LOG(WARNING) << "took back job " << options_->job << " from " << journal_->journal()->path()
               << " (" << s.records << " records): generation " << generations_->generation()
               << ", " << membership_->Members().size() << " member(s), "
               << membership_->Standby().size() << " standby"
               << (s.change_in_flight ? "; a change was in flight: recovering once the workers "
                                        "reconnect"
                                      : "")
               << (s.ended ? std::string("; the job is ") + ToString(*s.ended) : std::string());
}

void RestoreManager::MaybeFinish() {
  if (!pending_) return;
  if (generations_->job_over()) {
    pending_ = false;
    resizes_->set_restoring(false);
    return;
  }
  bool all_heard = true;
  for (const auto& id : membership_->Members()) {
    const WorkerInfo* w = membership_->Find(id);
    if (w != nullptr && w->identity.empty()) all_heard = false;
  }
  if (!all_heard && clock_->Now() < deadline_) return;
  pending_ = false;
  resizes_->set_restoring(false);
  if (recover_ && generations_->phase() == Phase::kIdle) {
    recover_ = false;
    generations_->StartRecovery({}, why_);
    return;
  }
  recover_ = false;
  resizes_->Continue();
  resizes_->MaybeRegrow();
}

}  // namespace elastra::coordinator
