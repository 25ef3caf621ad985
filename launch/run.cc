// elastra run: the local launcher. Starts the coordinator as a child process on loopback
// (`elastra coordinator`, keys and journal in the state directory) and starts it again with
// --restart when it dies, and runs one agent for this machine beside it (HostAgent: spawns and
// supervises the workers, reports their exits to the coordinator at once, starts more when a
// resize asks); exits with the job's status.
// elastra coordinator: the same coordinator without an agent, for workers started elsewhere.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "protocol/control_client.h"
#include "protocol/coordinator_process.h"
#include "protocol/keys.h"
#include "common/logging.h"
#include "protocol/status_json.h"
#include "launch/embedded.h"
#include "coordinator/server.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/host_agent.h"
#include "journal/etcd_election.h"
#include "http/standby.h"

namespace elastra::launch {
namespace {

using std::chrono::milliseconds;

std::atomic<int> g_stop_signal{0};
void OnSignal(int sig) { g_stop_signal = sig; }

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// The launcher's own path: the coordinator it starts is `elastra coordinator` of the same build.
std::string SelfPath() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "elastra";
  return std::string(buf, static_cast<size_t>(n));
}

// elastra run's flags.
struct RunOptions {
  int nproc = 0;
  int spares = 0;  // standby workers started beyond nproc (docs/recovery.md)
  std::string state_dir = ".elastra";
  int max_workers = 64;
  std::string job = "elastra";
  std::string resume;  // empty: a new job
  GpusFlag gpus;       // none given: no ELASTRA_DEVICE
  std::string http;    // the coordinator's HTTP API, HOST:PORT or :PORT; empty: off
  Args program;        // PROGRAM ARGS..., everything after --
};

// elastra coordinator's flags.
struct CoordinatorOptions {
  std::string state_dir = ".elastra";
  int workers = 1;
  int max_workers = 64;
  int spares = 0;  // standby workers kept beyond the layout (docs/recovery.md)
  std::string bind = "tcp://127.0.0.1:0";
  std::string advertise;  // empty: the bound address
  std::string job = "elastra";
  std::string resume;
  bool restart = false;
  std::string http;  // the HTTP API, HOST:PORT or :PORT; empty: off
  std::string etcd;  // the etcd cluster that keeps the journal; empty: <state_dir>/journal.bin
  int leader_ttl = 3;  // with etcd: the leadership lease's TTL, in seconds
  int journal_compact_records = 1000;  // with etcd: records between two compactions
};

// The coordinator child process of `elastra run`, started again with --restart on the same state
// directory when it dies (three failed starts in a row: the job cannot go on).
class LocalCoordinator : public CoordinatorWatch {
 public:
  LocalCoordinator(CoordinatorProcess* process, std::string state_dir)
      : process_(process), state_dir_(std::move(state_dir)) {}

  Event Supervise() override {
    const pid_t pid = process_->pid();
    int status = 0;
    if (pid != 0 && process_->PollExited(&status)) {
      if (CoordinatorProcess::EndedTheJob(status)) {
        LOG(INFO) << "the coordinator (pid " << pid << ") ended the job ("
                  << CoordinatorProcess::Describe(status) << ")";
        ended_ = true;
        return Event::kNone;
      }
      LOG(WARNING) << "the coordinator (pid " << pid << ") died ("
                   << CoordinatorProcess::Describe(status) << "); starting it again on "
                   << state_dir_;
    }
    if (!restarting()) return Event::kNone;
    // The restart: the same state directory, address and keys; the journal gives the job back.
    auto restarted = process_->Start();
    if (restarted.ok()) {
      failed_restarts_ = 0;
      LOG(INFO) << "coordinator restarted (pid " << process_->pid() << ") at "
                << restarted->address;
      return Event::kRestarted;
    }
    if (++failed_restarts_ >= kMaxFailedRestarts) {
      LOG(ERROR) << "cannot restart the coordinator: " << restarted.status()
                 << "; stopping the workers";
      return Event::kGone;
    }
    LOG(WARNING) << "restarting the coordinator failed: " << restarted.status() << "; trying again";
    return Event::kNone;
  }

