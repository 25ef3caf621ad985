// elastra agent: one host of a job that spans machines (docs/hosts.md, "Agents"). Joins the job
// with the join file's worker key, registers the host, and from then on runs HostAgent: starts
// the workers the coordinator asks for, reports their exits, drains the host on SIGTERM, and exits
// with the job.
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "protocol/control_client.h"
#include "protocol/keys.h"
#include "common/logging.h"
#include "protocol/net.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "launch/host_agent.h"

namespace elastra::launch {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kCommand[] = "elastra agent";

std::string HostName() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

// elastra agent's flags.
struct AgentFlags {
  std::string join;
  std::string name = HostName();
  int slots = 0;
  std::string address;  // empty: the local address of the route to the coordinator
  GpusFlag gpus;
  std::string state_dir;  // empty: workers get no ELASTRA_STATE_DIR
  int coordinator_timeout_s = 300;
  int drain_timeout_s = 300;
  bool workers_ignore_sigterm = false;
  Args program;
};

// A value that names a host or an address: not empty, no spaces or control characters.
std::string CheckWord(const std::string& flag, const std::string& text) {
  bool ok = !text.empty();
  for (unsigned char c : text) ok = ok && std::isgraph(c);
  if (!ok) throw FlagError(flag + " must be a non-empty word without spaces, got '" + text + "'");
  return text;
}

int CannotJoin(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", kCommand, why.c_str());
  return kAgentExitCannotJoin;
}

int RunAgent(const AgentFlags& flags) {
  if (flags.program.empty()) {
    return UsageError(kCommand,
                      "no program given; usage: elastra agent --join FILE --slots S -- PROGRAM");
  }
  const int gpus = GpuCount(flags.gpus);
  if (flags.gpus.all && gpus == 0) {
    std::fprintf(stderr, "%s: --gpus auto: this machine shows no CUDA device\n", kCommand);
    return kAgentExitUsage;
  }
  logging::SetTag("agent " + flags.name);
  auto join = ReadJoinFile(flags.join);
  if (!join.ok()) {
    return CannotJoin("cannot join with " + flags.join + ": " + join.status().ToString());
  }
  std::string address = flags.address;
  if (address.empty()) {
    auto endpoint = ParseTcpEndpoint(join->address);
    auto route = endpoint.ok() ? LocalAddressToward(endpoint->host)
                               : StatusOr<std::string>(endpoint.status());
    if (!route.ok()) {
      return CannotJoin("cannot choose the address of host " + flags.name +
                        " (give --address): " + route.status().ToString());
    }
    address = *route;
  }
  LOG(INFO) << "joining job '" << join->job << "' at " << join->address << " as host " << flags.name
            << " (address " << address << ", " << flags.slots << " slots, " << gpus << " GPUs)";

  ControlClientOptions co;
  co.address = join->address;
  co.server_public = join->server_public;
  co.client_keys = join->worker;
  co.job = join->job;
  co.sender = "agent-" + flags.name;
  co.heartbeat_interval = AgentHeartbeatInterval();
  co.connect_timeout = seconds(flags.coordinator_timeout_s);
  auto client = ControlClient::Connect(co);
  if (!client.ok()) return CannotJoin(client.status().ToString());

  HostAgentOptions o;
  o.registration.host = flags.name;
  o.registration.max_workers = flags.slots;
  o.registration.address = address;
  o.registration.gpus = gpus;
  o.job = *join;
  o.program = flags.program;
  o.worker_state_dir = flags.state_dir;
  o.coordinator_timeout = seconds(flags.coordinator_timeout_s);
  o.drain_timeout = seconds(flags.drain_timeout_s);
  o.workers_ignore_sigterm = flags.workers_ignore_sigterm;
  HostAgent agent(o, std::move(client).value());
  if (Status s = agent.Register(); !s.ok()) {
    if (s.code() == StatusCode::kTimedOut) {
      return CannotJoin("the coordinator at " + join->address +
                        " did not answer the registration of host " + flags.name + ": " +
                        s.ToString());
    }
    return CannotJoin("the coordinator at " + join->address + " refused to register host " +
                      flags.name + ": " + s.ToString());
  }
  LOG(INFO) << "registered host " << flags.name << " with job '" << join->job << "'";
  const nlohmann::json ready = {{"host", flags.name},   {"address", address},
                                {"slots", flags.slots}, {"gpus", gpus},
                                {"job", join->job},     {"coordinator", join->address}};
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);
  const int code = agent.Run();
  LOG(INFO) << "exiting with " << code;
  return code;
}

}  // namespace

void AddAgentCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<AgentFlags>();
  CLI::App* agent = app->add_subcommand(
      "agent",
      "Run this host's part of a job that spans machines: start the workers the "
      "coordinator asks for");
  SetUsage(agent, {"elastra agent --join FILE --slots S [--name HOST] [--address A] "
                   "[--gpus N|auto] [--state-dir DIR] [--coordinator-timeout SECONDS] "
                   "[--drain-timeout SECONDS] [--workers-ignore-sigterm] -- PROGRAM ARGS..."});
  agent->add_option("--join", o->join, "The job's join file (join.json of its coordinator)")
      ->type_name("FILE")
      ->required();
  AddIntFlag(agent, "--slots", &o->slots, 1, 4096, "S", "Most workers this host runs at once")
      ->required();
  agent
      ->add_option_function<std::string>(
          "--name", [o](const std::string& text) { o->name = CheckWord("--name", text); },
          "This host's name in the job")
      ->type_name("HOST")
      ->default_str(o->name);
  agent
      ->add_option_function<std::string>(
          "--address", [o](const std::string& text) { o->address = CheckWord("--address", text); },
          "Where this host's workers bind their collectives (default: the local address of the "
          "route to the coordinator)")
      ->type_name("A");
  AddGpusFlag(agent, &o->gpus);
  agent
      ->add_option("--state-dir", o->state_dir, "ELASTRA_STATE_DIR for the workers (default: none)")
      ->type_name("DIR");
  AddIntFlag(agent, "--coordinator-timeout", &o->coordinator_timeout_s, 1, 86400, "SECONDS",
             "How long to wait for the coordinator to answer, at start and whenever it goes "
             "silent, before giving up (exit 3)")
      ->capture_default_str();
  AddIntFlag(agent, "--drain-timeout", &o->drain_timeout_s, 1, 86400, "SECONDS",
             "On SIGTERM/SIGINT: how long the drain of this host may take before the workers are "
             "stopped (exit 1)")
      ->capture_default_str();
  agent->add_flag("--workers-ignore-sigterm", o->workers_ignore_sigterm,
                  "For Slurm (launch/slurm/): start the workers with SIGTERM ignored, so that a "
                  "SIGTERM to every process of the host drains it; a SIGTERM during the drain is "
                  "ignored, and workers are stopped with SIGINT");
  // After --, every argument is the program's, flags included.
  agent->add_option("PROGRAM", o->program, "The worker program and its arguments, after --")
      ->type_name("");
  agent->callback([o, exit_code] { *exit_code = RunAgent(*o); });
}

}  // namespace elastra::launch
