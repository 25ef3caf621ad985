#include "launch/embedded.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "protocol/net.h"
#include "coordinator/options.h"
#include "journal/events.h"
#include "journal/journal.h"

namespace elastra::launch {
namespace {

using coordinator::CoordinatorOptions;
using coordinator::CoordinatorServer;
using http::HttpOptions;
using http::HttpServer;
using http::LoadOrCreateTokens;
using journal::Journal;

long long EnvInt(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return (end != v && *end == '\0' && x >= 0) ? x : fallback;
}

bool IsWildcard(const std::string& host) { return host == "0.0.0.0" || host == "*"; }

// Where an in-process client reaches a server bound at `bound`: a wildcard bind over loopback.
std::string LoopbackAddress(const std::string& bound) {
  auto endpoint = ParseTcpEndpoint(bound);
  if (!endpoint.ok() || !IsWildcard(endpoint->host)) return bound;
  return "tcp://127.0.0.1:" + std::to_string(endpoint->port);
}

}  // namespace

std::string FirstNonLoopbackIPv4() {
  const std::vector<Ipv4Interface> interfaces = LocalIpv4Interfaces();
  return interfaces.empty() ? "127.0.0.1" : interfaces.front().address;
}

StatusOr<std::string> AdvertisedAddress(const std::string& bound, const std::string& advertise,
                                        std::string (*first_ipv4)()) {
  auto endpoint = ParseTcpEndpoint(bound);
  if (!endpoint.ok()) {
    return InvalidArgumentError("the coordinator is bound to '" + bound +
                                "', not a tcp://HOST:PORT endpoint");
  }
  const std::string port = std::to_string(endpoint->port);
  if (advertise.empty()) {
    if (!IsWildcard(endpoint->host)) return bound;
    const std::string ip = (first_ipv4 != nullptr ? first_ipv4 : FirstNonLoopbackIPv4)();
    return "tcp://" + ip + ":" + port;
  }
  std::string a = advertise;
  if (a.rfind("tcp://", 0) != 0) a = "tcp://" + a;
  if (ParseTcpEndpoint(a).ok()) return a;
  // "HOST" alone: the bound port.
  const std::string plain = a.substr(6);
  if (plain.empty() || plain.find_first_of(":/") != std::string::npos) {
    return InvalidArgumentError("--advertise '" + advertise +
                                "' is not tcp://HOST:PORT, HOST:PORT or HOST");
  }
  return "tcp://" + plain + ":" + port;
}

std::string RestartBindAddress(const std::string& journaled_bind, const std::string& published) {
  auto bind = ParseTcpEndpoint(journaled_bind);
  auto publish = ParseTcpEndpoint(published);
  if (!bind.ok() || !publish.ok()) return published;
  return bind->port == 0 ? "tcp://" + bind->host + ":" + std::to_string(publish->port)
                         : journaled_bind;
}

StatusOr<EmbeddedCoordinator> StartEmbeddedCoordinator(const EmbeddedOptions& options) {
  if (options.initial_workers < 1) {
    return InvalidArgumentError("an embedded coordinator needs at least one initial worker");
  }
  if (options.state_dir.empty()) return InvalidArgumentError("empty state directory");
  std::error_code ec;
  std::filesystem::create_directories(options.state_dir, ec);
  if (ec) {
    return InvalidArgumentError("cannot create state directory " + options.state_dir + ": " +
                                ec.message());
  }
  chmod(options.state_dir.c_str(), 0700);
  EmbeddedCoordinator e;
  const std::string info_path = options.state_dir + "/coordinator.json";
  const std::string join_path = options.state_dir + "/join.json";
  const std::string key_path = options.state_dir + "/server.key";
  const std::string journal_path = options.state_dir + "/journal.bin";
  KeyPair server_keys;
  CoordinatorOptions o;
  o.job = options.job;
  o.bind_address = options.bind;
  o.initial_workers = options.initial_workers;
  o.max_workers = std::max(options.max_workers, options.initial_workers);
  o.spares = options.spares;
  if (options.restart) {
    // The same job, address and keys as before: clients reconnect by themselves.
    auto info = ReadConnectionInfo(info_path);
    if (!info.ok())
      return info.status().WithContext("restarting the coordinator of " + options.state_dir);
    auto keys = ReadKeyFile(key_path);
    if (!keys.ok()) return keys.status().WithContext("restarting: reading " + key_path);
    if (keys->public_key != info->server_public || !IsValidZ85Key(keys->secret_key)) {
      return CorruptError("restarting: " + key_path + " does not hold the key pair named in " +
                          info_path);
    }
    std::vector<std::string> warnings;
    auto journal = Journal::Replay(journal_path, &warnings);
    if (!journal.ok()) return journal.status().WithContext("restarting: nothing to take back");
    if (journal->empty())
      return NotFoundError("restarting: the journal " + journal_path + " holds no job");
    server_keys = *keys;
    e.info = *info;
    o.job = info->job;
    // The same endpoint as before: the journaled bind host (0.0.0.0 stays every interface) on the
    // port the clients have.
    o.bind_address = RestartBindAddress(journal->bind, info->address);
    o.initial_workers = std::max(1, journal->initial_workers);
    o.max_workers = std::max(journal->max_workers, o.initial_workers);
  } else {
    ELASTRA_ASSIGN_OR_RETURN(server_keys, GenerateKeyPair());
    ELASTRA_ASSIGN_OR_RETURN(e.info.admin, GenerateKeyPair());
    ELASTRA_ASSIGN_OR_RETURN(e.info.worker, GenerateKeyPair());
    // A new job: an older job's journal in this directory must not be taken back.
    std::filesystem::remove(journal_path, ec);
    std::filesystem::remove(journal_path + ".corrupt", ec);
    // Nor its final status be shown as this job's.
    std::filesystem::remove(options.state_dir + "/status.json", ec);
    ELASTRA_RETURN_IF_ERROR(WriteKeyFile(key_path, server_keys));
    e.info.job = options.job;
  }
  o.server_keys = server_keys;
  o.worker_public_keys = {e.info.worker.public_key};
  o.admin_public_keys = {e.info.admin.public_key};
  o.resume_from = options.resume_from;
  o.state_dir = options.state_dir;
  o.heartbeat_interval = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_MS", 200));
  o.heartbeat_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_TIMEOUT_MS", 1500));
  o.spawn_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_SPAWN_TIMEOUT_MS", 60000));
  o.checkpoint_keep =
      static_cast<int>(std::max<long long>(1, EnvInt("ELASTRA_CHECKPOINT_KEEP", 3)));
  o.keep_groups = EnvInt("ELASTRA_KEEP_GROUPS", 1) != 0;
  auto server = CoordinatorServer::Start(o);
  // A restart binds the old address; the old process may still be releasing it for a moment.
  for (int tries = 0; options.restart && !server.ok() &&
                      server.status().code() == StatusCode::kUnavailable && tries < 30;
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server = CoordinatorServer::Start(o);
  }
  if (!server.ok()) return server.status();
  e.server = std::move(server).value();
  if (!options.restart || !options.advertise.empty()) {
    // A restart keeps the address it published (clients have it), unless told another.
    auto advertised = AdvertisedAddress(e.server->address(), options.advertise);
    if (!advertised.ok()) return advertised.status();
    e.info.address = *advertised;
  }
  if (e.info.address != e.server->address()) {
    LOG(INFO) << "coordinator bound to " << e.server->address() << ", published as "
              << e.info.address;
  }
  e.info.server_public = server_keys.public_key;
  e.info.pid = getpid();
  std::string http = options.http;
  if (options.restart && http.empty() && e.info.http.rfind("http://", 0) == 0) {
    http = e.info.http.substr(7);  // the same URL as before: its clients have it
  }
  e.info.http.clear();
  if (!http.empty()) {
    auto tokens = LoadOrCreateTokens(options.state_dir);
    if (!tokens.ok()) return tokens.status();
    HttpOptions h;
    h.listen = http;
    h.admin_token = tokens->admin;
    h.read_token = tokens->read;
    h.coordinator.address = LoopbackAddress(e.server->address());
    h.coordinator.server_public = server_keys.public_key;
    h.coordinator.client_keys = e.info.admin;
    h.coordinator.job = e.info.job;
    h.coordinator.sender = "admin-http";
    h.events = [journal_path](uint64_t after) -> std::unique_ptr<JobEventSource> {
      return std::make_unique<journal::JournalEventReader>(journal_path, after);
    };
    auto server = HttpServer::Start(h);
    // A restart listens on the old port; the old process may still be releasing it for a moment.
    for (int tries = 0; options.restart && !server.ok() &&
                        server.status().code() == StatusCode::kUnavailable && tries < 30;
         ++tries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      server = HttpServer::Start(h);
    }
    if (!server.ok()) return server.status();
    e.http = std::move(server).value();
    e.info.http = e.http->url();
    LOG(INFO) << "HTTP API at " << e.info.http;
  }
  e.join = e.info;
  e.join.admin = KeyPair{};
  e.join.pid = 0;
  e.join.http.clear();
  // join.json first: whoever waits for coordinator.json finds both.
  ELASTRA_RETURN_IF_ERROR(WriteJoinFile(join_path, e.join));
  ELASTRA_RETURN_IF_ERROR(WriteConnectionInfo(info_path, e.info));
  return e;
}

}  // namespace elastra::launch
