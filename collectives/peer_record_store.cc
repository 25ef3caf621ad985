// PeerRecordStore: see peer_record_store.h.
#include "collectives/peer_record_store.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/mesh_peers.h"

namespace elastra {

PeerRecordStore::PeerRecordStore(KeyValueStore* fallback, RecordServer* server,
                                 std::string world_prefix, int rank,
                                 std::map<int, std::string> endpoints)
    : fallback_(fallback),
      server_(server),
      world_prefix_(std::move(world_prefix)),
      rank_(rank),
      endpoints_(std::move(endpoints)) {}

int PeerRecordStore::Route(const std::string& key, const std::string** endpoint) const {
  const int owner = AddressRecordOwner(world_prefix_, key);
  if (owner < 0) return -1;
  if (owner == rank_) return 0;
  auto it = endpoints_.find(owner);
  if (it == endpoints_.end()) return -1;
  *endpoint = &it->second;
  return 1;
}

Status PeerRecordStore::Set(const std::string& key, const std::string& value) {
  const std::string* endpoint = nullptr;
  switch (Route(key, &endpoint)) {
    case 0:
      server_->Put(key, value);
      return OkStatus();
    case 1:
      return InvalidArgumentError("rendezvous key '" + key + "' is another rank's record");
    default:
      return fallback_->Set(key, value);
  }
}

StatusOr<std::string> PeerRecordStore::Get(const std::string& key,
                                           std::chrono::milliseconds timeout) {
  ELASTRA_ASSIGN_OR_RETURN(std::vector<std::string> values, SetAndGet({}, {key}, timeout));
  return std::move(values[0]);
}

Status PeerRecordStore::Wait(const std::vector<std::string>& keys,
                             std::chrono::milliseconds timeout) {
  return SetAndGet({}, keys, timeout).status();
}

StatusOr<int64_t> PeerRecordStore::Add(const std::string& key, int64_t delta) {
  const std::string* endpoint = nullptr;
  if (Route(key, &endpoint) >= 0) {
    return InvalidArgumentError("rendezvous key '" + key + "' is an address record, no counter");
  }
  return fallback_->Add(key, delta);
}

StatusOr<std::vector<std::string>> PeerRecordStore::SetAndGet(
    const std::vector<std::pair<std::string, std::string>>& sets,
    const std::vector<std::string>& gets, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<std::pair<std::string, std::string>> other_sets;
  for (const auto& [key, value] : sets) {
    const std::string* endpoint = nullptr;
    switch (Route(key, &endpoint)) {
      case 0:
        server_->Put(key, value);
        break;
      case 1:
        return InvalidArgumentError("rendezvous key '" + key + "' is another rank's record");
      default:
        other_sets.emplace_back(key, value);
    }
  }
  // Where each value comes from: the server here, a peer's, or the store under it.
  std::vector<std::string> values(gets.size());
  std::vector<size_t> local, remote, other;
  std::vector<std::string> remote_keys, remote_endpoints, other_keys;
  for (size_t i = 0; i < gets.size(); ++i) {
    const std::string* endpoint = nullptr;
    switch (Route(gets[i], &endpoint)) {
      case 0:
        local.push_back(i);
        break;
      case 1:
        remote.push_back(i);
        remote_keys.push_back(gets[i]);
        remote_endpoints.push_back(*endpoint);
        break;
      default:
        other.push_back(i);
        other_keys.push_back(gets[i]);
    }
  }
  for (size_t i : local) {
    if (!server_->Get(gets[i], &values[i])) {
      return NotFoundError("rendezvous key '" + gets[i] + "': this rank's own record, not set");
    }
  }
  if (!other_sets.empty() || !other_keys.empty()) {
    ELASTRA_ASSIGN_OR_RETURN(std::vector<std::string> got,
                             fallback_->SetAndGet(other_sets, other_keys, timeout));
    for (size_t j = 0; j < other.size(); ++j) values[other[j]] = std::move(got[j]);
  }
  if (!remote_keys.empty()) {
    ELASTRA_ASSIGN_OR_RETURN(
        std::vector<std::string> got,
        FetchRecords(remote_endpoints, remote_keys, TimeoutUntil(deadline), cancelled_));
    for (size_t j = 0; j < remote.size(); ++j) values[remote[j]] = std::move(got[j]);
  }
  return values;
}

}  // namespace elastra
