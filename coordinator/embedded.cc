#include "coordinator/embedded.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "coordinator/options.h"

namespace elastra::coordinator {
namespace {

long long EnvInt(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return (end != v && *end == '\0' && x >= 0) ? x : fallback;
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
  EmbeddedCoordinator e;
  ELASTRA_ASSIGN_OR_RETURN(KeyPair server_keys, GenerateKeyPair());
  ELASTRA_ASSIGN_OR_RETURN(e.info.admin, GenerateKeyPair());
  ELASTRA_ASSIGN_OR_RETURN(e.info.worker, GenerateKeyPair());
  CoordinatorOptions o;
  o.job = options.job;
  o.bind_address = options.bind;
  o.server_keys = server_keys;
  o.worker_public_keys = {e.info.worker.public_key};
  o.admin_public_keys = {e.info.admin.public_key};
  o.initial_workers = options.initial_workers;
  o.max_workers = std::max(options.max_workers, options.initial_workers);
  o.resume_from = options.resume_from;
  o.heartbeat_interval = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_MS", 200));
  o.heartbeat_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_HEARTBEAT_TIMEOUT_MS", 1500));
  o.spawn_timeout = std::chrono::milliseconds(EnvInt("ELASTRA_SPAWN_TIMEOUT_MS", 60000));
  ELASTRA_ASSIGN_OR_RETURN(e.server, CoordinatorServer::Start(o));
  e.info.address = e.server->address();
  e.info.job = options.job;
  e.info.server_public = server_keys.public_key;
  e.info.pid = getpid();
  ELASTRA_RETURN_IF_ERROR(
      WriteConnectionInfo(options.state_dir + "/coordinator.json", e.info));
  return e;
}

}  // namespace elastra::coordinator
