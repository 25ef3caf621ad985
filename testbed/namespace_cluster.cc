#include "testbed/namespace_cluster.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/logging.h"

namespace elastra::testing {
namespace {

using cluster_internal::Child;
using cluster_internal::ForkThread;
using cluster_internal::HeldNamespace;
using cluster_internal::HolderSpec;
using cluster_internal::UniqueFd;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int kHostFlags = CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWNS;
constexpr int kSwitchFlags = CLONE_NEWNET | CLONE_NEWUTS;
constexpr const char* kBridge = "br0";
constexpr const char* kHostInterface = "eth0";
// How often link states are read while waiting for them (the kernel offers no simpler event).
constexpr milliseconds kLinkPollInterval{5};

// The switch's end of host k's veth.
std::string PortName(int host) { return "h" + std::to_string(host); }

bool ValidNamePrefix(const std::string& prefix) {
  if (prefix.empty() || prefix.size() > 40 || prefix.front() == '-') return false;
  for (char c : prefix) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return InternalError("cannot write " + path);
  if (chmod(path.c_str(), mode) != 0) {
    return InternalError("chmod " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

std::string FirstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? text : line;
}

// Processes killed in a host whose parent died first are orphaned into this process, which
// reaps them, rather than to init, which may leave them zombies for a while.
void BecomeSubreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }

}  // namespace

std::string NamespaceCluster::Unavailable() {
  if (geteuid() != 0) return "not root: network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN";
  for (const char* tool : {"ip", "nsenter", "bash"}) {
    if (cluster_internal::FindExecutable(tool).empty()) {
      return std::string("`") + tool + "` not found (iproute2, util-linux and bash are needed)";
    }
  }
  // A throwaway namespace, made as a host's is, with a bridge and a veth pair in it.
  ForkThread forker;
  HolderSpec spec;
  spec.unshare_flags = kHostFlags;
  spec.hostname = "elastra-probe";
  auto ns = cluster_internal::HoldNamespace(forker, spec, Clock::now() + milliseconds(10000));
  if (!ns.ok()) return "cannot make namespaces: " + ns.status().ToString();
  auto probe = cluster_internal::RunInNamespace(
      forker, ns->fds(),
      {"bash", "-c",
       "ip link add probe-br type bridge && ip link add probe-v0 type veth peer name probe-v1 && "
       "ip link set probe-v0 master probe-br"},
      {}, milliseconds(10000));
  cluster_internal::KillAndReap(ns->holder);
  if (!probe.ok()) return "cannot run ip in a new namespace: " + probe.status().ToString();
  if (probe->exit_code != 0) {
    return "cannot make a bridge and a veth pair in a new network namespace: " +
           FirstLine(probe->output);
  }
  return "";
}

NamespaceCluster::NamespaceCluster(Options options) : options_(std::move(options)) {}

StatusOr<std::unique_ptr<NamespaceCluster>> NamespaceCluster::Create(int hosts, Options options) {
  if (hosts < 1 || hosts > kMaxHosts) {
    return InvalidArgumentError("NamespaceCluster: " + std::to_string(hosts) + " hosts; 1.." +
                                std::to_string(kMaxHosts) + " are possible");
  }
  if (!ValidNamePrefix(options.name_prefix)) {
    return InvalidArgumentError("NamespaceCluster: name prefix '" + options.name_prefix +
                                "' is not a hostname (letters, digits, '-')");
  }
  std::unique_ptr<NamespaceCluster> cluster(new NamespaceCluster(std::move(options)));
  const auto start = Clock::now();
  // On failure the destructor takes down whatever was made.
  ELASTRA_RETURN_IF_ERROR(cluster->Build(hosts).WithContext("NamespaceCluster::Create"));
  std::ostringstream line;
  line << "NamespaceCluster: " << hosts << (hosts == 1 ? " host" : " hosts") << " up in "
       << std::chrono::duration_cast<milliseconds>(Clock::now() - start).count() << " ms:";
  for (int k = 0; k < hosts; ++k) line << " " << cluster->Name(k) << "=" << cluster->Address(k);
  line << " (bridge in a switch namespace; dir " << cluster->dir_ << ")";
  LOG(INFO) << line.str();
  return cluster;
}

Status NamespaceCluster::Build(int hosts) {
  std::string parent = options_.temp_parent;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::string tmpl = parent + "/elastra-cluster-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    return InternalError("mkdtemp " + tmpl + ": " + std::strerror(errno));
  }
  dir_ = tmpl;
  ELASTRA_RETURN_IF_ERROR(WriteHostsFile(hosts));

