// EtcdElection: one coordinator's campaign for the leadership of a job on etcd (docs/ha.md,
// "Election"). A campaigner holds an etcd lease, renewed from a thread of its own every third of
// its TTL, and leads when a transaction created /elastra/JOB/leader, attached to that lease, with
// its address as the value; standbys read the key every poll interval and try again when it is
// gone. The leader key's create revision is the fence every journal write of the leader is
// conditioned on (EtcdJournalStorage::SetFence). A leader counts its lease's deadline from the
// moment it sent its last renewal that etcd answered, never from the answer: etcd counts from
// when it received the renewal, later, so the leader stops believing it leads before etcd lets
// the key go. Thread-safe: Campaign, Cancel, Leader, Leading and Resign may be called from any
// thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "elastra/status.h"
#include "journal/etcd_client.h"

namespace elastra::journal {

struct ElectionOptions {
  // The cluster. Required.
  EtcdOptions etcd;
  // The job whose leadership this is: its key is /elastra/JOB/leader. Required, without a '/'.
  std::string job;
  // The leader key's value while this campaigner leads, for standbys and clients to read: opaque
  // here (elastra coordinator puts a JSON object of its addresses, host and pid; docs/ha.md).
  // Required. Announce() replaces it once the leader knows more.
  std::string address;
  // The lease's TTL, rounded up to whole seconds (etcd's unit; etcd grants at least 1.5 of its
  // election timeouts). Default 3 s.
  std::chrono::milliseconds ttl{3000};
  // How often a standby reads the leader key while it waits, and how soon a campaign tries again
  // after etcd failed to answer. Default 250 ms.
  std::chrono::milliseconds poll_interval{250};
  // Called once each time this campaigner stops leading other than by Resign, with why: its
  // lease's deadline passed without a renewal etcd answered, etcd answered that the lease is gone,
  // or the leader key is no longer the one it created. Runs on the election's own thread: it must
  // not block (signal the thread that steps down) and must not destroy the election. Default:
  // none.
  std::function<void(const std::string& why)> on_lost;
};

// The leader as the leader key says.
struct EtcdLeader {
  std::string address;  // the key's value (ElectionOptions::address of the leader)
  int64_t create_revision = 0;  // what its writes are fenced on
  int64_t lease = 0;
};

class EtcdElection {
 public:
  // kInvalidArgument for a missing job, address or endpoint list, or a TTL under 1 ms. Talks to
  // no one yet.
  static StatusOr<std::unique_ptr<EtcdElection>> Create(ElectionOptions options);
  // Resigns when leading (best effort) and stops the renewal thread. A Campaign running in
  // another thread must have returned (Cancel it first).
  ~EtcdElection();
  EtcdElection(const EtcdElection&) = delete;
  EtcdElection& operator=(const EtcdElection&) = delete;

  // "/elastra/JOB/leader".
  static std::string LeaderKey(std::string_view job);

  // Blocks until this campaigner leads, and returns the fence its journal writes must carry.
  // Failed requests to etcd (kUnavailable) are tried again every poll interval: a standby waits
  // through an outage of etcd. kAborted once Cancel() was called. When it leads already: its
  // fence, at once.
  StatusOr<EtcdFence> Campaign();
  // Makes a Campaign in progress, and every later one, return kAborted. For shutting down.
  void Cancel();
  // The leader now: kNotFound when no one leads, etcd's error when it cannot be read.
  StatusOr<EtcdLeader> Leader();
  // True while this campaigner leads and its lease's deadline has not passed (by the clock, even
  // before the renewal thread noticed).
  bool Leading() const;
  // While leading: sets the leader key's value to `value` (what this leader learned after it won,
  // such as the ports it bound), on the same lease and create revision, so the fence holds.
  // kFailedPrecondition when it does not lead or the key is no longer the one it created, etcd's
  // error when the write failed; the old value stays then.
  Status Announce(std::string value);
  // Gives up leading (or the lease a standby waits with): revokes the lease, which deletes the
  // leader key, so a standby leads next. on_lost is not called. etcd's error when the revoke
  // failed (the lease then expires by itself); OK when there was nothing to give up.
  Status Resign();

  // For tests: stops (true) or resumes (false) sending renewals, as a process stopped or cut off
  // from etcd would, so that the lease expires.
  void PauseRenewalForTest(bool paused);

 private:
  using Clock = std::chrono::steady_clock;
  EtcdElection(ElectionOptions options, std::unique_ptr<EtcdClient> client,
               std::unique_ptr<EtcdClient> renew_client);
  // One attempt: a lease if there is none, then the transaction that creates the leader key.
  // True when it leads (then `fence` is set).
  StatusOr<bool> TryToLead(EtcdFence* fence);
  // The renewal thread: sends a keepalive every third of the lease's TTL while there is a lease.
  void RenewLoop();
  // The deadline thread: declares leadership lost when the lease's deadline passes.
  void WatchLoop();
  // Forgets the lease and, when leading, marks leadership lost for WatchLoop to report. mu_ held.
  void LoseLocked(const std::string& why);

  const ElectionOptions options_;
  const std::string key_;
  std::mutex client_mu_;                 // serializes client_'s requests
  std::unique_ptr<EtcdClient> client_;   // Campaign, Leader, Resign
  std::unique_ptr<EtcdClient> renew_client_;  // the renewal thread's

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t lease_ = 0;  // 0: none
  std::chrono::milliseconds lease_ttl_{0};
  Clock::time_point deadline_;      // when the lease may have expired, as this side counts
  Clock::time_point next_renewal_;  // when the next keepalive is due
  bool leading_ = false;
  int64_t won_revision_ = 0;
  std::string value_;  // the leader key's value: options_.address, then Announce's
  std::string lost_why_;  // set by LoseLocked while leading; WatchLoop reports it
  bool paused_ = false;
  bool cancelled_ = false;
  bool stopping_ = false;
  std::thread renew_thread_;
  std::thread watch_thread_;
};

}  // namespace elastra::journal
