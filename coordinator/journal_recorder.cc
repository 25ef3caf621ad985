#include "coordinator/journal_recorder.h"

#include <algorithm>

#include "common/logging.h"

namespace elastra::coordinator {
namespace {

// Whether `ids` are the ids of `records`, in order. A member's host, device and pid change only
// when it joins again, which Membership refuses while it is a member: so a list of members is the
// list of their records when the ids agree, and the records need not be looked up and compared.
bool SameIds(const std::vector<std::string>& ids, const std::vector<JournalWorker>& records) {
  return std::equal(ids.begin(), ids.end(), records.begin(), records.end(),
                    [](const std::string& id, const JournalWorker& w) { return id == w.id; });
}

}  // namespace

void JournalRecorder::LogFailure(const Status& s) const {
  if (s.ok()) return;
  if (on_fenced_ && s.code() == StatusCode::kFailedPrecondition &&
      s.message().rfind("not the leader", 0) == 0) {
    LOG(ERROR) << "journal write refused by the fence: another coordinator leads the job (" << s
               << ")";
    on_fenced_(s);
    return;
  }
  LOG_EVERY_MS(ERROR, 1000) << "journal write failed (a restart may not take the job back): " << s;
}

void JournalRecorder::Wrote(const Status& s) {
  LogFailure(s);
  if (s.ok()) MaybeCompact();
}

void JournalRecorder::MaybeCompact() {
  // Between two records, never inside one: the snapshot is of the state written so far.
  const uint64_t before = journal_->compacted();
  const Status s = journal_->MaybeCompact();
  if (s.ok()) {
    if (journal_->compacted() != before) {
      LOG(INFO) << "journal compacted: the records before " << journal_->compacted()
                << " are one snapshot now";
    }
    return;
  }
  if (s.code() == StatusCode::kFailedPrecondition && s.message().rfind("not the leader", 0) == 0) {
    LogFailure(s);  // the fence refused it: another coordinator leads the job
    return;
  }
  LOG_EVERY_MS(WARNING, 1000) << "journal compaction failed (the records stay, tried again later): "
                              << s;
}

JournalWorker JournalRecorder::RecordOf(const std::string& id) const {
  return RecordOf(id, membership_->Find(id));
}

JournalWorker JournalRecorder::RecordOf(const std::string& id, const WorkerInfo* w) {
  JournalWorker r;
  r.id = id;
  if (w != nullptr) {
    r.host = w->host;
    r.device = w->device;
    r.pid = w->pid;
    r.rendezvous = w->rendezvous;
    r.memory_bytes = w->memory_bytes;
  }
  return r;
}

std::vector<JournalWorker> JournalRecorder::RecordsOf(const std::vector<std::string>& ids) const {
  return RecordsOf(ids, membership_->FindAll(ids));
}

std::vector<JournalWorker> JournalRecorder::RecordsOf(const std::vector<std::string>& ids,
                                                      const std::vector<const WorkerInfo*>& infos) {
  std::vector<JournalWorker> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) out.push_back(RecordOf(ids[i], infos[i]));
  return out;
}

void JournalRecorder::Join(const std::string& id) {
  if (journal_) Wrote(journal_->RecordJoin(RecordOf(id)));
}

void JournalRecorder::WorkerState(const std::string& id, JournalWorkerState state) {
  if (journal_) Wrote(journal_->RecordWorkerState(id, state));
}

void JournalRecorder::Ids(const std::vector<std::string>& ids) {
  if (journal_) Wrote(journal_->RecordIds(ids));
}

void JournalRecorder::ChangeBegun(uint64_t target, ChangeKind kind,
                                  const std::vector<std::string>& workers) {
  if (journal_) Wrote(journal_->RecordChangeBegun(target, kind, RecordsOf(workers)));
}