  bool restarting() const override {
    return !ended_ && process_->pid() == 0 && failed_restarts_ < kMaxFailedRestarts;
  }

 private:
  static constexpr int kMaxFailedRestarts = 3;
  CoordinatorProcess* process_;
  std::string state_dir_;
  int failed_restarts_ = 0;
  bool ended_ = false;  // it exited by itself: the job is over
};

// --http ADDR:PORT: checked here, so a typo is a usage error rather than a coordinator that
// fails to start.
CLI::Option* AddHttpFlag(CLI::App* app, std::string* out) {
  return app
      ->add_option_function<std::string>(
          "--http",
          [out](const std::string& text) {
            auto parsed = http::ParseHttpListen(text);
            if (!parsed.ok()) throw FlagError(parsed.status().message());
            *out = text;
          },
          "Serve the HTTP API (docs/http.md) on HOST:PORT, or :PORT on loopback (0: any free "
          "port); its URL goes to coordinator.json as \"http\"")
      ->type_name("ADDR:PORT");
}

int RunJob(const RunOptions& flags) {
  if (flags.program.empty()) {
    return UsageError("elastra run", "no program given; usage: elastra run --nproc N -- PROGRAM");
  }
  const int nproc = flags.nproc;
  // --spares K: K more workers start and wait as standbys; the first generation is of nproc.
  const int started = nproc + flags.spares;
  const int max_workers = std::max(flags.max_workers, started);
  // --gpus N|auto: each worker gets ELASTRA_DEVICE, a GPU of its own while there are enough.
  const int gpus = GpuCount(flags.gpus);
  if (flags.gpus.all && gpus == 0) {
    std::fprintf(stderr, "elastra run: --gpus auto: this machine shows no CUDA device\n");
    return 2;
  }
  const std::string& state_dir = flags.state_dir;
  const std::string& job = flags.job;
  logging::SetTag("agent");

  std::vector<std::string> coordinator_args = {"--job",         job,
                                               "--bind",        "tcp://127.0.0.1:0",
                                               "--workers",     std::to_string(nproc),
                                               "--max-workers", std::to_string(max_workers)};
  if (flags.spares > 0) {
    // The coordinator keeps them: when one takes a lost rank, it asks this agent for another.
    coordinator_args.push_back("--spares");
    coordinator_args.push_back(std::to_string(flags.spares));
  }
  if (!flags.resume.empty()) {
    coordinator_args.push_back("--resume");
    coordinator_args.push_back(flags.resume);
  }
  if (!flags.http.empty()) {
    coordinator_args.push_back("--http");
    coordinator_args.push_back(flags.http);
  }
  CoordinatorProcess coordinator(SelfPath(), state_dir, coordinator_args);
  auto info_or = coordinator.Start();
  if (!info_or.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", info_or.status().ToString().c_str());
    return 1;
  }
  const ConnectionInfo info = std::move(info_or).value();
  LOG(INFO) << "coordinator for job '" << job << "' at " << info.address << " (pid "
            << coordinator.pid() << "); state in " << state_dir;

  // The local agent: the launcher holds the admin key, and registers with it.
  ControlClientOptions co;
  co.address = info.address;
  co.server_public = info.server_public;
  co.client_keys = info.admin;
  co.job = job;
  co.sender = "agent-" + HostName();
  // No heartbeats: this agent starts the first --nproc workers (and --spares) itself, and an agent
  // that does not heartbeat is one the coordinator never asks for first-generation or regrow
  // workers, and whose silence is never a host loss (docs/hosts.md, "Agents"). It is asked for a
  // resize's workers and for replacement spares, as any agent (SpawnRequest). It shares the host
  // with the coordinator, whose death the CoordinatorWatch sees first.
  auto client = ControlClient::Connect(co);
  if (!client.ok()) {
    std::fprintf(stderr, "elastra run: %s\n", client.status().ToString().c_str());
    coordinator.Stop(milliseconds(2000));
    return 1;
  }
  HostAgentOptions o;
  o.registration.host = HostName();
  o.registration.max_workers = max_workers;
  // Where the workers bind: what the environment says, else their default (loopback).
  const char* bind_host = std::getenv("ELASTRA_BIND_HOST");
  o.registration.address = bind_host != nullptr && *bind_host != '\0' ? bind_host : "127.0.0.1";
  o.registration.gpus = gpus;
  o.job = info;
  o.program = flags.program;
  o.worker_state_dir = state_dir;
  o.export_host = false;  // the workers' environment is the launcher's, as before agents
  for (int i = 0; i < started; ++i) o.initial_workers.push_back("w" + std::to_string(i));
  o.on_signal = HostAgentOptions::OnSignal::kStopWorkers;
  o.exit_when_idle = true;
  o.own_process_groups = false;
  LocalCoordinator watch(&coordinator, state_dir);
  int code = 1;
  {
    HostAgent agent(std::move(o), std::move(client).value(), &watch);
    if (Status reg = agent.Register(); !reg.ok()) {
      std::fprintf(stderr, "elastra run: registering the agent: %s\n", reg.ToString().c_str());
      coordinator.Stop(milliseconds(2000));
      return 1;
    }
    code = agent.Run();
  }
  // The coordinator writes the final status to <state_dir>/status.json when the job ends, and
  // exits by itself then. After a signal the workers' exits are still on their way to it: it
  // gets up to 5 s to end the job (and remove its uncommitted checkpoints) before a SIGTERM.
  coordinator.Stop(milliseconds(5000), /*own_exit=*/milliseconds(5000));
  LOG(INFO) << "exiting with " << code;
  return code;
}

// The exit status of `elastra coordinator --etcd` that lost the leadership of its job: neither 0
// (the job finished, or a signal stopped it) nor 1 (it failed or could not start).
constexpr int kLostLeadershipExit = 3;

// The leader key's value (docs/ha.md, "The leader key"): where agents and workers reach this
// coordinator ("control", its published address), its HTTP API ("http"), its host and pid. Before
// it binds, an address whose port is still to be picked (0) is left out; the leader announces the
// bound ones once it serves (LeaderValueOfFlags, then Announce).
std::string LeaderValue(const std::string& control, const std::string& http) {
  nlohmann::json v = {{"host", HostName()}, {"pid", static_cast<int64_t>(getpid())}};
  if (!control.empty()) v["control"] = control;
  if (!http.empty()) v["http"] = http;
  return v.dump();
}

std::string LeaderValueOfFlags(const CoordinatorOptions& flags) {
  std::string control;
  auto advertised = AdvertisedAddress(flags.bind, flags.advertise);
  if (advertised.ok() && !advertised->ends_with(":0")) control = *advertised;
  std::string url;
  auto listen = http::ParseHttpListen(flags.http);
  if (!flags.http.empty() && listen.ok() && listen->second != 0) {
    url = "http://" + listen->first + ":" + std::to_string(listen->second);
  }
  return LeaderValue(control, url);
}

// --etcd with --http: the standby's HTTP on that address while it waits (http/standby.h):
// /healthz says "standby" and who leads, everything else is refused with the leader's address.
StatusOr<std::unique_ptr<http::StandbyServer>> ServeStandbyHttp(const CoordinatorOptions& flags,
                                                                journal::EtcdElection* election) {
  http::StandbyOptions s;
  s.listen = flags.http;
  s.job = flags.job;
  s.leader = [election]() -> StatusOr<std::string> {
    ELASTRA_ASSIGN_OR_RETURN(journal::EtcdLeader leader, election->Leader());
    return leader.address;
  };
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<http::StandbyServer> server,
                           http::StandbyServer::Start(std::move(s)));
  LOG(INFO) << "standby HTTP at " << server->url()
            << ": /healthz says standby, other requests are refused with the leader's address";
  return server;
}