  forker_ = std::make_unique<ForkThread>();
  BecomeSubreaper();
  HolderSpec switch_spec;
  switch_spec.unshare_flags = kSwitchFlags;
  switch_spec.hostname = "switch";
  ELASTRA_ASSIGN_OR_RETURN(HeldNamespace sw,
                           cluster_internal::HoldNamespace(*forker_, switch_spec, StepDeadline()));
  switch_ = std::make_unique<HeldNamespace>(std::move(sw));
  for (int k = 0; k < hosts; ++k) {
    HolderSpec spec;
    spec.unshare_flags = kHostFlags;
    spec.hostname = options_.name_prefix + std::to_string(k);
    spec.etc_hosts = dir_ + "/hosts";
    ELASTRA_ASSIGN_OR_RETURN(HeldNamespace host,
                             cluster_internal::HoldNamespace(*forker_, spec, StepDeadline()));
    hosts_.push_back(std::move(host));
  }
  ELASTRA_RETURN_IF_ERROR(ConnectHosts());
  std::vector<int> all(hosts);
  for (int k = 0; k < hosts; ++k) all[k] = k;
  ELASTRA_RETURN_IF_ERROR(WaitForLinks(all, /*up=*/true));
  return WriteRshAgent();
}

Status NamespaceCluster::WriteHostsFile(int hosts) {
  std::ostringstream text;
  text << "# /etc/hosts of the hosts of an Elastra NamespaceCluster\n"
       << "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n";
  for (int k = 0; k < hosts; ++k) {
    text << "198.18.0." << (kFirstHostOctet + k) << " " << options_.name_prefix << k << "\n";
  }
  return WriteFile(dir_ + "/hosts", text.str(), 0644);
}

Status NamespaceCluster::WriteRshAgent() {
  const std::string nsenter = cluster_internal::FindExecutable("nsenter");
  const std::string bash = cluster_internal::FindExecutable("bash");
  std::ostringstream s;
  s << "#!" << bash << "\n"
    << "# The rsh agent of an Elastra NamespaceCluster (testbed/namespace_cluster.h).\n"
    << "# Called like ssh, `rsh_agent [ssh options] [user@]HOST COMMAND...`, it runs COMMAND\n"
    << "# with bash inside HOST's network, UTS and mount namespaces, keeping the environment\n"
    << "# and the working directory.\n"
    << "while [ $# -gt 0 ]; do\n"
    << "  case \"$1\" in\n"
    << "    --) shift; break ;;\n"
    << "    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;  # ssh options that take a value\n"
    << "    -*) shift ;;\n"
    << "    *) break ;;\n"
    << "  esac\n"
    << "done\n"
    << "if [ $# -lt 2 ]; then\n"
    << "  echo \"rsh_agent: usage: rsh_agent [options] HOST COMMAND...\" >&2\n"
    << "  exit 255\n"
    << "fi\n"
    << "host=${1#*@}\n"
    << "shift\n"
    << "case \"$host\" in\n";
  for (int k = 0; k < size(); ++k) {
    s << "  " << Name(k) << "|" << Address(k) << ") pid=" << HolderPid(k) << " ;;\n";
  }
  s << "  *) echo \"rsh_agent: $host: not a host of this cluster\" >&2; exit 255 ;;\n"
    << "esac\n"
    << "exec " << nsenter << " -t \"$pid\" -n -u -m --wd=\"$PWD\" -- " << bash << " -c \"$*\"\n";
  return WriteFile(RshAgent(), s.str(), 0755);
}

Status NamespaceCluster::ConnectHosts() {
  // The switch: a bridge, and for each host a veth pair whose other end is made right inside the
  // host as eth0.
  std::ostringstream sw;
  sw << "link add " << kBridge << " type bridge\n"
     << "link set " << kBridge << " up\n";
  for (int k = 0; k < size(); ++k) {
    sw << "link add " << PortName(k) << " type veth peer name " << kHostInterface << " netns "
       << HolderPid(k) << "\n"
       << "link set " << PortName(k) << " master " << kBridge << " up\n";
  }
  ELASTRA_RETURN_IF_ERROR(WriteFile(dir_ + "/switch.ip", sw.str(), 0644));
  ELASTRA_RETURN_IF_ERROR(RunIp(*switch_, {"-batch", dir_ + "/switch.ip"}));
  for (int k = 0; k < size(); ++k) {
    std::ostringstream host;
    host << "link set lo up\n"
         << "addr add " << Address(k) << "/24 dev " << kHostInterface << "\n"
         << "link set " << kHostInterface << " up\n";
    const std::string batch = dir_ + "/" + Name(k) + ".ip";
    ELASTRA_RETURN_IF_ERROR(WriteFile(batch, host.str(), 0644));
    ELASTRA_RETURN_IF_ERROR(RunIp(hosts_[k], {"-batch", batch}));
  }
  return OkStatus();
}

Status NamespaceCluster::WaitForLinks(const std::vector<int>& hosts, bool up) {
  // The switch's view is enough: a veth has its carrier only while both ends are up, so a port
  // that is UP means the host's eth0 is up too, and a port taken down drops the host's carrier at
  // once. What is waited for is the bridge putting a port that came up into forwarding.
  const auto deadline = StepDeadline();
  for (;;) {
    ELASTRA_ASSIGN_OR_RETURN(RunResult ports, RunIn(*switch_, {"ip", "-j", "-d", "link", "show"}));
    auto json = nlohmann::json::parse(ports.output, nullptr, /*allow_exceptions=*/false);
    if (ports.exit_code != 0 || !json.is_array()) {
      return InternalError("ip -j link show in the switch: " + ports.output);
    }
    std::map<std::string, std::string> port_state;  // "UP/forwarding", "DOWN/disabled", ...
    for (const auto& link : json) {
      std::string state = link.value("operstate", "");
      if (link.contains("linkinfo") && link["linkinfo"].contains("info_slave_data")) {
        state += "/" + link["linkinfo"]["info_slave_data"].value("state", "");
      }
      port_state[link.value("ifname", "")] = state;
    }
    std::string pending;
    for (int k : hosts) {
      const std::string& state = port_state[PortName(k)];
      bool done = up ? state == "UP/forwarding" : state.find("/forwarding") == std::string::npos;
      if (!done) pending += " " + Name(k) + " (port " + PortName(k) + ": " + state + ")";
    }
    if (pending.empty()) return OkStatus();
    if (Clock::now() > deadline) {
      return TimedOutError(std::string("links not ") + (up ? "up" : "down") + " after " +
                           std::to_string(options_.step_timeout.count()) + " ms:" + pending);
    }
    std::this_thread::sleep_for(kLinkPollInterval);
  }
}

NamespaceCluster::~NamespaceCluster() {
  for (const HeldNamespace& host : hosts_) {
    Status swept = Sweep(host);
    if (!swept.ok()) LOG(WARNING) << "NamespaceCluster: " << swept;
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const Child& child : spawned_) cluster_internal::KillAndReap(child);
  for (const UniqueFd& pidfd : killed_) cluster_internal::ReapIfExited(pidfd.get());
  for (const HeldNamespace& host : hosts_) cluster_internal::KillAndReap(host.holder);
  if (switch_ != nullptr) cluster_internal::KillAndReap(switch_->holder);
  hosts_.clear();  // closes the namespace fds: the kernel frees the namespaces
  switch_.reset();
  forker_.reset();
  if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

std::string NamespaceCluster::Name(int host) const {
  CHECK(host >= 0 && host < size()) << "no host " << host;
  return options_.name_prefix + std::to_string(host);
}

std::string NamespaceCluster::Address(int host) const {
  CHECK(host >= 0 && host < size()) << "no host " << host;
  return "198.18.0." + std::to_string(kFirstHostOctet + host);
}

pid_t NamespaceCluster::HolderPid(int host) const {
  CHECK(host >= 0 && host < size()) << "no host " << host;
  return hosts_[host].holder.pid;
}

Status NamespaceCluster::CheckHost(int host) const {
  if (host < 0 || host >= size()) {
    return InvalidArgumentError("no host " + std::to_string(host) + " in a cluster of " +
                                std::to_string(size()));
  }
  return OkStatus();
}

Clock::time_point NamespaceCluster::StepDeadline() const {
  return Clock::now() + options_.step_timeout;
}

StatusOr<pid_t> NamespaceCluster::Spawn(int host, const std::vector<std::string>& argv,
                                        const std::map<std::string, std::string>& env,
                                        const std::string& log_path) {
  ELASTRA_RETURN_IF_ERROR(CheckHost(host));
  UniqueFd log(open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
  if (!log.valid()) {
    return InvalidArgumentError("cannot open log " + log_path + ": " + std::strerror(errno));
  }
  cluster_internal::ChildIo io;
  io.stdout_fd = log.get();
  io.stderr_fd = log.get();
  ELASTRA_ASSIGN_OR_RETURN(
      Child child, cluster_internal::StartChild(*forker_, argv, env, hosts_[host].fds(), io));
  const pid_t pid = child.pid;
  std::lock_guard<std::mutex> lock(mu_);
  spawned_.push_back(std::move(child));
  return pid;
}

StatusOr<RunResult> NamespaceCluster::Run(int host, const std::vector<std::string>& argv,
                                          milliseconds timeout,
                                          const std::map<std::string, std::string>& env) {
  ELASTRA_RETURN_IF_ERROR(CheckHost(host));
  return cluster_internal::RunInNamespace(*forker_, hosts_[host].fds(), argv, env, timeout);
}

StatusOr<RunResult> NamespaceCluster::RunIn(const HeldNamespace& ns,
                                            const std::vector<std::string>& argv) {
  return cluster_internal::RunInNamespace(*forker_, ns.fds(), argv, {}, options_.step_timeout);
}

Status NamespaceCluster::RunIp(const HeldNamespace& ns, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"ip"};
  argv.insert(argv.end(), args.begin(), args.end());
  ELASTRA_ASSIGN_OR_RETURN(RunResult result, RunIn(ns, argv));
  if (result.exit_code != 0) {
    std::string command;
    for (const auto& a : argv) command += (command.empty() ? "" : " ") + a;
    return UnavailableError("in " + ns.name + ": `" + command + "` exited " +
                            std::to_string(result.exit_code) + ": " + FirstLine(result.output));
  }
  return OkStatus();
}

Status NamespaceCluster::SetLinkUp(int host, bool up) {
  ELASTRA_RETURN_IF_ERROR(CheckHost(host));
  ELASTRA_RETURN_IF_ERROR(RunIp(*switch_, {"link", "set", PortName(host), up ? "up" : "down"}));
  return WaitForLinks({host}, up).WithContext("SetLinkUp(" + Name(host) + ")");
}

Status NamespaceCluster::KillHost(int host) {
  ELASTRA_RETURN_IF_ERROR(CheckHost(host));
  return Sweep(hosts_[host]).WithContext("KillHost(" + Name(host) + ")");
}

std::vector<pid_t> NamespaceCluster::ProcessesIn(int host) const {
  if (!CheckHost(host).ok()) return {};
  return cluster_internal::ProcessesIn(hosts_[host].net_id, hosts_[host].holder.pid);
}

Status NamespaceCluster::Sweep(const HeldNamespace& ns) {
  const auto deadline = Clock::now() + options_.kill_timeout;
  std::vector<UniqueFd> killed;
  auto keep = [](void* arg, pid_t, int pidfd) {
    int copy = fcntl(pidfd, F_DUPFD_CLOEXEC, 0);
    if (copy >= 0) static_cast<std::vector<UniqueFd>*>(arg)->emplace_back(copy);
  };
  Status result = OkStatus();
  for (;;) {
    const size_t before = killed.size();
    int n = cluster_internal::KillProcessesIn(ns.net_id, ns.holder.pid, keep, &killed);
    if (n < 0) {
      result = InternalError("cannot read /proc");
      break;
    }
    if (n == 0) break;
    // Wait for this round's processes to exit; a new round finds any they forked meanwhile.
    std::vector<int> round;
    for (size_t i = before; i < killed.size(); ++i) round.push_back(killed[i].get());
    if (!cluster_internal::WaitAllExited(round, deadline)) {
      result = TimedOutError("processes left in " + ns.name + " after " +
                             std::to_string(options_.kill_timeout.count()) + " ms");
      break;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& fd : killed) killed_.push_back(std::move(fd));
  return result;
}

}  // namespace elastra::testing
