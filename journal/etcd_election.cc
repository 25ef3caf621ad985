#include "journal/etcd_election.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace elastra::journal {

namespace {

int64_t TtlSeconds(std::chrono::milliseconds ttl) {
  return std::max<int64_t>(1, (ttl.count() + 999) / 1000);
}

}  // namespace

std::string EtcdElection::LeaderKey(std::string_view job) {
  return "/elastra/" + std::string(job) + "/leader";
}

StatusOr<std::unique_ptr<EtcdElection>> EtcdElection::Create(ElectionOptions options) {
  if (options.job.empty() || options.job.find('/') != std::string::npos) {
    return InvalidArgumentError("job name '" + options.job + "' for etcd: empty or with a '/'");
  }
  if (options.address.empty()) return InvalidArgumentError("a campaign needs an address");
  if (options.ttl.count() < 1) return InvalidArgumentError("a leader lease's TTL must be >= 1 ms");
  if (options.poll_interval.count() < 1) options.poll_interval = std::chrono::milliseconds(1);
  ELASTRA_ASSIGN_OR_RETURN(auto client, EtcdClient::Create(options.etcd));
  // A renewal that waits longer than a third of the TTL is late already: the next one is due.
  EtcdOptions renew = options.etcd;
  const auto third = std::chrono::milliseconds(TtlSeconds(options.ttl) * 1000 / 3);
  renew.connect_timeout = std::min(renew.connect_timeout, third);
  renew.request_timeout = std::min(renew.request_timeout, third);
  ELASTRA_ASSIGN_OR_RETURN(auto renew_client, EtcdClient::Create(renew));
  return std::unique_ptr<EtcdElection>(
      new EtcdElection(std::move(options), std::move(client), std::move(renew_client)));
}

EtcdElection::EtcdElection(ElectionOptions options, std::unique_ptr<EtcdClient> client,
                           std::unique_ptr<EtcdClient> renew_client)
    : options_(std::move(options)),
      key_(LeaderKey(options_.job)),
      client_(std::move(client)),
      renew_client_(std::move(renew_client)) {
  value_ = options_.address;
  renew_thread_ = std::thread([this] { RenewLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
}

EtcdElection::~EtcdElection() {
  Cancel();
  Resign().IgnoreError();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  renew_thread_.join();
  watch_thread_.join();
}

StatusOr<EtcdFence> EtcdElection::Campaign() {
  for (;;) {
    EtcdFence fence;
    StatusOr<bool> led = TryToLead(&fence);
    if (led.ok() && *led) return fence;
    if (!led.ok() && led.status().code() == StatusCode::kAborted) return led.status();
    // Someone else leads, or etcd did not answer: look again after the poll interval.
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, options_.poll_interval, [this] { return cancelled_; })) {
      return AbortedError("the campaign for job " + options_.job + " was cancelled");
    }
  }
}

StatusOr<bool> EtcdElection::TryToLead(EtcdFence* fence) {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return AbortedError("the campaign for job " + options_.job + " was cancelled");
    const auto now = Clock::now();
    if (leading_ && now < deadline_) {
      *fence = EtcdFence{key_, won_revision_};
      return true;
    }
    if (lease_ != 0 && now >= deadline_) lease_ = 0;  // a standby's lease that lapsed
    lease = lease_;
  }
  std::lock_guard<std::mutex> client_lock(client_mu_);
  if (lease == 0) {
    const auto sent = Clock::now();
    ELASTRA_ASSIGN_OR_RETURN(const EtcdLease granted,
                             client_->LeaseGrant(TtlSeconds(options_.ttl)));
    std::lock_guard<std::mutex> lock(mu_);
    lease_ = lease = granted.id;
    lease_ttl_ = std::chrono::seconds(granted.ttl_seconds);
    deadline_ = sent + lease_ttl_;
    next_renewal_ = sent + lease_ttl_ / 3;
    cv_.notify_all();
  }
  // The key is created only if it does not exist; a repeated request whose first answer was lost
  // finds the key on its own lease and leads with it.
  const EtcdCompare free{key_, EtcdCompare::Target::kVersion, EtcdCompare::Result::kEqual, 0, ""};
  std::string value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    value = value_;
  }
  EtcdOp put{EtcdOp::Kind::kPut, key_, value, "", 0};
  put.lease = lease;
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn,
                           client_->Txn({free}, {put}, {{EtcdOp::Kind::kRange, key_, "", "", 1}}));
  int64_t revision = 0;
  if (txn.succeeded) {
    revision = txn.revision;
  } else if (!txn.ranges.empty() && !txn.ranges[0].kvs.empty() &&
             txn.ranges[0].kvs[0].lease == lease) {
    revision = txn.ranges[0].kvs[0].create_revision;
  }
  if (revision == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  // A lease lost meanwhile takes the key with it: this campaigner does not lead on it.
  if (lease_ != lease || Clock::now() >= deadline_) return false;
  leading_ = true;
  won_revision_ = revision;
  lost_why_.clear();
  cv_.notify_all();
  *fence = EtcdFence{key_, revision};
  return true;
}