// --etcd: campaigns for the leadership of the job and returns once this process leads it, with the
// fence its journal writes carry (docs/ha.md, "The coordinator's leadership"). While another
// leads, it is a standby: it says so in its log and on stdout, binds no coordinator socket, and
// with --http serves only the standby's HTTP, closed before the coordinator binds that address.
// Never two leaders acting on one job: when the leadership is lost, the process exits at once with
// kLostLeadershipExit (the kernel closes its sockets; its agents and workers wait for the next
// leader as through a restart). kAborted when a signal came while it waited; kUnavailable when
// the --http address cannot be bound.
StatusOr<std::unique_ptr<journal::EtcdElection>> LeadTheJob(const CoordinatorOptions& flags,
                                                            journal::EtcdFence* fence) {
  journal::ElectionOptions e;
  e.etcd.endpoints = flags.etcd;
  e.job = flags.job;
  e.address = LeaderValueOfFlags(flags);
  e.ttl = std::chrono::seconds(flags.leader_ttl);
  e.on_lost = [](const std::string& why) {
    // On the election's thread, while the coordinator's may be mid-step: nothing more of this
    // process may run (a message after the lease is gone could contradict the next leader).
    LOG(ERROR) << "lost the leadership of the job (" << why << "); exiting with "
               << kLostLeadershipExit;
    _exit(kLostLeadershipExit);
  };
  ELASTRA_ASSIGN_OR_RETURN(std::unique_ptr<journal::EtcdElection> election,
                           journal::EtcdElection::Create(std::move(e)));
  std::unique_ptr<http::StandbyServer> standby_http;
  if (!flags.http.empty()) {
    ELASTRA_ASSIGN_OR_RETURN(standby_http, ServeStandbyHttp(flags, election.get()));
  }
  auto leader = election->Leader();
  if (leader.ok()) {
    LOG(WARNING) << "standby: job " << flags.job << " is led by "
                 << http::DescribeLeader(leader->address) << "; campaigning on a "
                 << flags.leader_ttl << " s lease";
    nlohmann::json said = nlohmann::json::parse(leader->address, nullptr, false);
    if (!said.is_object()) said = leader->address;
    nlohmann::json standby = {{"role", "standby"}, {"job", flags.job}, {"leader", said}};
    if (standby_http) standby["http"] = standby_http->url();
    std::printf("%s\n", standby.dump().c_str());
    std::fflush(stdout);
  }
  auto won = std::async(std::launch::async, [&election] { return election->Campaign(); });
  while (won.wait_for(milliseconds(50)) != std::future_status::ready) {
    if (g_stop_signal != 0) election->Cancel();
  }
  // Before the coordinator binds the same address.
  if (standby_http) standby_http->Stop();
  ELASTRA_ASSIGN_OR_RETURN(*fence, won.get());
  LOG(INFO) << "leading job " << flags.job << " (the leader key's revision "
            << fence->create_revision << " fences every journal write)";
  return election;
}

