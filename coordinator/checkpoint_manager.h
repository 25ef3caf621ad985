// CheckpointManager: what makes a checkpoint exist. It gathers the CheckpointWritten reports of
// every rank of a generation for one step, commits the manifest once all of them succeeded
// (keeping the newest `keep` on disk), journals the commit, and knows the latest committed
// checkpoint: the one a generation with no live holder of the state reloads. All its disk I/O goes
// through the checkpoint Env seam (CoordinatorOptions::env), so a test can fail the commit's
// writes or fill the disk. Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/env.h"
#include "checkpoint/reader.h"
#include "protocol/messages.h"
#include "journal/journal.h"
#include "coordinator/journal_recorder.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra::coordinator {

class CheckpointManager {
 public:
  // `env` and `journal` are not owned and must outlive the manager. `keep` is at least 1.
  CheckpointManager(std::string job, int keep, Env* env, JournalRecorder* journal)
      : job_(std::move(job)), keep_(keep), env_(env), journal_(journal) {}

  // One rank's report. When every rank of that generation and step reported success, commits
  // the manifest and makes it the latest checkpoint. kInvalidArgument for a report that cannot
  // be right (a rank outside [0, ranks)): the caller counts it as malformed. OK otherwise, also
  // when a rank failed, a descriptor was unreadable or the commit's write failed: those are
  // logged, nothing is committed, and the latest checkpoint stays what it was.
  // With `defer` (the coordinator has more messages queued behind this one), a checkpoint that
  // every rank wrote is only marked ready: CommitReady() commits the newest ready one, and a newer
  // one that becomes ready first makes an older one moot (its directory is removed). Each commit
  // syncs files several times; committing every step of a job that checkpoints every few
  // milliseconds left the coordinator seconds behind its queue (docs/hardening.md, "The two
  // unexplained failures").
  Status OnWritten(const proto::CheckpointWritten& report, bool defer = false);
  // Commits the checkpoint OnWritten marked ready, if any (the coordinator's tick, and EndJob).
  void CommitReady();

  // The job ended (finished, failed): no rank writes any more, so a checkpoint still pending can
  // never be committed. Removes every uncommitted checkpoint directory under the roots the job
  // wrote to (docs/checkpoints.md, "How a job ends"), so that a later --resume or `ckpt list` has
  // none to skip; what cannot be removed is logged.
  void EndJob();

  // Journals a committed checkpoint and remembers it in committed(). The journal's error when it
  // could not be written (then it is not remembered either). `bytes`: the shard files' total
  // size, -1 when not known.
  // `bytes`, `seconds`: the shard files' size and the save time (the slowest rank's write plus
  // the commit), -1 when not known.
  Status Record(int64_t step, uint64_t generation, const std::string& dir, int64_t bytes = -1,
                double seconds = -1);

  // A job resumed from disk: makes the newest committed checkpoint under `root` the latest and
  // returns it. kNotFound "no committed checkpoint under ROOT[: why]" when there is none or
  // `root` cannot be listed.
  StatusOr<checkpoint::CheckpointInfo> ResumeFrom(const std::string& root);

  // A restarted coordinator: the committed checkpoints from the journal (oldest first); the
  // newest becomes the latest.
  void Restore(const std::vector<JournalCheckpoint>& committed);

  // The directory of the newest committed checkpoint, "" when there is none.
  const std::string& latest_dir() const { return latest_dir_; }
  // Its step, -1 when there is none.
  int64_t latest_step() const { return latest_step_; }
  // Every committed checkpoint journaled (or restored), oldest first.
  const std::vector<JournalCheckpoint>& committed() const { return committed_; }
  // Why the newest checkpoint that failed did (a rank's write, or the commit), and its step; ""
  // and -1 when none failed since the coordinator started. A later commit does not clear it: a
  // reader compares its step with latest_step() (docs/checkpoints.md, "Status").
  const std::string& last_error() const { return last_error_; }
  int64_t last_error_step() const { return last_error_step_; }

 private:
  // The reports of one (generation, step) until every rank of that generation reported.
  struct Pending {
    int32_t ranks = 0;
    Layout layout;
    std::string root;
    bool failed = false;
    double write_seconds = 0;  // the slowest rank's write so far
    std::map<int32_t, std::string> descriptors;  // rank -> EncodeShardDescriptor bytes
    std::set<int32_t> failed_ranks;              // ranks whose write failed
  };
  // Commits the checkpoint of `step` (every rank reported success); false when that failed.
  bool Commit(uint64_t generation, int64_t step, Pending& p);
  void Failed(int64_t step, std::string why);
  // Removes the directory of a checkpoint that will never be committed.
  void Discard(const std::string& root, uint64_t generation, int64_t step);

  std::string job_;
  int keep_;
  Env* env_;
  JournalRecorder* journal_;
  std::map<std::pair<uint64_t, int64_t>, Pending> pending_;
  // The (generation, step) in pending_ every rank wrote, left for CommitReady (OnWritten's defer).
  std::optional<std::pair<uint64_t, int64_t>> ready_;
  std::string latest_dir_;
  int64_t latest_step_ = -1;
  std::vector<JournalCheckpoint> committed_;
  std::set<std::string> roots_;  // every root a rank reported or the job resumed from
  std::string last_error_;
  int64_t last_error_step_ = -1;
};

}  // namespace elastra::coordinator