void EtcdElection::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  cv_.notify_all();
}

StatusOr<EtcdLeader> EtcdElection::Leader() {
  std::lock_guard<std::mutex> client_lock(client_mu_);
  ELASTRA_ASSIGN_OR_RETURN(const EtcdRangeResult r, client_->Range(key_, ""));
  if (r.kvs.empty()) return NotFoundError("no leader of job " + options_.job);
  return EtcdLeader{r.kvs[0].value, r.kvs[0].create_revision, r.kvs[0].lease};
}

bool EtcdElection::Leading() const {
  std::lock_guard<std::mutex> lock(mu_);
  return leading_ && Clock::now() < deadline_;
}

Status EtcdElection::Announce(std::string value) {
  int64_t lease = 0;
  int64_t won = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!leading_ || Clock::now() >= deadline_) {
      return FailedPreconditionError("not the leader of job " + options_.job);
    }
    lease = lease_;
    won = won_revision_;
  }
  // Only the key this campaigner created: a put on it keeps its create revision (the fence).
  const EtcdCompare mine{key_, EtcdCompare::Target::kCreateRevision, EtcdCompare::Result::kEqual,
                         won, ""};
  EtcdOp put{EtcdOp::Kind::kPut, key_, value, "", 0};
  put.lease = lease;
  std::lock_guard<std::mutex> client_lock(client_mu_);
  ELASTRA_ASSIGN_OR_RETURN(const EtcdTxnResult txn, client_->Txn({mine}, {put}, {}));
  if (!txn.succeeded) {
    return FailedPreconditionError("the leader key " + key_ +
                                   " is no longer the one created at revision " +
                                   std::to_string(won));
  }
  std::lock_guard<std::mutex> lock(mu_);
  value_ = std::move(value);
  return OkStatus();
}

Status EtcdElection::Resign() {
  int64_t lease = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lease = lease_;
    lease_ = 0;
    leading_ = false;
    won_revision_ = 0;
    lost_why_.clear();
  }
  cv_.notify_all();
  if (lease == 0) return OkStatus();
  std::lock_guard<std::mutex> client_lock(client_mu_);
  return client_->LeaseRevoke(lease);
}

void EtcdElection::PauseRenewalForTest(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = paused;
  }
  cv_.notify_all();
}

void EtcdElection::LoseLocked(const std::string& why) {
  if (leading_) {
    leading_ = false;
    lost_why_ = why;
  }
  lease_ = 0;
  cv_.notify_all();
}

void EtcdElection::RenewLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (lease_ == 0 || paused_) {
      cv_.wait(lock);
      continue;
    }
    if (Clock::now() < next_renewal_) {
      cv_.wait_until(lock, next_renewal_);
      continue;
    }
    const int64_t lease = lease_;
    const bool leading = leading_;
    const int64_t won = won_revision_;
    lock.unlock();
    const auto sent = Clock::now();
    StatusOr<int64_t> ttl = renew_client_->LeaseKeepAlive(lease);
    // A leader also checks that the key is still the one it created (an operator may delete it).
    bool key_gone = false;
    if (ttl.ok() && *ttl > 0 && leading) {
      StatusOr<EtcdRangeResult> r = renew_client_->Range(key_, "");
      key_gone = r.ok() && (r->kvs.empty() || r->kvs[0].create_revision != won);
    }
    lock.lock();
    if (lease_ != lease) continue;  // resigned or lost meanwhile
    if (!ttl.ok()) {
      // Not answered: try again soon; the deadline thread gives up when the lease may be gone.
      next_renewal_ = Clock::now() + std::max(lease_ttl_ / 10, std::chrono::milliseconds(50));
      continue;
    }
    if (*ttl == 0) {
      LoseLocked("etcd answered that lease " + std::to_string(lease) + " is gone");
      continue;
    }
    // Counted from the send: etcd counts from when it received the renewal, which is later.
    deadline_ = std::max(deadline_, sent + std::chrono::seconds(*ttl));
    next_renewal_ = sent + std::chrono::seconds(*ttl) / 3;
    if (key_gone && leading_ && won_revision_ == won) {
      LoseLocked("the leader key " + key_ + " is no longer the one created at revision " +
                 std::to_string(won));
    }
  }
}

void EtcdElection::WatchLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (leading_ && Clock::now() >= deadline_) {
      LoseLocked("no renewal of the leader's lease was answered within its TTL (" +
                 std::to_string(lease_ttl_.count() / 1000) + " s)");
    }
    if (!lost_why_.empty()) {
      const std::string why = std::move(lost_why_);
      lost_why_.clear();
      lock.unlock();
      if (options_.on_lost) options_.on_lost(why);
      lock.lock();
      continue;
    }
    if (leading_) {
      cv_.wait_until(lock, deadline_);
    } else {
      cv_.wait(lock);
    }
  }
}

}  // namespace elastra::journal
