// WorkerOptions::FromEnvironment: the options `elastra run` (or the mpirun bootstrap) hands a
// worker through its environment. Reads the process environment and, under mpirun, sets up the
// bootstrap (collective over the MPI world). Not thread-safe against concurrent setenv.
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "protocol/keys.h"
#include "common/logging.h"
#include "protocol/net.h"
#include "elastra/worker_options.h"
#include "worker/mpi_bootstrap.h"
#include "worker/worker_internals.h"

namespace elastra {
namespace {

using std::chrono::milliseconds;

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

Status ParseIntEnv(const char* name, int64_t* out) {
  std::string v = Getenv(name);
  if (v.empty()) return OkStatus();
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < 0) {
    return InvalidArgumentError(std::string(name) + "='" + v + "' is not a non-negative integer");
  }
  *out = x;
  return OkStatus();
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// Where a worker binds its collectives when nothing says: the local address of its route to the
// coordinator, which its peers (who reach the same coordinator) can reach too. A coordinator on
// loopback keeps the worker there. A coordinator whose address does not resolve is refused later
// by the connection, with its own error; until then the old default stands.
std::string DefaultBindHost(const std::string& coordinator) {
  auto endpoint = ParseTcpEndpoint(coordinator);
  if (!endpoint.ok()) return "127.0.0.1";
  auto local = LocalAddressToward(endpoint->host);
  if (!local.ok()) {
    LOG(WARNING) << "binding collectives on 127.0.0.1: " << local.status()
                 << " (set ELASTRA_BIND_HOST)";
    return "127.0.0.1";
  }
  return *local;
}

}  // namespace

StatusOr<WorkerOptions> WorkerOptions::FromEnvironment() {
  WorkerOptions o;
  auto internals = std::make_shared<WorkerInternals>();
  std::shared_ptr<MpiBootstrap>& mpi = internals->mpi;
  ELASTRA_ASSIGN_OR_RETURN(std::optional<MpirunEnvironment> mpirun, DetectMpirun());
  if (mpirun) {
    ELASTRA_ASSIGN_OR_RETURN(mpi, MpiBootstrap::Create(*mpirun));
    o.park_when_removed = true;
    o.local_rank = mpirun->local_rank;
  }
  o.coordinator = Getenv("ELASTRA_COORDINATOR");
  o.server_public_key = Getenv("ELASTRA_SERVER_KEY");
  o.public_key = Getenv("ELASTRA_WORKER_PUBLIC_KEY");
  o.secret_key = Getenv("ELASTRA_WORKER_SECRET_KEY");
  std::string job = Getenv("ELASTRA_JOB");
  if (!job.empty()) o.job = job;
  if (mpi != nullptr && o.coordinator.empty()) {  // MPI rank 0's embedded coordinator
    const ConnectionInfo& info = mpi->connection();
    o.coordinator = info.address;
    o.job = info.job;
    o.server_public_key = info.server_public;
    o.public_key = info.worker.public_key;
    o.secret_key = info.worker.secret_key;
  }
  std::string state_dir = Getenv("ELASTRA_STATE_DIR");
  // ELASTRA_COORDINATOR without the server key (mpirun ranks joining a named coordinator): the
  // keys come from the state directory too.
  if ((o.coordinator.empty() || o.server_public_key.empty()) && !state_dir.empty()) {
    auto info = ReadConnectionInfo(state_dir + "/coordinator.json");
    if (!info.ok()) return info.status().WithContext("ELASTRA_STATE_DIR=" + state_dir);
    if (o.coordinator.empty()) o.coordinator = info->address;
    o.job = info->job;
    o.server_public_key = info->server_public;
    if (o.public_key.empty()) {
      o.public_key = info->worker.public_key;
      o.secret_key = info->worker.secret_key;
    }
  }
  if (o.coordinator.empty()) {
    return InvalidArgumentError(
        "ELASTRA_COORDINATOR is not set (start workers with `elastra run`, or set it and the key "
        "variables, or ELASTRA_STATE_DIR)");
  }
  if (!IsValidZ85Key(o.server_public_key)) {
    return InvalidArgumentError("ELASTRA_SERVER_KEY is missing or not a 40-character Z85 key");
  }
  if (!IsValidZ85Key(o.public_key) || !IsValidZ85Key(o.secret_key)) {
    return InvalidArgumentError(
        "ELASTRA_WORKER_PUBLIC_KEY / ELASTRA_WORKER_SECRET_KEY are missing or malformed");
  }
  o.host = Getenv("ELASTRA_HOST");  // the agent names its host (containers share one name)
  if (o.host.empty()) o.host = HostName();
  o.worker_id = Getenv("ELASTRA_WORKER_ID");
  if (mpi != nullptr) o.worker_id = mpi->worker_id();  // one environment for all ranks
  if (o.worker_id.empty()) o.worker_id = o.host + "-" + std::to_string(getpid());
  std::string bind = Getenv("ELASTRA_BIND_HOST");
  if (!bind.empty()) {
    o.bind_host = bind;
  } else if (mpi != nullptr && !mpi->bind_host().empty()) {
    o.bind_host = mpi->bind_host();  // decided with rank 0 (docs/mpi.md)
  } else {
    o.bind_host = DefaultBindHost(o.coordinator);
  }
  int64_t v = o.device;
  std::string dev = Getenv("ELASTRA_DEVICE");
  if (dev == "local") {
    if (o.local_rank < 0) {
      return InvalidArgumentError("ELASTRA_DEVICE=local needs mpirun (OMPI_COMM_WORLD_LOCAL_RANK)");
    }
    o.device = o.local_rank;
  } else if (!dev.empty()) {
    ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_DEVICE", &v));
    o.device = static_cast<int>(v);
  }
  std::string backend = Getenv("ELASTRA_BACKEND");
  if (backend == "gloo") {
    o.backend = Backend::kGloo;
  } else if (backend == "nccl") {
    o.backend = Backend::kNccl;
  } else if (!backend.empty() && backend != "auto") {
    return InvalidArgumentError("ELASTRA_BACKEND='" + backend + "' (auto, gloo or nccl)");
  }
  v = o.commit_every;
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_COMMIT_EVERY", &v));
  if (v < 1) return InvalidArgumentError("ELASTRA_COMMIT_EVERY must be at least 1");
  o.commit_every = static_cast<int>(v);
  v = o.collective_timeout.count();
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_COLLECTIVE_TIMEOUT_MS", &v));
  o.collective_timeout = milliseconds(v);
  v = o.decision_timeout.count();
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_DECISION_TIMEOUT_MS", &v));
  o.decision_timeout = milliseconds(v);
  v = o.heartbeat_interval.count();
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_HEARTBEAT_MS", &v));
  o.heartbeat_interval = milliseconds(v);
  o.checkpoint_dir = Getenv("ELASTRA_CHECKPOINT_DIR");
  v = 0;
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_CHECKPOINT_EVERY", &v));
  o.checkpoint_every = static_cast<int>(v);
  v = 0;
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_DEVICE_MEMORY_BYTES", &v));
  o.device_memory_bytes = v;
  v = 0;
  ELASTRA_RETURN_IF_ERROR(ParseIntEnv("ELASTRA_TEST_APPLY_DELAY_MS", &v));
  internals->test_apply_delay = milliseconds(v);
  internals->test_fail_after_move = Getenv("ELASTRA_TEST_FAIL_AFTER_MOVE");
  o.internals = std::move(internals);
  return o;
}

}  // namespace elastra
