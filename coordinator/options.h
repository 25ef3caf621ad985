// CoordinatorOptions: everything a coordinator needs to run one job. Plain value type.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/env.h"
#include "elastra/status.h"
#include "protocol/keys.h"

namespace elastra::coordinator {

struct CoordinatorOptions {
  // The job's name; envelopes naming another (non-empty) job are refused.
  std::string job = "default";
  // Where the ROUTER socket binds. Port 0 picks a free port; CoordinatorServer::address() reports
  // the real endpoint.
  std::string bind_address = "tcp://127.0.0.1:0";
  // The coordinator's CURVE key pair (required by the server, unused by the core).
  KeyPair server_keys;
  // Public keys (Z85) allowed to connect as workers: join, heartbeat, kv, status.
  std::vector<std::string> worker_public_keys;
  // Public keys (Z85) allowed to connect as admins: everything workers may do, plus resize,
  // agent registration and process-exit reports.
  std::vector<std::string> admin_public_keys;
  // The first generation forms when this many workers have joined.
  int initial_workers = 1;
  // Upper bound on the workers in one generation (resize refuses more).
  int max_workers = 64;
  // Hot spares: live workers kept beyond the layout as standbys (docs/recovery.md, "Spares"),
  // the first to take a lost rank. When fewer are standing (one took a lost rank, one died), the
  // coordinator asks agents with free slots for replacements, which join as standbys; a grow
  // leaves them standing when free slots can start its workers instead. A resize may change it
  // (ResizeRequest::spares). 0 (default): none kept; from 0 to max_workers.
  int spares = 0;
  // Told to workers in JoinReply; how often they send heartbeats.
  std::chrono::milliseconds heartbeat_interval{200};
  // A worker silent for this long is lost (detection well under 2 s).
  std::chrono::milliseconds heartbeat_timeout{1500};
  // The workers' heartbeats the coordinator budgets for per second (docs/scale.md, "Heartbeats").
  // When the most workers the job may have (the larger of initial_workers and max_workers) would
  // send more at heartbeat_interval, the interval grows to workers / this rate, and
  // heartbeat_timeout (and a recover_timeout given) grow by the same factor: failure detection
  // takes longer in proportion. 0: no bound.
  int max_heartbeats_per_second = 40000;
  // How long a grow waits for the extra workers to join before it fails.
  std::chrono::milliseconds spawn_timeout{60000};
  // How long survivors have to answer a RecoverRequest; 0 means heartbeat_timeout.
  std::chrono::milliseconds recover_timeout{0};
  // Committed checkpoints kept on disk; older ones are removed after each commit.
  int checkpoint_keep = 3;
  // Whether a change keeps the communicators whose members did not change (group_keeping.h).
  // false: every change builds every group, as before protocol 10 (ELASTRA_KEEP_GROUPS=0: the
  // reference of bench_recovery's failure_downtime_vs_full_rebuild).
  bool keep_groups = true;
  // A checkpoint root to resume the job from: the first generation loads its newest committed
  // checkpoint (at any worker count) instead of the workers' initial state. Empty: a fresh start.
  std::string resume_from;
  // Where the coordinator keeps its journal (<state_dir>/journal.bin, docs/journal.md). Empty: no
  // journal. When the journal holds a job, the core takes that job back (a restart).
  std::string state_dir;
  // The etcd cluster that keeps the journal instead of <state_dir>/journal.bin (docs/ha.md):
  // its members' client URLs, comma-separated ("http://10.0.0.1:2379,http://10.0.0.2:2379"); the
  // journal is the keys under /elastra/<job>/journal/. Used only with a state_dir (which still
  // holds status.json). Empty (default): the file.
  std::string etcd;
  // With etcd: the leader key this coordinator created and its create revision
  // (journal::EtcdElection::Campaign's fence). Every journal write is then a transaction
  // conditioned on it, so a deposed leader's writes are refused by etcd (docs/ha.md, "Fencing").
  // Empty (default): unfenced.
  std::string etcd_fence_key;
  int64_t etcd_fence_revision = 0;
  // With etcd: the journal is compacted (a snapshot of the job's state replaces its records,
  // docs/ha.md "Compaction") once this many records were written since the last snapshot, between
  // changes. 0: never. The file journal is never compacted.
  uint64_t journal_compact_records = 1000;
  // With a fence: called, on the coordinator's thread, with a journal write the fence refused
  // (kFailedPrecondition "not the leader: ..."). Another coordinator leads the job: this one must
  // act no more, and `elastra coordinator` exits there, before the decision that wrote the record
  // sends a message (docs/ha.md, "The coordinator's leadership"). Unset: logged as any failed
  // write.
  std::function<void(const Status&)> on_fenced;
  // Time source for deadlines; nullptr means SystemClock. Not owned.
  Clock* clock = nullptr;
  // The filesystem (the checkpoint Env seam) for the journal, checkpoint commits and listing
  // resume_from; tests pass a FaultInjectionEnv to fail writes or fill the disk. nullptr means
  // Env::Default(). Not owned; must outlive the coordinator.
  Env* env = Env::Default();
};

}  // namespace elastra::coordinator
