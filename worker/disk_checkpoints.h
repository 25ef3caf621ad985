// DiskCheckpoints: this worker's part of the job's disk checkpoints (docs/checkpoints.md). Every
// checkpoint_every steps its rank snapshots its shards (the step waits only for the copy to host
// memory), a background thread writes the file and reports it to the coordinator, which commits
// the checkpoint once every rank of the generation reported. LoadNewestCheckpoint is the way
// back: a generation whose state cannot be rebuilt from memory loads it from disk.
//
// A fenced worker reports nothing (docs/hosts.md, "Partitions and fencing"): a report is sent only
// while reporting is on (SetReporting) and the ControlClient is not fenced, checked when the write
// completes. It publishes nothing either: no snapshot starts while fenced, and a write in flight
// when the worker was fenced (a process stopped mid-write and woken after its eviction) is
// dropped before its file takes its final name. The coordinator, for its part, takes reports only
// from members of its current generation (CheckpointManager).
//
// Thread-safety: the training thread calls it. The writer's background thread sends its reports
// through the ControlClient, which is thread-safe, and reads the reporting switch (an atomic).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "checkpoint/writer.h"
#include "protocol/control_client.h"
#include "protocol/messages.h"
#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "elastra/tensor_collection.h"
#include "elastra/worker_options.h"

namespace elastra {

class DiskCheckpoints {
 public:
  // Checkpoints go under options.checkpoint_dir every options.checkpoint_every steps; `options`
  // outlives this object.
  explicit DiskCheckpoints(const WorkerOptions& options) : options_(options) {}

  // (Re)creates the checkpoint writer for this worker's rank `rank` of a generation of `layout`
  // (after waiting for a write in flight); its reports go through `client`. Nothing when
  // checkpoints are off; a writer that cannot be made turns them off with a warning.
  void Restart(const TensorCollection& state, const Layout& layout, int rank,
               ControlClient* client);
  // The same with the report's way out given: `may_report` is asked when a write completes (on
  // the writer's thread), `send` sends the report.
  void Restart(const TensorCollection& state, const Layout& layout, int rank,
               std::function<bool()> may_report,
               std::function<void(const proto::CheckpointWritten&)> send);

  // Off while the worker is fenced: writes that complete meanwhile are not reported. Restart()
  // turns it on for the new writer (after the old one finished, unreported if it was off).
  void SetReporting(bool on) {
    if (reporting_) reporting_->store(on);
  }

  // At the end of step `step` of generation `generation`: starts a checkpoint of `state` every
  // checkpoint_every steps. A snapshot that cannot start is a warning, not an error.
  void MaybeSnapshot(const TensorCollection& state, int64_t step, uint64_t generation,
                     const Layout& layout, const Coordinates& coords);

  // After the last step, `step`, before the worker leaves the job: when a checkpoint of it was due
  // and skipped because the previous write was still in flight, takes it now (the state is still
  // that of `step`), so that the job's last checkpoint step is always written on every rank. Then
  // Stop(): every write durable and reported.
  void Finish(const TensorCollection& state, int64_t step, uint64_t generation,
              const Layout& layout, const Coordinates& coords);

  // Lets a write in flight finish and report, and frees the writer and its (page-locked) image.
  void Stop() { writer_.reset(); }

 private:
  const WorkerOptions& options_;
  std::unique_ptr<checkpoint::CheckpointWriter> writer_;  // when checkpoints are on
  std::shared_ptr<std::atomic<bool>> reporting_;          // shared with writer_'s callback
  std::function<bool()> may_report_;                      // false while fenced
  int64_t last_started_ = -1;  // the step of the newest snapshot started
};

// Loads the shards of coordinates `coords` in generation `gen` into `state` from the newest
// committed checkpoint at or before gen.checkpoint_dir. Every member does the same; when any of
// them cannot load one (a bad checksum, a missing file, another job's), all fall back to the next
// older checkpoint together, agreeing over `control`. Returns the bytes loaded; the agreement's
// error, or kFailedPrecondition when no committed checkpoint loads on every rank.
StatusOr<int64_t> LoadNewestCheckpoint(const proto::NewGeneration& gen, const Coordinates& coords,
                                       const std::string& job, Communicator& control,
                                       TensorCollection* state);

}  // namespace elastra
