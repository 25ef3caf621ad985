#include "launch/etcd_job.h"

#include <memory>
#include <nlohmann/json.hpp>

#include "journal/etcd_client.h"
#include "journal/etcd_election.h"

namespace elastra::launch {
namespace {

using journal::EtcdClient;
using journal::EtcdOptions;

StatusOr<std::unique_ptr<EtcdClient>> Client(const std::string& endpoints) {
  EtcdOptions o;
  o.endpoints = endpoints;
  return EtcdClient::Create(std::move(o));
}

nlohmann::json KeyPairJson(const KeyPair& keys) {
  return {{"public", keys.public_key}, {"secret", keys.secret_key}};
}

std::string Text(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

std::string EtcdJobKey(const std::string& job) { return "/elastra/" + job + "/coordinator"; }

StatusOr<std::optional<EtcdJob>> ReadEtcdJob(const std::string& endpoints, const std::string& job) {
  ELASTRA_ASSIGN_OR_RETURN(auto client, Client(endpoints));
  const std::string key = EtcdJobKey(job);
  ELASTRA_ASSIGN_OR_RETURN(journal::EtcdRangeResult r, client->Range(key, ""));
  if (r.kvs.empty()) return std::optional<EtcdJob>();
  const std::string source = "etcd's " + key;
  EtcdJob e;
  ELASTRA_ASSIGN_OR_RETURN(e.info, ParseConnectionInfo(r.kvs.front().value, source));
  e.info.pid = 0;
  if (e.info.job != job) {
    return CorruptError(source + " names job '" + e.info.job + "', not '" + job + "'");
  }
  const nlohmann::json j = nlohmann::json::parse(r.kvs.front().value, nullptr, false);
  e.server_keys.public_key = e.info.server_public;
  e.server_keys.secret_key = Text(j, "server_secret");
  if (!IsValidZ85Key(e.server_keys.secret_key)) {
    return CorruptError(source + ": \"server_secret\" is not a 40-character Z85 key");
  }
  if (!IsValidZ85Key(e.info.admin.secret_key) || !IsValidZ85Key(e.info.worker.secret_key)) {
    return CorruptError(source + " lacks the admin or worker key pair");
  }
  e.admin_token = Text(j, "admin_token");
  e.read_token = Text(j, "read_token");
  return std::optional<EtcdJob>(std::move(e));
}

Status WriteEtcdJob(const std::string& endpoints, const EtcdJob& e) {
  if (!IsValidZ85Key(e.server_keys.public_key) || !IsValidZ85Key(e.server_keys.secret_key) ||
      e.server_keys.public_key != e.info.server_public) {
    return InvalidArgumentError("the coordinator's key pair does not match its public key");
  }
  nlohmann::json j = {{"address", e.info.address},
                      {"job", e.info.job},
                      {"server_public", e.info.server_public},
                      {"server_secret", e.server_keys.secret_key},
                      {"admin", KeyPairJson(e.info.admin)},
                      {"worker", KeyPairJson(e.info.worker)}};
  if (!e.info.http.empty()) j["http"] = e.info.http;
  if (!e.admin_token.empty()) j["admin_token"] = e.admin_token;
  if (!e.read_token.empty()) j["read_token"] = e.read_token;
  ELASTRA_ASSIGN_OR_RETURN(auto client, Client(endpoints));
  return client->Put(EtcdJobKey(e.info.job), j.dump());
}

StatusOr<std::optional<ConnectionInfo>> ReadEtcdLeaderInfo(const std::string& endpoints,
                                                           const std::string& job) {
  ELASTRA_ASSIGN_OR_RETURN(auto client, Client(endpoints));
  ELASTRA_ASSIGN_OR_RETURN(journal::EtcdRangeResult leader,
                           client->Range(journal::EtcdElection::LeaderKey(job), ""));
  if (leader.kvs.empty()) return std::optional<ConnectionInfo>();
  ELASTRA_ASSIGN_OR_RETURN(std::optional<EtcdJob> e, ReadEtcdJob(endpoints, job));
  if (!e) return std::optional<ConnectionInfo>();
  // A leader key of an older coordinator, or one that has not bound yet, names no "control":
  // the job's published address, which a leader that takes the job over binds.
  const nlohmann::json v = nlohmann::json::parse(leader.kvs.front().value, nullptr, false);
  if (v.is_object()) {
    const std::string control = Text(v, "control");
    if (!control.empty()) e->info.address = control;
  }
  return std::optional<ConnectionInfo>(std::move(e->info));
}

}  // namespace elastra::launch