void JournalRecorder::ChangeBegun(uint64_t target, ChangeKind kind,
                                  const std::vector<std::string>& workers,
                                  const std::vector<const WorkerInfo*>& infos) {
  if (!journal_) return;
  // A pause of the committed generation's members, by rank: the record refers to them.
  const JournalGeneration* committed = journal_->state().current();
  if (kind == ChangeKind::kPause && committed != nullptr && SameIds(workers, committed->members)) {
    Wrote(journal_->RecordChangeBegunOfCommitted(target, kind));
    return;
  }
  // Most builds keep the committed members in their order, less some (a shrink, a recovery),
  // and add some behind them (a grow, standby workers), and a recovery's survivors are the
  // committed members less the lost: the record lists only the difference.
  if (committed != nullptr) {
    std::vector<int32_t> dropped;
    size_t kept = 0;  // the workers matched so far, in order
    const std::vector<JournalWorker>& old = committed->members;
    for (size_t r = 0; r < old.size(); ++r) {
      const WorkerInfo* w = kept < workers.size() ? infos[kept] : nullptr;
      // Kept as it was: the same id and the same process (a worker that joined again is not).
      if (w != nullptr && workers[kept] == old[r].id && w->host == old[r].host &&
          w->device == old[r].device && w->pid == old[r].pid) {
        ++kept;
      } else {
        dropped.push_back(static_cast<int32_t>(r));
      }
    }
    const size_t added = workers.size() - kept;
    // A dropped rank is a number where a listed worker is a record: the difference is the
    // shorter whenever it has fewer entries than the list.
    if (kept > 0 && dropped.size() + added < workers.size()) {
      std::vector<JournalWorker> more;
      more.reserve(added);
      for (size_t i = kept; i < workers.size(); ++i) more.push_back(RecordOf(workers[i], infos[i]));
      Wrote(journal_->RecordChangeBegunOfCommitted(target, kind, std::move(dropped),
                                                   std::move(more)));
      return;
    }
  }
  Wrote(journal_->RecordChangeBegun(target, kind, RecordsOf(workers, infos)));
}

void JournalRecorder::Commit(uint64_t generation, proto::GenerationReason reason,
                             const Layout& layout, const std::vector<std::string>& members,
                             const ReconfigurationTimings& timings, int64_t reached_step,
                             int64_t restore_step) {
  if (!journal_) return;
  JournalGeneration g;
  g.generation = generation;
  g.reason = reason;
  g.layout = layout;
  g.downtime_ms = timings.downtime_ms;
  g.agreement_ms = timings.agreement_ms;
  g.rebuild_ms = timings.rebuild_ms;
  g.transfer_ms = timings.transfer_ms;
  g.groups_rebuilt = timings.groups_rebuilt;
  g.groups_kept = timings.groups_kept;
  g.reached_step = reached_step;
  g.restore_step = restore_step;
  // The usual commit: the members the build of this generation began with, by rank. Their hosts,
  // devices and pids are what its begin record listed: a member's change only when it joins
  // again, which Membership refuses while it is a member. So the ids are compared, not the
  // records looked up again (16,384 lookups and copies at that size).
  const JournalState& s = journal_->state();
  if (s.change_in_flight && s.change_kind == ChangeKind::kBuild && s.change_target == generation &&
      SameIds(members, s.change_workers)) {
    Wrote(journal_->RecordCommitOfBegun(std::move(g)));
    return;
  }
  g.members = RecordsOf(members);
  Wrote(journal_->RecordCommit(std::move(g)));
}

void JournalRecorder::Resize(int32_t workers, bool has_layout, const Layout& layout) {
  if (!journal_) return;
  JournalResize z;
  z.workers = workers;
  z.has_layout = has_layout;
  z.layout = layout;
  Wrote(journal_->RecordResize(z));
}

void JournalRecorder::ResizeEnd(bool done, uint64_t generation) {
  if (journal_) Wrote(journal_->RecordResizeEnd(done, generation));
}

void JournalRecorder::ResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                                    const Status& why) {
  if (journal_) Wrote(journal_->RecordResizeRefused(workers, layout, host, why.message()));
}

void JournalRecorder::Waiting(const std::string& why) {
  if (journal_) Wrote(journal_->RecordWaiting(why));
}

void JournalRecorder::HostLost(const std::string& host, const std::string& why,
                               const std::vector<std::string>& workers) {
  if (journal_) Wrote(journal_->RecordHostLost(host, why, workers));
}

void JournalRecorder::Target(int32_t workers, int32_t spares) {
  if (journal_) Wrote(journal_->RecordTarget(workers, spares));
}

void JournalRecorder::State(const StateSpec& state) {
  if (journal_) Wrote(journal_->RecordState(state));
}

void JournalRecorder::End(JobOutcome outcome, const std::string& reason, int64_t checkpoint_step,
                          const std::string& checkpoint_dir) {
  if (journal_) {
    Wrote(journal_->RecordEnd(outcome, reason, checkpoint_step, checkpoint_dir));
  }
}

Status JournalRecorder::Checkpoint(int64_t step, uint64_t generation, const std::string& dir,
                                   int64_t bytes, double seconds) {
  if (!journal_) return OkStatus();
  Status s = journal_->RecordCheckpoint(step, generation, dir, bytes, seconds);
  if (s.ok()) MaybeCompact();
  return s;
}

}  // namespace elastra::coordinator
