#include "launch/embedded.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "common/logging.h"
#include "protocol/net.h"
#include "coordinator/journal_location.h"
#include "coordinator/options.h"
#include "journal/events.h"
#include "journal/journal.h"
#include "launch/etcd_job.h"

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

namespace {

// The paths of the state directory's files.
struct StateFiles {
  explicit StateFiles(const std::string& dir)
      : info(dir + "/coordinator.json"),
        join(dir + "/join.json"),
        key(dir + "/server.key"),
        journal(dir + "/journal.bin") {}
  std::string info, join, key, journal;
};

// The job a start takes back, if any: a restart's from the state directory's coordinator.json and
// server.key; over etcd, the job's key beside its journal (docs/ha.md: there, a job name whose
// journal exists is taken over, restart or not). nullopt: a new job.
StatusOr<std::optional<EtcdJob>> PriorJob(const EmbeddedOptions& options, const StateFiles& f) {
  if (!options.etcd.empty()) {
    auto job = ReadEtcdJob(options.etcd, options.job);
    if (!job.ok()) return job.status().WithContext("reading job " + options.job + " from etcd");
    if (options.restart && !job->has_value()) {
      return NotFoundError("restarting: etcd (" + options.etcd + ") holds no job '" +
                           options.job + "'");
    }
    return job;
  }
  if (!options.restart) return std::optional<EtcdJob>();
  EtcdJob prior;
  auto info = ReadConnectionInfo(f.info);
  if (!info.ok())
    return info.status().WithContext("restarting the coordinator of " + options.state_dir);
  auto keys = ReadKeyFile(f.key);
  if (!keys.ok()) return keys.status().WithContext("restarting: reading " + f.key);
  if (keys->public_key != info->server_public || !IsValidZ85Key(keys->secret_key)) {
    return CorruptError("restarting: " + f.key + " does not hold the key pair named in " + f.info);
  }
  prior.info = *info;
  prior.server_keys = *keys;
  return std::optional<EtcdJob>(std::move(prior));
}

// Takes back `prior`'s job: its journal's bind and sizes into `o`, its keys into the state
// directory when they came from etcd (a new or emptied state directory).
Status TakeBack(const EmbeddedOptions& options, const StateFiles& f, const EtcdJob& prior,
                CoordinatorOptions* o) {
  o->job = prior.info.job;
  std::vector<std::string> warnings;
  auto storage = coordinator::OpenJournalStorage(*o);
  if (!storage.ok()) return storage.status();
  const std::string where = coordinator::JournalLocation(*o);
  auto journal = Journal::Replay(**storage, &warnings);
  if (!journal.ok()) {
    return journal.status().WithContext("restarting: nothing to take back in " + where);
  }
  if (journal->empty()) {
    return NotFoundError("restarting: the journal (" + where + ") holds no job");
  }
  // The same endpoint as before: the journaled bind host (0.0.0.0 stays every interface) on the
  // port the clients have.
  o->bind_address = RestartBindAddress(journal->bind, prior.info.address);
  o->initial_workers = std::max(1, journal->initial_workers);
  o->max_workers = std::max(journal->max_workers, o->initial_workers);
  if (options.etcd.empty()) return OkStatus();
  LOG(WARNING) << "job " << o->job << " has a journal on etcd (" << where
               << "): taking it over on " << prior.info.address;
  ELASTRA_RETURN_IF_ERROR(WriteKeyFile(f.key, prior.server_keys));
  // The HTTP API's tokens, which its clients have (LoadOrCreateTokens reads them back).
  const std::string dir = options.state_dir;
  if (!prior.admin_token.empty() && !prior.read_token.empty()) {
    ELASTRA_RETURN_IF_ERROR(
        WriteFileAtomically(dir + "/admin.token", prior.admin_token + "\n", 0600));
    ELASTRA_RETURN_IF_ERROR(
        WriteFileAtomically(dir + "/read.token", prior.read_token + "\n", 0600));
  }
  return OkStatus();
}

// A new job: new keys, and no older job's journal or final status taken for this one's.
Status StartNew(const EmbeddedOptions& options, const StateFiles& f, const CoordinatorOptions& o,
                EtcdJob* job) {
  ELASTRA_ASSIGN_OR_RETURN(job->server_keys, GenerateKeyPair());
  ELASTRA_ASSIGN_OR_RETURN(job->info.admin, GenerateKeyPair());
  ELASTRA_ASSIGN_OR_RETURN(job->info.worker, GenerateKeyPair());
  job->info.job = options.job;
  std::error_code ec;
  if (options.etcd.empty()) {
    std::filesystem::remove(f.journal, ec);
    std::filesystem::remove(f.journal + ".corrupt", ec);
  } else {
    // A journal on etcd without the job's key was never joined (the key is written before
    // join.json): what a start that died before publishing left. Start it again, empty.
    auto storage = coordinator::OpenJournalStorage(o);
    if (!storage.ok()) return storage.status();
    auto cleared = Journal::Create(std::move(storage).value());
    if (!cleared.ok()) {
      return cleared.status().WithContext("clearing " + coordinator::JournalLocation(o));
    }
  }
  std::filesystem::remove(options.state_dir + "/status.json", ec);
  return WriteKeyFile(f.key, job->server_keys);
}

// The journal's events for GET /v1/events when its storage cannot be made (it could when the
// coordinator started): none.
class NoEvents : public JobEventSource {
 public:
  std::vector<JobEvent> ReadNew() override { return {}; }
};

// The HTTP API in front of the coordinator (docs/http.md), its events read from the journal `o`
// chose, each stream with a storage of its own.
StatusOr<std::unique_ptr<HttpServer>> StartHttp(const std::string& listen, bool takeover,
                                                const CoordinatorOptions& o,
                                                const EmbeddedCoordinator& e, EtcdJob* job) {
  auto tokens = LoadOrCreateTokens(o.state_dir);
  if (!tokens.ok()) return tokens.status();
  job->admin_token = tokens->admin;
  job->read_token = tokens->read;
  HttpOptions h;
  h.listen = listen;
  h.admin_token = tokens->admin;
  h.read_token = tokens->read;
  h.coordinator.address = LoopbackAddress(e.server->address());
  h.coordinator.server_public = e.info.server_public;
  h.coordinator.client_keys = e.info.admin;
  h.coordinator.job = e.info.job;
  h.coordinator.sender = "admin-http";
  // Elected on etcd: /healthz says so, as a standby's says "standby" (docs/ha.md).
  if (!o.etcd_fence_key.empty()) h.role = "leader";
  h.events = [o](uint64_t after) -> std::unique_ptr<JobEventSource> {
    auto storage = coordinator::OpenJournalStorage(o);
    if (!storage.ok()) {
      LOG(WARNING) << "no events: " << storage.status().ToString();
      return std::make_unique<NoEvents>();
    }
    return std::make_unique<journal::JournalEventReader>(std::move(storage).value(), after);
  };
  auto server = HttpServer::Start(h);
  // A restart listens on the old port; the old process may still be releasing it for a moment.
  for (int tries = 0; takeover && !server.ok() &&
                      server.status().code() == StatusCode::kUnavailable && tries < 30;
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server = HttpServer::Start(h);
  }
  return server;
}

void SetTiming(CoordinatorOptions* o) {
  o->heartbeat_interval = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_MS", 200));
  o->heartbeat_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_TIMEOUT_MS", 1500));
  o->spawn_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_SPAWN_TIMEOUT_MS", 60000));
  o->checkpoint_keep =
      static_cast<int>(std::max<long long>(1, EnvInt("ELASTRA_CHECKPOINT_KEEP", 3)));
  o->keep_groups = EnvInt("ELASTRA_KEEP_GROUPS", 1) != 0;
}

}  // namespace

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
  const StateFiles f(options.state_dir);
  CoordinatorOptions o;
  o.job = options.job;
  o.bind_address = options.bind;
  o.initial_workers = options.initial_workers;
  o.max_workers = std::max(options.max_workers, options.initial_workers);
  o.spares = options.spares;
  o.state_dir = options.state_dir;
  o.etcd = options.etcd;
  o.etcd_fence_key = options.etcd_fence_key;
  o.etcd_fence_revision = options.etcd_fence_revision;
  o.on_fenced = options.on_fenced;
  o.journal_compact_records = options.journal_compact_records;
  ELASTRA_ASSIGN_OR_RETURN(std::optional<EtcdJob> prior, PriorJob(options, f));
  // A restart, or a takeover over etcd: the same job, address and keys as before, and clients
  // reconnect by themselves.
  const bool takeover = prior.has_value();
  EtcdJob job;
  if (takeover) {
    job = *prior;
    ELASTRA_RETURN_IF_ERROR(TakeBack(options, f, job, &o));
  } else {
    ELASTRA_RETURN_IF_ERROR(StartNew(options, f, o, &job));
  }
  EmbeddedCoordinator e;
  e.info = job.info;
  o.server_keys = job.server_keys;
  o.worker_public_keys = {e.info.worker.public_key};
  o.admin_public_keys = {e.info.admin.public_key};
  o.resume_from = options.resume_from;
  SetTiming(&o);
  auto server = CoordinatorServer::Start(o);
  // A restart binds the old address; the old process may still be releasing it for a moment.
  for (int tries = 0; takeover && !server.ok() &&
                      server.status().code() == StatusCode::kUnavailable && tries < 30;
       ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server = CoordinatorServer::Start(o);
  }
  if (!server.ok()) return server.status();
  e.server = std::move(server).value();
  e.journal = coordinator::JournalLocation(o);
  if (!takeover || !options.advertise.empty()) {
    // A restart keeps the address it published (clients have it), unless told another.
    auto advertised = AdvertisedAddress(e.server->address(), options.advertise);
    if (!advertised.ok()) return advertised.status();
    e.info.address = *advertised;
  }
  if (e.info.address != e.server->address()) {
    LOG(INFO) << "coordinator bound to " << e.server->address() << ", published as "
              << e.info.address;
  }
  e.info.server_public = job.server_keys.public_key;
  e.info.pid = getpid();
  std::string http = options.http;
  if (takeover && http.empty() && e.info.http.rfind("http://", 0) == 0) {
    http = e.info.http.substr(7);  // the same URL as before: its clients have it
  }
  e.info.http.clear();
  job.admin_token.clear();
  job.read_token.clear();
  if (!http.empty()) {
    ELASTRA_ASSIGN_OR_RETURN(e.http, StartHttp(http, takeover, o, e, &job));
    e.info.http = e.http->url();
    LOG(INFO) << "HTTP API at " << e.info.http;
  }
  if (!options.etcd.empty()) {
    // Before join.json: no agent or worker joins a job that a later start could not take over.
    job.info = e.info;
    ELASTRA_RETURN_IF_ERROR(WriteEtcdJob(options.etcd, job).WithContext(
        "writing job " + job.info.job + "'s keys to etcd"));
  }
  e.join = e.info;
  e.join.admin = KeyPair{};
  e.join.pid = 0;
  e.join.http.clear();
  // join.json first: whoever waits for coordinator.json finds both.
  ELASTRA_RETURN_IF_ERROR(WriteJoinFile(f.join, e.join));
  ELASTRA_RETURN_IF_ERROR(WriteConnectionInfo(f.info, e.info));
  return e;
}

}  // namespace elastra::launch
