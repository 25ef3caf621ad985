// CoordinatorCore: the coordinator's logic with no sockets. The server hands it each decoded
// envelope with the ROUTER identity and the role its CURVE key was granted ("admin" or "worker"),
// and calls Tick() periodically; it answers with the frames to send. Time comes from the injected
// Clock, so tests drive it with FakeClock and no sleeps. When the job ends it writes the final
// status to <state_dir>/status.json. Not thread-safe: one loop owns it.
//
// The core only dispatches and wires. Each concern is a manager with its own file pair and test,
// as in Ray's GCS; all of them are owned here and driven by this core's loop and clock:
//   WorkerService      join, leave, heartbeats and their acks, paused/ready/failure reports, exits
//   GenerationManager  the committed generation and the state machine that changes it
//   HostManager        agents and their hosts: registration, heartbeats, spawn requests, the
//                      first generation's workers, a host lost as one event, a drain's end
//   ResizeManager      resizes, drains and regrows from admission to their outcome; the target
//                      size and the hot spares kept beyond it
//   LayoutPolicy       which layout a generation gets and which worker takes which rank
//   CheckpointManager  committing checkpoints (through CoordinatorOptions::env), the latest one
//   KvService          the rendezvous key-value service
//   RestoreManager     taking a job back from the journal after a restart
//   TrainingMetrics    what the training loops report with their heartbeats; goodput
//   Membership, HostTable, HealthMonitor, Outbox, JournalRecorder: the state and plumbing they
//   share.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/checkpoint_manager.h"
#include "coordinator/context.h"
#include "coordinator/generation_manager.h"
#include "coordinator/health.h"
#include "coordinator/host_manager.h"
#include "coordinator/host_table.h"
#include "journal/journal.h"
#include "coordinator/journal_recorder.h"
#include "coordinator/kv_service.h"
#include "coordinator/layout_policy.h"
#include "coordinator/membership.h"
#include "coordinator/options.h"
#include "coordinator/outbox.h"
#include "coordinator/resize_manager.h"
#include "coordinator/restore_manager.h"
#include "coordinator/training_metrics.h"
#include "coordinator/worker_service.h"
#include "elastra/layout.h"
#include "elastra/status.h"

namespace elastra::coordinator {

// `o` with the heartbeat period (and timeouts) grown for its size: see
// CoordinatorOptions::max_heartbeats_per_second. The core applies it to the options it is given.
CoordinatorOptions ScaledHeartbeats(CoordinatorOptions o);

class CoordinatorCore {
 public:
  explicit CoordinatorCore(const CoordinatorOptions& options);

  // Handles one decoded envelope from a client whose CURVE key grants `role`.
  std::vector<Outgoing> Handle(const std::string& identity, proto::Role role,
                               const proto::Envelope& envelope);
  // Prefetching for a batch of messages. At 16,384 workers the entries a message reads (its
  // sender's probe and record, its heartbeat deadline and tally, its place in a change's lists)
  // lie in no cache, and each is a miss that stalls the handler (docs/scale.md). A caller that
  // holds the messages after the one it is about to handle passes them here first, next[0] the
  // one it handles after this one: each message then has its loads started over the three
  // handlings before its own (its probe line, then its record, then what its record points to),
  // so that they overlap the work on the others. nullptr entries (frames that did not decode)
  // are skipped; fewer than kLookAhead may be given. Changes nothing: a message handled without
  // it is handled the same.
  static constexpr int kLookAhead = 3;
  void PrefetchAhead(std::span<const proto::Envelope* const> next) const;
  // Answers a frame that did not decode (counted in malformed_frames) with an ErrorReply carrying
  // request id 0.
  std::vector<Outgoing> HandleMalformed(const std::string& identity, const Status& error);
  // Whether more messages wait behind the next one Handle gets (the server's batch): then a
  // checkpoint every rank wrote is committed at the next Tick, the newest of those that became
  // ready meanwhile (CheckpointManager::OnWritten's defer). False (the default): at once.
  void set_more_queued(bool more) { more_queued_ = more; }
  // Heartbeat deadlines, key-value wait deadlines, recovery and spawn deadlines.
  std::vector<Outgoing> Tick();

  // The job as `elastra status` shows it (protocol/status_json.h makes the JSON).
  proto::JobStatus Snapshot() const;
  // Only the job as a whole (StatusRequest::brief): O(1), whatever the job's size.
  proto::JobStatus BriefSnapshot() const;
  proto::JobState state() const { return generations_.state(); }
  uint64_t generation() const { return generations_.generation(); }
  const Layout& layout() const { return generations_.layout(); }
  const Membership& membership() const { return membership_; }
  const HostTable& hosts() const { return hosts_; }
  // The options in force: defaults filled in, heartbeats scaled (ScaledHeartbeats).
  const CoordinatorOptions& options() const { return options_; }
  // The size the job returns to (docs/hosts.md, "Placement and the target size").
  int target_workers() const { return resizes_.target(); }
  // The standby workers the job keeps beyond its layout (docs/recovery.md, "Spares").
  int spares_target() const { return resizes_.spares(); }
  const std::vector<HistoryEntry>& history() const { return generations_.history(); }
  uint64_t malformed_frames() const { return outbox_.malformed_frames(); }
  uint64_t stale_messages() const { return outbox_.stale_messages(); }

  // Journal (options.state_dir non-empty): not OK when the journal could not be opened or names
  // another job; the server refuses to start then.
  const Status& journal_status() const { return journal_status_; }
  // True when this core took back a job from an existing journal.
  bool restored() const { return restore_.restored(); }
  // Journals a committed checkpoint (kept across a restart in checkpoints()). Without a journal
  // it is only remembered.
  Status RecordCheckpoint(int64_t step, uint64_t generation, const std::string& dir);
  const std::vector<JournalCheckpoint>& checkpoints() const { return checkpoints_.committed(); }

 private:
  void OnCheckpointWritten(const proto::Envelope& e);
  // Once the job is over: <state_dir>/status.json (mode 0600), the final status.
  void MaybeWriteFinalStatus();

  // Declared in the order they are built: each manager gets the context and pointers to the
  // managers above it that it calls.
  CoordinatorOptions options_;
  Clock* clock_;
  Membership membership_;
  HostTable hosts_;
  Outbox outbox_;
  JournalRecorder journal_;
  CheckpointManager checkpoints_;
  bool more_queued_ = false;
  HealthMonitor health_;
  KvService kv_;
  LayoutPolicy layouts_;
  // What every manager below shares; each also gets the peers it calls.
  CoordinatorContext context_;
  GenerationManager generations_;
  HostManager host_manager_;
  ResizeManager resizes_;
  WorkerService workers_;
  RestoreManager restore_;
  TrainingMetrics training_;

  Status journal_status_;
  bool final_status_written_ = false;
};

}  // namespace elastra::coordinator
