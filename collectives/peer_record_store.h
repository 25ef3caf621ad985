// PeerRecordStore: a KeyValueStore in which one Gloo world's address records (common/mesh_peers.h)
// never reach the coordinator: this rank's own go to its RecordServer, its build peers' are read
// from theirs (record_server.h), at the endpoints the coordinator gave it
// (NewGeneration::build_peers). Every other key (pairs connected on demand, NCCL's unique id, the
// groups' records) goes to the store under it. Thread-safe, as the stores under it are.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "collectives/kv_store.h"
#include "collectives/record_server.h"

namespace elastra {

class PeerRecordStore : public KeyValueStore {
 public:
  // The records of the world under `world_prefix` (its communicator's prefix) whose rank is
  // `rank`: kept by `server`; rank r's (a key of `endpoints`) read from the RecordServer at
  // endpoints[r] (a packed endpoint). `fallback` and `server` are not owned and must outlive the
  // store.
  PeerRecordStore(KeyValueStore* fallback, RecordServer* server, std::string world_prefix,
                  int rank, std::map<int, std::string> endpoints);

  // Blocking reads give up with kAborted as soon as `cancelled` says so (checked every 100 ms),
  // as CoordinatorStore's do.
  void SetCancel(std::function<bool()> cancelled) { cancelled_ = std::move(cancelled); }

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  // The sets of this rank's records to the server and the reads of the peers' from theirs, all
  // at once; the rest in one SetAndGet of the store under it.
  StatusOr<std::vector<std::string>> SetAndGet(
      const std::vector<std::pair<std::string, std::string>>& sets,
      const std::vector<std::string>& gets, std::chrono::milliseconds timeout) override;

 private:
  // Who keeps `key`: this rank (0), a peer (1, with its endpoint), or the store under it (-1).
  int Route(const std::string& key, const std::string** endpoint) const;

  KeyValueStore* const fallback_;
  RecordServer* const server_;
  const std::string world_prefix_;
  const int rank_;
  const std::map<int, std::string> endpoints_;
  std::function<bool()> cancelled_;
};

}  // namespace elastra
