// ControlChannel: this worker's line to the coordinator. It owns the ControlClient (whose I/O
// thread sends the heartbeats and receives the pushes), the rendezvous store built on it, the
// server of this worker's own rendezvous records (collectives/record_server.h), the
// number of the generation the worker runs, and what the worker keeps of the pushes until the
// training thread looks (PushInbox).
//
// A RecoverRequest must break a collective blocked on a dead peer right away, so the I/O thread
// acts on it the moment it lands: it runs `break_collectives` and answers with the step and the
// commits last published (docs/design-notes.md, "Failures break blocked calls at once").
//
// Thread-safety: generation(), set_generation(), Publish(), AnsweredByIo(), CancelOnRecovery()'s
// predicate and the push observer touch only atomics and published_mu_, and may run on any
// thread; client() is thread-safe (ControlClient). Everything else (Connect, Close, the inbox,
// DrainPushes, Poll) belongs to the training thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "collectives/peer_record_store.h"
#include "collectives/record_server.h"
#include "protocol/control_client.h"
#include "protocol/messages.h"
#include "elastra/status.h"
#include "elastra/worker_options.h"
#include "worker/coordinator_store.h"

namespace elastra {

// What the training thread keeps of the coordinator's pushes between two looks. Pure: it is fed
// envelopes and talks to nobody. Not thread-safe: the training thread's.
class PushInbox {
 public:
  // Files one push. `generation` is the one the worker runs; `parked`, whether it is parked.
  // - PauseRequest for a later generation: raises pause_target() (not queued).
  // - RecoverRequest for a later generation: sets recover_pending(); queued either way.
  // - Shutdown: queued while parked (a parked worker reads it as the end of the job); otherwise
  //   shutdown() is set, the worker must not go on: the coordinator declared it lost or the job
  //   failed (code 1), or it ended the worker's part cleanly (code 0, shutdown_clean(): the job
  //   finished, a spare it no longer needs, its host drained).
  // - anything else: queued.
  void Stash(proto::Envelope e, uint64_t generation, bool parked);

  bool empty() const { return queue_.empty(); }
  // The oldest queued push; the inbox must not be empty.
  proto::Envelope Pop();

  // The newest generation this worker was asked to pause for; 0 when none.
  uint64_t pause_target() const { return pause_target_; }
  void RaisePauseTarget(uint64_t target);
  bool recover_pending() const { return recover_pending_; }
  // A new generation runs: no pause or recovery is pending any more.
  void ClearPending();
  // Set when the coordinator told this worker to stop (AbortedError with its reason).
  const std::optional<Status>& shutdown() const { return shutdown_; }
  // Set with shutdown(): whether that Shutdown had code 0 (a clean end of this worker's part, not
  // a failure), and the coordinator's reason.
  bool shutdown_clean() const { return shutdown_clean_; }
  const std::string& shutdown_reason() const { return shutdown_reason_; }
  // The worker acted on it by parking (park_when_removed): as standby it waits for the job again.
  void ClearShutdown() {
    shutdown_.reset();
    shutdown_clean_ = false;
    shutdown_reason_.clear();
  }

 private:
  std::deque<proto::Envelope> queue_;
  uint64_t pause_target_ = 0;
  bool recover_pending_ = false;
  std::optional<Status> shutdown_;
  bool shutdown_clean_ = false;
  std::string shutdown_reason_;
};

class ControlChannel {
 public:
  // `break_collectives` runs on the I/O thread when a RecoverRequest for a later generation
  // lands, before the answer goes: it must break every call in flight without waiting on it.
  // `break_collectives` breaks the calls in flight and returns the groups' health as they
  // stopped (GroupManager::Interrupt), which the answer to a RecoverRequest carries.
  explicit ControlChannel(std::function<std::vector<proto::GroupHealth>()> break_collectives);
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Connects to the coordinator named by `options` and starts answering recovery requests; starts
  // the record server on options.bind_host (when it cannot, logged: the world's records then go
  // through the coordinator). kUnauthenticated when the coordinator refuses our key,
  // kUnavailable when it cannot be reached.
  Status Connect(const WorkerOptions& options);
  // Stops the I/O thread and closes the socket; nothing when not connected.
  void Close();

  // Valid after Connect().
  ControlClient& client() { return *client_; }
  CoordinatorStore& store() { return *store_; }
  // This worker's record server (JoinRequest::rendezvous), or nullptr without one.
  RecordServer* record_server() { return record_server_.get(); }
  // The store generation `gen`'s communicators rendezvous over: the coordinator's, where the
  // world's address records are this worker's and its build peers' to serve
  // (PeerRecordStore, when gen.build_peers names them; `rank` is this worker's, -1 for none).
  // Shared: the generation's communicators keep it for the pairs they connect later.
  std::shared_ptr<KeyValueStore> StoreFor(const proto::NewGeneration& gen, int rank);

  // The generation this worker runs (0 before the first): pushes for it or older are stale.
  uint64_t generation() const { return generation_.load(); }
  void set_generation(uint64_t g) { generation_ = g; }

  // Makes the step and the commits held (and where they are: CommitStore::place_layout) visible
  // to the I/O thread, which answers a RecoverRequest with them.
  void Publish(int64_t step, std::vector<int64_t> commit_steps, const Layout& commits_layout,
               int commits_rank);
  // Whether the I/O thread already answered a RecoverRequest for `target` (or a later one).
  bool AnsweredByIo(uint64_t target) const { return answered_by_io_.load() >= target; }
  // Makes the rendezvous of generation `g` give up (kAborted) as soon as a recovery for a later
  // generation is announced: that build is doomed, its peers will not come. (A store StoreFor
  // makes for `g` gives up the same way.)
  void CancelOnRecovery(uint64_t g);

  // Reads the pushes that arrived since the last look into the inbox, without waiting.
  void DrainPushes(bool parked);
  // Waits up to `wait` for one push and files it; false when none came.
  bool Poll(std::chrono::milliseconds wait, bool parked);
  PushInbox& inbox() { return inbox_; }

 private:
  // The push observer, on the I/O thread.
  void OnPush(const proto::Envelope& e);

  std::function<std::vector<proto::GroupHealth>()> break_collectives_;
  std::unique_ptr<ControlClient> client_;
  std::unique_ptr<CoordinatorStore> store_;
  std::unique_ptr<RecordServer> record_server_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> recover_seen_{0};    // newest RecoverRequest target seen by the I/O thread
  std::atomic<uint64_t> answered_by_io_{0};  // newest RecoverRequest the I/O thread answered
  std::mutex published_mu_;                  // guards the four below, read by the I/O thread
  std::vector<int64_t> published_commits_;
  int64_t published_step_ = 0;
  Layout published_layout_;
  int published_rank_ = -1;
  PushInbox inbox_;
};

}  // namespace elastra
