// KvService: the rendezvous key-value service of the control protocol (docs/protocol.md). It
// answers KvSet, KvGet, KvWait, KvAdd and KvSetAndGet over a KvStore, parks a get or wait whose
// keys are not there yet until they are set or its deadline passes (at most an hour), and drops
// the keys of old generations when a generation commits. Time comes from the injected Clock.
// Thread-compatible: the core's loop owns it, like every manager.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/kv_store.h"
#include "coordinator/outbox.h"

namespace elastra::coordinator {

class KvService {
 public:
  // Longest a get or wait may block.
  static constexpr int64_t kMaxTimeoutMs = 3600 * 1000;

  // `clock` and `outbox` are not owned and must outlive the service.
  KvService(Clock* clock, Outbox* outbox) : outbox_(outbox), store_(clock), clock_(clock) {}

  // One KvSet, KvGet, KvWait or KvAdd from ROUTER identity `identity`: the reply, and the
  // replies to the waits it completes, go to the outbox.
  void Handle(const std::string& identity, const proto::Envelope& e);
  // Answers the gets and waits whose deadline passed with kTimedOut.
  void Tick();
  // Generation `generation` committed: keys of generations older than the one before it go.
  void OnCommitted(uint64_t generation);

  const KvStore& store() const { return store_; }

 private:
  // Parks a get, get of many or wait for `keys`; kTimedOut at once when `timeout_ms` <= 0.
  void Block(const std::string& identity, const proto::Envelope& e, std::vector<std::string> keys,
             int64_t timeout_ms, bool is_get, bool is_get_many = false);
  void Answer(std::vector<KvStore::Completion>& done);

  Outbox* outbox_;
  KvStore store_;
  Clock* clock_;
};

}  // namespace elastra::coordinator
