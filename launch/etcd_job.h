// The job's keys and addresses kept in etcd beside its journal, at /elastra/JOB/coordinator
// (docs/ha.md, "Keys"), for a coordinator started with --etcd: what the state directory's
// coordinator.json, server.key and HTTP tokens hold, so that a coordinator whose state directory is
// gone takes the job over with the address and keys its agents and workers already have. One JSON
// object: coordinator.json's fields (no pid), "server_secret", and the HTTP API's "admin_token"
// and "read_token" when it has one. Written after the journal recorded the job and before
// join.json exists: a journal without this key was never joined. Stateless: thread-safe.
#pragma once

#include <optional>
#include <string>

#include "elastra/status.h"
#include "protocol/keys.h"

namespace elastra::launch {

struct EtcdJob {
  ConnectionInfo info;      // coordinator.json's fields; pid unused
  KeyPair server_keys;      // the coordinator's CURVE key pair
  std::string admin_token;  // the HTTP API's tokens; empty without one
  std::string read_token;
};

// The key of job `job`'s EtcdJob: "/elastra/JOB/coordinator".
std::string EtcdJobKey(const std::string& job);

// The job's EtcdJob on the cluster `endpoints` (comma-separated URLs); nullopt when etcd has none
// (a new job). kUnavailable when no endpoint answered, kInternal when etcd refused, kCorrupt when
// the value is not an EtcdJob of this job.
StatusOr<std::optional<EtcdJob>> ReadEtcdJob(const std::string& endpoints, const std::string& job);
// Writes it (info.job names the job). etcd's errors as ReadEtcdJob's; kInvalidArgument for a
// malformed endpoint list or key pair.
Status WriteEtcdJob(const std::string& endpoints, const EtcdJob& job);

// What an admin client (elastra status, resize, drain with --etcd) connects with to reach the
// job's leader: the job's EtcdJob info, its address replaced by the leader key's "control" when
// that has one (docs/ha.md, "Finding the leader"). nullopt while no coordinator leads (no leader
// key, between a leader's death and the standby's takeover) or the job has no key yet. etcd's
// errors as ReadEtcdJob's.
StatusOr<std::optional<ConnectionInfo>> ReadEtcdLeaderInfo(const std::string& endpoints,
                                                           const std::string& job);

}  // namespace elastra::launch
