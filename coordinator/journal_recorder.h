// JournalRecorder: the coordinator's events written as journal records (docs/journal.md), each
// before the messages it causes leave. Without a journal (no state directory) every call does
// nothing. A record that cannot be written is logged as an error and the job goes on: a full disk
// must not stop training, it only costs the ability to take the job back after a restart. After
// each record written the journal compacts when it is due (Journal::MaybeCompact: a journal on
// etcd, every CoordinatorOptions::journal_compact_records records, between changes).
// Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/membership.h"
#include "coordinator/reconfiguration.h"
#include "journal/journal.h"

namespace elastra::coordinator {

// The journal's vocabulary (journal/journal.h), as the managers use it.
using journal::ChangeKind;
using journal::JobOutcome;
using journal::Journal;
using journal::JournalCheckpoint;
using journal::JournalGeneration;
using journal::JournalResize;
using journal::JournalState;
using journal::JournalWorker;
using journal::JournalWorkerState;

class JournalRecorder {
 public:
  // `membership` (hosts, devices and pids of the workers named) is not owned.
  explicit JournalRecorder(const Membership* membership) : membership_(membership) {}

  // Starts recording into `journal`.
  void Attach(std::unique_ptr<Journal> journal) { journal_ = std::move(journal); }
  // nullptr when the job keeps no journal.
  Journal* journal() const { return journal_.get(); }

  void Join(const std::string& id);
  void WorkerState(const std::string& id, JournalWorkerState state);
  void Ids(const std::vector<std::string>& ids);
  void ChangeBegun(uint64_t target, ChangeKind kind, const std::vector<std::string>& workers);
  // The same with each worker already looked up (infos[i]: Membership::Find(workers[i])).
  void ChangeBegun(uint64_t target, ChangeKind kind, const std::vector<std::string>& workers,
                   const std::vector<const WorkerInfo*>& infos);
  // `reached_step`, `restore_step`: of a recovery generation, -1 otherwise (JournalGeneration).
  void Commit(uint64_t generation, proto::GenerationReason reason, const Layout& layout,
              const std::vector<std::string>& members, const ReconfigurationTimings& timings,
              int64_t reached_step = -1, int64_t restore_step = -1);
  void Waiting(const std::string& why);
  void HostLost(const std::string& host, const std::string& why,
                const std::vector<std::string>& workers);
  void Resize(int32_t workers, bool has_layout, const Layout& layout);
  // `done`: the job runs at the size asked (else the resize failed); `generation`: the committed
  // generation it ended at.
  void ResizeEnd(bool done, uint64_t generation);
  void ResizeRefused(int32_t workers, const Layout* layout, const std::string& host,
                     const Status& why);
  // `spares` -1: the spares kept do not change.
  void Target(int32_t workers, int32_t spares = -1);
  void State(const StateSpec& state);
  void End(JobOutcome outcome, const std::string& reason, int64_t checkpoint_step = -1,
           const std::string& checkpoint_dir = "");
  // The journal's error, not logged: a committed checkpoint that is not journaled is still
  // committed, and the caller decides what to say.
  Status Checkpoint(int64_t step, uint64_t generation, const std::string& dir,
                    int64_t bytes = -1, double seconds = -1);

  // Logs a failed journal write (at most once a second); one the journal's fence refused goes to
  // the handler set_on_fenced gave, when there is one.
  void LogFailure(const Status& s) const;
  // CoordinatorOptions::on_fenced.
  void set_on_fenced(std::function<void(const Status&)> on_fenced) {
    on_fenced_ = std::move(on_fenced);
  }

 private:
  JournalWorker RecordOf(const std::string& id) const;
  static JournalWorker RecordOf(const std::string& id, const WorkerInfo* w);
  std::vector<JournalWorker> RecordsOf(const std::vector<std::string>& ids) const;
  // LogFailure(s); then, when the record was written, a compaction if one is due.
  void Wrote(const Status& s);
  // Journal::MaybeCompact; a failure is logged (one the fence refused as LogFailure does).
  void MaybeCompact();
  static std::vector<JournalWorker> RecordsOf(const std::vector<std::string>& ids,
                                              const std::vector<const WorkerInfo*>& infos);

  const Membership* membership_;
  std::unique_ptr<Journal> journal_;
  std::function<void(const Status&)> on_fenced_;
};

}  // namespace elastra::coordinator