int RunCoordinator(const CoordinatorOptions& flags) {
  logging::SetTag("coordinator");
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::unique_ptr<journal::EtcdElection> election;
  journal::EtcdFence fence;
  if (!flags.etcd.empty()) {
    auto led = LeadTheJob(flags, &fence);
    if (!led.ok()) {
      if (led.status().code() == StatusCode::kAborted) return 0;  // stopped while a standby
      std::fprintf(stderr, "elastra coordinator: %s\n", led.status().ToString().c_str());
      return 1;
    }
    election = std::move(led).value();
  }
  EmbeddedOptions o;
  o.state_dir = flags.state_dir;
  o.job = flags.job;
  o.bind = flags.bind;
  o.initial_workers = flags.workers;
  o.max_workers = std::max(flags.workers, flags.max_workers);
  o.spares = std::min(flags.spares, o.max_workers);
  o.resume_from = flags.resume;
  // The address join.json gives the agents and workers of other hosts.
  o.advertise = flags.advertise;
  // --restart: take back the job journaled in the state directory (docs/journal.md).
  o.restart = flags.restart;
  o.http = flags.http;
  // --etcd: the journal and the job's keys on etcd; a job etcd holds is taken over (docs/ha.md).
  o.etcd = flags.etcd;
  o.etcd_fence_key = fence.key;
  o.etcd_fence_revision = fence.create_revision;
  o.journal_compact_records = static_cast<uint64_t>(flags.journal_compact_records);
  if (election) {
    // A write the fence refused: another coordinator leads, whatever this one's lease says (its
    // clock may not have caught up yet). The same rule as on_lost, before the decision that
    // wrote the record sends anything.
    o.on_fenced = [](const Status& why) {
      LOG(ERROR) << "lost the leadership of the job (" << why.message() << "); exiting with "
                 << kLostLeadershipExit;
      _exit(kLostLeadershipExit);
    };
  }
  auto embedded = StartEmbeddedCoordinator(o);
  if (!embedded.ok()) {
    std::fprintf(stderr, "elastra coordinator: %s\n", embedded.status().ToString().c_str());
    return 1;
  }
  // join.json: what agents and workers on other hosts join with (docs/hosts.md, "Keys").
  nlohmann::json ready = {{"address", embedded->info.address},
                          {"state_dir", flags.state_dir},
                          {"join", flags.state_dir + "/join.json"},
                          {"journal", embedded->journal}};
  if (!embedded->info.http.empty()) ready["http"] = embedded->info.http;
  if (election) {
    ready["role"] = "leader";
    // The leader key names the bound addresses now, for standbys and their clients.
    Status announced = election->Announce(LeaderValue(embedded->info.address, embedded->info.http));
    if (!announced.ok()) LOG(WARNING) << "the leader key keeps its first value: " << announced;
  }
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  // One job: once it ended and every agent was told (done()), exit 0 when it finished, 1 when it
  // failed. A signal stops the coordinator (0: a restart with --restart takes the job back).
  while (g_stop_signal == 0 && !embedded->server->WaitDone(milliseconds(50))) {
    if (election && !election->Leading()) {
      // The deadline passed before the election's thread said so (on_lost): the same rule.
      LOG(ERROR) << "lost the leadership of the job (its lease's deadline passed); exiting with "
                 << kLostLeadershipExit;
      _exit(kLostLeadershipExit);
    }
  }
  const bool done = embedded->server->done();
  if (embedded->http) embedded->http->Stop();  // it is a client of the server
  embedded->server->Stop();
  if (!done) return 0;
  const proto::JobStatus st = embedded->server->Snapshot();
  const bool finished = st.state == proto::JobState::kFinished;
  LOG(INFO) << "the job " << (finished ? "finished" : "failed") << "; exiting";
  return finished ? 0 : 1;
}

}  // namespace

void AddRunCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* run = app->add_subcommand(
      "run", "Start a job on this machine: a coordinator, N workers, and supervise them");
  SetUsage(run, {"elastra run --nproc N [--spares K] [--state-dir DIR] [--max-workers M] "
                 "[--job NAME] [--resume CKPT_ROOT] [--gpus N|auto] [--http ADDR:PORT] -- "
                 "PROGRAM ARGS..."});
  AddIntFlag(run, "--nproc", &o->nproc, 1, 4096, "N", "Workers to start")->required();
  AddIntFlag(run, "--spares", &o->spares, 0, 4096, "K",
             "Standby workers to start beyond --nproc and keep: the first to take a lost "
             "worker's rank, replaced when used")
      ->capture_default_str();
  run->add_option("--state-dir", o->state_dir,
                  "Keys, coordinator.json, journal and status.json of the job")
      ->type_name("DIR")
      ->capture_default_str();
  AddIntFlag(run, "--max-workers", &o->max_workers, 1, kMaxJobWorkers, "M",
             "Most workers a resize may ask for (at least --nproc)")
      ->capture_default_str();
  run->add_option("--job", o->job, "The job's name")->type_name("NAME")->capture_default_str();
  run->add_option("--resume", o->resume,
                  "Start from the newest committed checkpoint under this root")
      ->type_name("CKPT_ROOT");
  AddGpusFlag(run, &o->gpus);
  AddHttpFlag(run, &o->http);
  // After --, every argument is the program's, flags included.
  run->add_option("PROGRAM", o->program, "The worker program and its arguments, after --")
      ->type_name("");
  run->callback([o, exit_code] { *exit_code = RunJob(*o); });
}

void AddCoordinatorCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<CoordinatorOptions>();
  CLI::App* coordinator =
      app->add_subcommand("coordinator", "Run only the coordinator, for workers started elsewhere");
  SetUsage(coordinator, {"elastra coordinator --state-dir DIR --workers N "
                         "[--bind tcp://127.0.0.1:0] [--advertise ADDR] [--max-workers M] "
                         "[--spares K] [--job NAME] [--http ADDR:PORT] [--etcd URL[,URL...] "
                         "[--leader-ttl SECONDS]]",
                         "elastra coordinator --state-dir DIR --restart "
                         "[--etcd URL[,URL...] --job NAME]"});
  coordinator->add_option("--state-dir", o->state_dir, "Where the job's keys and journal live")
      ->type_name("DIR")
      ->capture_default_str();
  AddIntFlag(coordinator, "--workers", &o->workers, 1, kMaxJobWorkers, "N",
             "Workers the job starts with")
      ->capture_default_str();
  AddIntFlag(coordinator, "--max-workers", &o->max_workers, 1, kMaxJobWorkers, "M",
             "Most workers a resize may ask for")
      ->capture_default_str();
  AddIntFlag(coordinator, "--spares", &o->spares, 0, kMaxJobWorkers, "K",
             "Standby workers to keep beyond the layout (agents with free slots start them): "
             "the first to take a lost worker's rank")
      ->capture_default_str();
  coordinator->add_option("--bind", o->bind, "Address to listen on")
      ->type_name("ADDRESS")
      ->capture_default_str();
  coordinator
      ->add_option("--advertise", o->advertise,
                   "The address other hosts reach the coordinator at, written to join.json "
                   "(default: the bound address)")
      ->type_name("ADDR");
  coordinator->add_option("--job", o->job, "The job's name")
      ->type_name("NAME")
      ->capture_default_str();
  coordinator
      ->add_option("--resume", o->resume,
                   "Start from the newest committed checkpoint under this root")
      ->type_name("CKPT_ROOT");
  AddHttpFlag(coordinator, &o->http);
  coordinator
      ->add_option("--etcd", o->etcd,
                   "Keep the job's journal and keys in this etcd cluster, under /elastra/JOB/, "
                   "instead of --state-dir; a job etcd holds is taken over (docs/ha.md)")
      ->type_name("URL[,URL...]");
  AddIntFlag(coordinator, "--leader-ttl", &o->leader_ttl, 1, 3600, "SECONDS",
             "With --etcd: the lease of the job's leadership; a standby takes the job over this "
             "long after the leader's host died (docs/ha.md)")
      ->capture_default_str();
  AddIntFlag(coordinator, "--journal-compact-records", &o->journal_compact_records, 4, 1 << 30,
             "N",
             "With --etcd: replace the journal's records with a snapshot every N records, "
             "between changes (docs/ha.md, \"Compaction\")")
      ->capture_default_str();
  coordinator->add_flag("--restart", o->restart,
                        "Take back the job journaled in --state-dir after its coordinator died");
  coordinator->callback([o, exit_code] { *exit_code = RunCoordinator(*o); });
}

}  // namespace elastra::launch
