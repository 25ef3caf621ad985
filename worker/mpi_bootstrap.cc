#include "worker/mpi_bootstrap.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "protocol/control_client.h"
#include "protocol/coordinator_process.h"
#include "common/logging.h"
#include "protocol/net.h"
#include "worker/mpirun_job.h"
#include "elastra/config.h"

#if ELASTRA_HAVE_MPI
#include <mpi.h>
#endif

namespace elastra {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

StatusOr<long long> EnvNumber(const char* name, long long fallback, long long min, long long max) {
  std::string v = Getenv(name);
  if (v.empty()) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < min || x > max) {
    return InvalidArgumentError(std::string(name) + "='" + v + "' is not an integer in [" +
                                std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return x;
}

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// How long a rank waits for one of MPI rank 0's addresses to accept a connection.
constexpr milliseconds kProbeTimeout{3000};

std::string Join(const std::vector<std::string>& parts, char sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : std::string(1, sep)) + p;
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(sep, start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Where the other ranks may reach rank 0's coordinator: ELASTRA_BIND_HOST when set, then, for a
// job that spans hosts, every non-loopback IPv4 address of rank 0's host (a job on one host:
// loopback only).
std::vector<std::string> CoordinatorHosts(bool spans_hosts, const std::string& bind_override) {
  std::vector<std::string> hosts;
  if (!bind_override.empty()) hosts.push_back(bind_override);
  if (!spans_hosts) {
    if (hosts.empty()) hosts.push_back("127.0.0.1");
    return hosts;
  }
  for (const auto& i : LocalIpv4Interfaces()) {
    if (std::find(hosts.begin(), hosts.end(), i.address) == hosts.end()) {
      hosts.push_back(i.address);
    }
  }
  return hosts;
}

// One bootstrap per process: a second FromEnvironment() shares the first's.
std::mutex g_mu;
std::weak_ptr<MpiBootstrap> g_current;
std::atomic<bool> g_finalized{false};

#if ELASTRA_HAVE_MPI
// What rank 0 sends: an error, or the connection. Fields are length-prefixed strings.
void PutField(std::string* out, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  out->append(reinterpret_cast<const char*>(&n), sizeof(n));
  out->append(s);
}

bool GetField(const std::string& in, size_t* pos, std::string* s) {
  uint32_t n = 0;
  if (*pos + sizeof(n) > in.size()) return false;
  std::memcpy(&n, in.data() + *pos, sizeof(n));
  *pos += sizeof(n);
  if (*pos + n > in.size()) return false;
  s->assign(in.data() + *pos, n);
  *pos += n;
  return true;
}

// Waits for `request` until `deadline`; false on timeout (the request stays pending).
bool WaitUntil(MPI_Request* request, SteadyClock::time_point deadline) {
  int done = 0;
  while (true) {
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

#endif

}  // namespace

StatusOr<std::optional<MpirunEnvironment>> DetectMpirun() {
  if (Getenv("OMPI_COMM_WORLD_SIZE").empty()) return std::optional<MpirunEnvironment>();
  MpirunEnvironment env;
  ELASTRA_ASSIGN_OR_RETURN(long long size, EnvNumber("OMPI_COMM_WORLD_SIZE", 0, 1, 1 << 20));
  ELASTRA_ASSIGN_OR_RETURN(long long rank, EnvNumber("OMPI_COMM_WORLD_RANK", -1, 0, size - 1));
  if (rank < 0)
    return InvalidArgumentError("OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not");
  ELASTRA_ASSIGN_OR_RETURN(long long local_size,
                           EnvNumber("OMPI_COMM_WORLD_LOCAL_SIZE", size, 1, size));
  ELASTRA_ASSIGN_OR_RETURN(long long local_rank,
                           EnvNumber("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, local_size - 1));
  env.world_size = static_cast<int>(size);
  env.world_rank = static_cast<int>(rank);
  env.local_size = static_cast<int>(local_size);
  env.local_rank = static_cast<int>(local_rank);
  env.job_id = Getenv("OMPI_MCA_ess_base_jobid");
  return std::optional<MpirunEnvironment>(env);
}

std::string MpirunRecoveryFlag() {
  if (Getenv("OMPI_MCA_orte_enable_recovery") == "1") return "--enable-recovery";
  if (Getenv("OMPI_MCA_orte_abort_on_non_zero_status") == "0") {
    return "--mca orte_abort_on_non_zero_status 0";
  }
  return "";
}

StatusOr<std::shared_ptr<MpiBootstrap>> MpiBootstrap::Create(const MpirunEnvironment& env) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (auto current = g_current.lock()) return current;
  if (env.world_size < 1 || env.world_rank < 0 || env.world_rank >= env.world_size) {
    return InvalidArgumentError("MPI rank " + std::to_string(env.world_rank) +
                                " is outside a world of " + std::to_string(env.world_size));
  }
  if (env.world_rank == 0 && MpirunRecoveryFlag().empty()) {
    LOG(WARNING) << "mpirun was started without --enable-recovery (or --mca "
                    "orte_abort_on_non_zero_status 0): one failed rank will make mpirun kill "
                    "the whole job; add --enable-recovery to keep it alive";
  }
  std::shared_ptr<MpiBootstrap> b(new MpiBootstrap(env));
  const std::string bind_override = Getenv("ELASTRA_BIND_HOST");
  const bool spans_hosts = env.local_size < env.world_size;

  if (!Getenv("ELASTRA_COORDINATOR").empty()) {
    // Join the named coordinator; WorkerOptions::FromEnvironment reads its keys.
    // The collectives bind to ELASTRA_BIND_HOST or, by FromEnvironment's default, to the local
    // address of the route to that coordinator.
    b->info_.address = Getenv("ELASTRA_COORDINATOR");
    b->bind_host_ = bind_override;
    b->worker_id_ =
        "mpi-" + (env.job_id.empty() ? HostName() + "-" + std::to_string(getpid()) : env.job_id) +
        "-" + std::to_string(env.world_rank);
    g_current = b;
    return b;
  }

#if ELASTRA_HAVE_MPI
  if (g_finalized) {
    return FailedPreconditionError("MPI was already finalized in this process; create one Worker");
  }
  ELASTRA_ASSIGN_OR_RETURN(long long timeout_ms,
                           EnvNumber("ELASTRA_MPI_BOOTSTRAP_TIMEOUT_MS", 120000, 1, 1LL << 40));
  ELASTRA_ASSIGN_OR_RETURN(long long max_workers,
                           EnvNumber("ELASTRA_MAX_WORKERS", std::max(env.world_size, 64), 1, 4096));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
      return InternalError("MPI_Init_thread failed");
    }
    b->finalize_mpi_ = true;
  }
  int mpi_size = 0, mpi_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  if (mpi_size != env.world_size || mpi_rank != env.world_rank) {
    return InternalError("MPI reports rank " + std::to_string(mpi_rank) + " of " +
                         std::to_string(mpi_size) + " but the environment says " +
                         std::to_string(env.world_rank) + " of " + std::to_string(env.world_size));
  }

  std::string payload;
  if (env.world_rank == 0) payload = b->StartCoordinator(spans_hosts, bind_override, max_workers);
  // Non-blocking broadcasts polled against a deadline: a rank 0 that never gets here (crashed,
  // stuck) is an error on every other rank, not a hang.
  auto deadline = SteadyClock::now() + milliseconds(timeout_ms);
  uint64_t length = payload.size();
  MPI_Request request;
  MPI_Ibcast(&length, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &request);
  bool ok = WaitUntil(&request, deadline);
  if (ok) {
    payload.resize(length);
    MPI_Ibcast(payload.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD, &request);
    ok = WaitUntil(&request, deadline);
  }
  if (!ok) {
    b->finalize_mpi_ = false;  // a broadcast is still pending: MPI_Finalize could hang
    return UnavailableError("mpirun bootstrap: no coordinator address from MPI rank 0 within " +
                            std::to_string(timeout_ms) + " ms (ELASTRA_MPI_BOOTSTRAP_TIMEOUT_MS)");
  }
  size_t pos = 0;
  std::string kind, message;
  if (!GetField(payload, &pos, &kind)) return InternalError("mpirun bootstrap: empty broadcast");
  if (kind != "ok") {
    GetField(payload, &pos, &message);
    return UnavailableError("mpirun bootstrap: MPI rank 0 could not start the coordinator: " +
                            message);
  }
  std::string port, hosts;
  bool parsed = GetField(payload, &pos, &port) && GetField(payload, &pos, &hosts) &&
                GetField(payload, &pos, &b->info_.job) &&
                GetField(payload, &pos, &b->info_.server_public) &&
                GetField(payload, &pos, &b->info_.worker.public_key) &&
                GetField(payload, &pos, &b->info_.worker.secret_key);
  if (!parsed) return InternalError("mpirun bootstrap: truncated broadcast from rank 0");
  ELASTRA_RETURN_IF_ERROR(b->ChooseAddresses(Split(hosts, ','), std::atoi(port.c_str()),
                                             spans_hosts, bind_override, deadline));
  b->worker_id_ = "mpi-" + std::to_string(env.world_rank);
  g_current = b;
  return b;
#else
  return FailedPreconditionError(
      "started by mpirun without ELASTRA_COORDINATOR, but this Elastra build has no MPI "
      "(rebuild with libopenmpi-dev installed, or set ELASTRA_COORDINATOR / ELASTRA_STATE_DIR)");
#endif
}

std::string ChooseJobAddress(const std::vector<std::string>& picks, const std::string& fallback) {
  std::map<std::string, int> votes;
  for (const auto& p : picks) {
    if (!p.empty()) ++votes[p];
  }
  std::string best = fallback;
  int most = 0;
  for (const auto& p : picks) {  // in rank order: a tie goes to the lowest rank's pick
    if (!p.empty() && votes[p] > most) {
      best = p;
      most = votes[p];
    }
  }
  return best;
}

#if ELASTRA_HAVE_MPI
std::string MpiBootstrap::StartCoordinator(bool spans_hosts, const std::string& bind_override,
                                           long long max_workers) {
  // The coordinator runs as a child process of rank 0 (`elastra coordinator`), as under
  // `elastra run`: no training process carries the coordinator, and rank 0 starts it again when
  // it dies. A job that spans hosts binds it to every interface; the ranks find the address that
  // reaches it from their host (ChooseAddresses).
  std::string payload;
  const std::vector<std::string> hosts = CoordinatorHosts(spans_hosts, bind_override);
  if (hosts.empty()) {
    PutField(&payload, "error");
    PutField(&payload,
             "this mpirun job spans hosts, but MPI rank 0's host has no non-loopback IPv4 "
             "address for the other hosts to reach the coordinator at; set ELASTRA_BIND_HOST");
    return payload;
  }
  std::string state_dir = Getenv("ELASTRA_STATE_DIR");
  if (state_dir.empty()) state_dir = ".elastra";
  std::string job = Getenv("ELASTRA_JOB");
  if (job.empty()) job = "elastra";
  const std::string bind = spans_hosts ? "tcp://0.0.0.0:0" : "tcp://" + hosts.front() + ":0";
  std::vector<std::string> args = {"--job",         job,
                                   "--bind",        bind,
                                   "--workers",     std::to_string(env_.world_size),
                                   "--max-workers", std::to_string(max_workers)};
  // ELASTRA_HTTP=ADDR:PORT: the HTTP API (docs/http.md), as `elastra run --http` serves it; the
  // coordinator checks the value (a bad one fails its start, which every rank is told).
  if (const std::string http = Getenv("ELASTRA_HTTP"); !http.empty()) {
    args.push_back("--http");
    args.push_back(http);
  }
  // ELASTRA_RESUME=CKPT_ROOT: start from the newest committed checkpoint there, as `elastra run
  // --resume` does (docs/checkpoints.md); a root with none fails the coordinator's first generation.
  if (const std::string resume = Getenv("ELASTRA_RESUME"); !resume.empty()) {
    args.push_back("--resume");
    args.push_back(resume);
  }
  coordinator_ = std::make_unique<CoordinatorProcess>(ElastraBinary(), state_dir, args);
  auto started = coordinator_->Start();
  auto endpoint =
      started.ok() ? ParseTcpEndpoint(started->address) : StatusOr<TcpEndpoint>(started.status());
  if (!endpoint.ok()) {
    coordinator_.reset();
    PutField(&payload, "error");
    PutField(&payload, endpoint.status().ToString());
    return payload;
  }
  info_ = *started;
  state_dir_ = state_dir;
  PutField(&payload, "ok");
  PutField(&payload, std::to_string(endpoint->port));
  PutField(&payload, Join(hosts, ','));
  PutField(&payload, info_.job);
  PutField(&payload, info_.server_public);
  PutField(&payload, info_.worker.public_key);
  PutField(&payload, info_.worker.secret_key);
  LOG(INFO) << "mpirun: rank 0 started the coordinator of job '" << job << "' (pid "
            << coordinator_->pid() << ") on " << bind << ", port " << endpoint->port << " of "
            << Join(hosts, ',') << ", for " << env_.world_size << " ranks; state in " << state_dir;
  StartSupervisor();
  return payload;
}

Status MpiBootstrap::ChooseAddresses(const std::vector<std::string>& hosts, int port,
                                     bool spans_hosts, const std::string& bind_override,
                                     SteadyClock::time_point deadline) {
  if (hosts.empty() || port <= 0) {
    return InternalError("mpirun bootstrap: no coordinator address in rank 0's broadcast");
  }
  if (!spans_hosts) {  // one host: loopback (or ELASTRA_BIND_HOST), as the coordinator binds
    info_.address = "tcp://" + hosts.front() + ":" + std::to_string(port);
    bind_host_ = bind_override.empty() ? hosts.front() : bind_override;
    return OkStatus();
  }
  // A rank on another host than rank 0 connects to the first of rank 0's addresses that accepts
  // (those on its own subnets first). A rank on rank 0's host reaches every one of them, so it
  // takes the one the most ranks on other hosts reached: its collectives must be reachable from
  // there. Every rank takes part in the allgather, also one that reached none.
  const std::vector<Ipv4Interface> mine = LocalIpv4Interfaces();
  const bool on_rank0_host = std::any_of(hosts.begin(), hosts.end(),
                                         [&](const std::string& h) { return IsOneOf(h, mine); });
  std::string pick;
  Status probed = OkStatus();
  if (!on_rank0_host) {
    auto reached = FirstAccepting(OrderBySubnet(hosts, mine), port, kProbeTimeout);
    if (reached.ok()) {
      pick = *reached;
    } else {
      probed = reached.status();
    }
  }
  // Every rank's pick, as fixed-size strings. The buffers outlive a collective left pending.
  constexpr int kPickBytes = 64;
  auto send = std::make_unique<std::vector<char>>(kPickBytes, 0);
  auto recv =
      std::make_unique<std::vector<char>>(static_cast<size_t>(kPickBytes) * env_.world_size, 0);
  std::memcpy(send->data(), pick.data(), std::min<size_t>(pick.size(), kPickBytes - 1));
  MPI_Request request;
  MPI_Iallgather(send->data(), kPickBytes, MPI_CHAR, recv->data(), kPickBytes, MPI_CHAR,
                 MPI_COMM_WORLD, &request);
  if (!WaitUntil(&request, deadline)) {
    finalize_mpi_ = false;  // the allgather is still pending: MPI_Finalize could hang
    send.release();         // and MPI may still write into its buffers
    recv.release();
    return UnavailableError(
        "mpirun bootstrap: not every rank reported the coordinator address it reached within "
        "ELASTRA_MPI_BOOTSTRAP_TIMEOUT_MS");
  }
  std::vector<std::string> picks;
  for (int r = 0; r < env_.world_size; ++r) picks.emplace_back(recv->data() + r * kPickBytes);
  if (!probed.ok()) {
    return UnavailableError(
        "mpirun bootstrap: this host reaches none of MPI rank 0's addresses: " + probed.message() +
        " (are the hosts on one network? name it with --mca btl_tcp_if_include / "
        "oob_tcp_if_include, or set ELASTRA_BIND_HOST on rank 0's host)");
  }
  if (on_rank0_host) pick = ChooseJobAddress(picks, hosts.front());
  info_.address = "tcp://" + pick + ":" + std::to_string(port);
  bind_host_ = bind_override;
  if (bind_host_.empty()) {
    auto local = LocalAddressToward(pick);
    if (!local.ok()) return local.status().WithContext("mpirun bootstrap");
    bind_host_ = *local;
  }
  LOG(INFO) << "mpirun: rank " << env_.world_rank << " reaches the coordinator at " << info_.address
            << "; collectives bind to " << bind_host_;
  return OkStatus();
}
#endif

MpiBootstrap::MpiBootstrap(const MpirunEnvironment& env) : env_(env) {}

// Rank 0 keeps its coordinator process running: when it dies (even by SIGKILL) it is started
// again with --restart on the same state directory, and the workers reconnect by themselves.
void MpiBootstrap::StartSupervisor() {
  supervisor_ = std::thread([this] {
    int failed_restarts = 0;
    std::unique_lock<std::mutex> lock(supervisor_mu_);
    while (!stopping_) {
      supervisor_cv_.wait_for(lock, milliseconds(20));
      if (stopping_) break;
      int status = 0;
      bool exited_now = false;
      if (coordinator_->pid() != 0) {
        if (!coordinator_->PollExited(&status)) continue;
        exited_now = true;
      }
      if (coordinator_ended_ || failed_restarts >= 3) continue;
      if (exited_now && CoordinatorProcess::EndedTheJob(status)) {
        LOG(INFO) << "mpirun: the coordinator ended the job ("
                  << CoordinatorProcess::Describe(status) << ")";
        job_exit_code_ = WEXITSTATUS(status);
        coordinator_ended_ = true;
        continue;
      }
      LOG(WARNING) << "mpirun: the coordinator process died ("
                   << CoordinatorProcess::Describe(status) << "); starting it again";
      auto restarted = coordinator_->Start();
      if (restarted.ok()) {
        failed_restarts = 0;
        LOG(INFO) << "mpirun: coordinator restarted (pid " << coordinator_->pid() << ")";
      } else if (++failed_restarts >= 3) {
        LOG(ERROR) << "mpirun: cannot restart the coordinator: " << restarted.status();
      }
    }
  });
}

MpiBootstrap::~MpiBootstrap() {
  const bool hosted_coordinator = coordinator_ != nullptr;
  bool job_failed = false;
  if (coordinator_) {
    // The other ranks may still be training, parked, or finishing: keep the coordinator up until
    // the job is over or no worker is left, within a bound.
    long long timeout_ms = 60000;
    auto t = EnvNumber("ELASTRA_MPI_FINISH_TIMEOUT_MS", timeout_ms, 0, 1LL << 40);
    if (t.ok()) timeout_ms = *t;
    auto deadline = SteadyClock::now() + milliseconds(timeout_ms);
    ControlClientOptions co;
    co.address = info_.address;
    co.server_public = info_.server_public;
    co.client_keys = info_.worker;
    co.job = info_.job;
    co.sender = worker_id_ + "-bootstrap";
    // Once the coordinator ended the job there is nothing to wait for, and connecting to it would
    // wait for an answer that never comes (5 s measured, before the finalize barrier).
    StatusOr<std::unique_ptr<ControlClient>> client =
        coordinator_ended_ ? StatusOr<std::unique_ptr<ControlClient>>(
                                 UnavailableError("the coordinator ended the job"))
                           : ControlClient::Connect(co);
    // Parked workers look at the job's state about once a second and then say they leave; give
    // them a few seconds after the job is over.
    std::optional<SteadyClock::time_point> over_since;
    proto::JobState state = proto::JobState::kForming;
    // It exits by itself once the job is over and every worker was told (CoordinatorProcess::
    // EndedTheJob).
    while (client.ok() && SteadyClock::now() < deadline && !coordinator_ended_) {
      auto st = (*client)->Call<proto::StatusReply>(proto::MessageType::kStatusRequest,
                                                    proto::StatusRequest{}, milliseconds(1000));
      if (st.ok()) {
        state = st->status.state;
        int live = 0, standby = 0;
        for (const auto& w : st->status.workers) {
          live += w.state == proto::WorkerState::kMember || w.state == proto::WorkerState::kStandby;
          standby += w.state == proto::WorkerState::kStandby;
        }
        if (st->status.over()) {
          if (standby == 0) break;
          if (!over_since) over_since = SteadyClock::now();
          if (SteadyClock::now() - *over_since > milliseconds(5000)) break;
        } else if (live == 0) {
          break;
        }
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    job_failed = state == proto::JobState::kFailed || job_exit_code_ == 1;
    if (SteadyClock::now() >= deadline) {
      LOG(WARNING) << "mpirun: stopping the coordinator with the job still "
                   << proto::ToString(state) << " after " << timeout_ms
                   << " ms (ELASTRA_MPI_FINISH_TIMEOUT_MS)";
    }
    if (client.ok()) (*client)->Close();
    {
      std::lock_guard<std::mutex> lock(supervisor_mu_);
      stopping_ = true;
    }
    supervisor_cv_.notify_all();
    if (supervisor_.joinable()) supervisor_.join();
    coordinator_->Stop(milliseconds(5000));
    coordinator_.reset();
  }
#if ELASTRA_HAVE_MPI
  if (finalize_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      // Open MPI 4's MPI_Finalize can wait forever for a rank that died (measured with
      // --enable-recovery: survivors hang in ompi_mpi_finalize in some runs). A polled barrier
      // first tells whether every rank is still there; if not, exit without finalizing (mpirun
      // then reports an abnormal termination, which it is).
      long long timeout_ms = 15000;
      auto t = EnvNumber("ELASTRA_MPI_FINALIZE_TIMEOUT_MS", timeout_ms, 0, 1LL << 40);
      if (t.ok()) timeout_ms = *t;
      MPI_Request request;
      MPI_Ibarrier(MPI_COMM_WORLD, &request);
      if (WaitUntil(&request, SteadyClock::now() + milliseconds(timeout_ms))) {
        MPI_Finalize();
      } else {
        LOG(WARNING) << "mpirun: not every MPI rank reached the end within " << timeout_ms
                     << " ms (ELASTRA_MPI_FINALIZE_TIMEOUT_MS; a rank died?): exiting without "
                        "MPI_Finalize, which could wait for it forever";
        // Rank 0 knows the job is over (its coordinator is gone): it ends the mpirun job, which
        // would otherwise wait forever for the ranks of another host (EndMpirunJob). What is left
        // of the job is killed: a rank that did not reach the end by now is taken for dead.
        if (hosted_coordinator) {
          Status ended = EndMpirunJob();
          if (ended.ok()) {
            LOG(INFO) << "mpirun: rank 0 asked mpirun to end the job (the job "
                      << (job_failed ? "failed" : "finished") << ")";
          } else {
            LOG(WARNING) << "mpirun: rank 0 cannot end the mpirun job (" << ended
                         << "); with ranks lost on another host, mpirun may not exit by itself";
          }
        }
      }
    }
    g_finalized = true;
    if (hosted_coordinator && job_failed) FailMpirunJob();
  }
#endif
}

}  // namespace elastra
