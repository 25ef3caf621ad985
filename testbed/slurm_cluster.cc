#include "testbed/slurm_cluster.h"

#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kMungeKey = "/etc/munge/munge.key";
// Lines of each daemon log that Logs() shows.
constexpr size_t kLogTailLines = 25;

// The program's path: PATH first, then the sbin folders a non-login root shell may lack.
std::string Find(const std::string& name) {
  std::string path = cluster_internal::FindExecutable(name);
  if (!path.empty()) return path;
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/"}) {
    if (access((dir + name).c_str(), X_OK) == 0) return dir + name;
  }
  return "";
}

std::string Tail(const std::string& path, size_t n) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t start = 0;
  while (start < s.size() && std::isspace(static_cast<unsigned char>(s[start]))) ++start;
  return s.substr(start);
}

}  // namespace

std::string SlurmCluster::Unavailable() {
  if (std::string why = NamespaceCluster::Unavailable(); !why.empty()) return why;
  for (const char* program : {"slurmctld", "slurmd", "sbatch", "srun", "squeue", "scontrol",
                              "sinfo", "scancel", "munged", "runuser"}) {
    if (Find(program).empty()) {
      return std::string("`") + program +
             "` not found: the Slurm tests need munge slurmctld slurmd slurm-client "
             "(launch/install_deps.sh)";
    }
  }
  if (access(kMungeKey, R_OK) != 0) return std::string("no munge key at ") + kMungeKey;
  if (getpwnam("munge") == nullptr) return "no user munge (the munge package makes it)";
  return "";
}

StatusOr<std::unique_ptr<SlurmCluster>> SlurmCluster::Create(Options options) {
  if (options.nodes < 1 || options.nodes > 16) {
    return InvalidArgumentError("a Slurm cluster has 1..16 nodes, got " +
                                std::to_string(options.nodes));
  }
  std::unique_ptr<SlurmCluster> c(new SlurmCluster(std::move(options)));
  char tmpl[] = "/tmp/elastra_slurm_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return InternalError("mkdtemp failed");
  c->dir_ = tmpl;
  ELASTRA_ASSIGN_OR_RETURN(c->cluster_, NamespaceCluster::Create(c->options_.nodes + 1));
  ELASTRA_RETURN_IF_ERROR(c->Start());
  return c;
}

SlurmCluster::~SlurmCluster() {
  cluster_.reset();  // kills every daemon, slurmstepd and job process, and reaps them
  if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status SlurmCluster::WriteConf() const {
  std::ostringstream c;
  const std::string d = dir_;
  c << "ClusterName=elastra\n"
    << "SlurmctldHost=" << cluster_->Name(0) << "(" << cluster_->Address(0) << ")\n"
    << "SlurmUser=root\nSlurmdUser=root\n"
    << "AuthType=auth/munge\nAuthInfo=socket=" << d << "/munge/munge.socket.2\n"
    << "CredType=cred/munge\nSlurmctldPort=6817\nSlurmdPort=6818\n"
    << "StateSaveLocation=" << d << "/state\nSlurmdSpoolDir=" << d << "/spool/%n\n"
    << "SlurmctldPidFile=" << d << "/run/slurmctld.pid\n"
    << "SlurmdPidFile=" << d << "/run/slurmd-%n.pid\n"
    << "SlurmctldLogFile=" << d << "/log/slurmctld.log\n"
    << "SlurmdLogFile=" << d << "/log/slurmd-%n.log\n"
    << "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
    << "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
    << "JobCompType=jobcomp/none\nSwitchType=switch/none\nMpiDefault=none\nMailProg=/bin/true\n"
    << "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n"
    << "SchedulerType=sched/backfill\nReturnToService=2\nSlurmdParameters=config_overrides\n"
    << "SlurmctldTimeout=30\nSlurmdTimeout=" << options_.slurmd_timeout_s << "\n"
    << "MessageTimeout=10\nInactiveLimit=0\nKillWait=" << options_.kill_wait_s << "\n"
    << "MinJobAge=300\n";
  std::string names;
  for (int k = 1; k <= options_.nodes; ++k) {
    c << "NodeName=" << cluster_->Name(k) << " NodeAddr=" << cluster_->Address(k)
      << " CPUs=1 RealMemory=100 State=UNKNOWN\n";
    names += (names.empty() ? "" : ",") + cluster_->Name(k);
  }
  c << "PartitionName=debug Nodes=" << names << " Default=YES MaxTime=INFINITE State=UP\n";
  std::ofstream out(conf_path());
  out << c.str();
  out.close();
  if (!out) return InternalError("cannot write " + conf_path());
  return OkStatus();
}

Status SlurmCluster::Start() {
  std::error_code ec;
  for (const char* sub : {"state", "run", "log", "munge"})
    fs::create_directories(dir_ + "/" + sub, ec);
  for (int k = 1; k <= options_.nodes; ++k) {
    fs::create_directories(dir_ + "/spool/" + cluster_->Name(k), ec);  // slurmd needs it
  }
  if (ec) return InternalError("cannot make the folders in " + dir_ + ": " + ec.message());
  const passwd* munge = getpwnam("munge");
  if (munge == nullptr) return UnavailableError("no user munge");
  if (chown((dir_ + "/munge").c_str(), munge->pw_uid, munge->pw_gid) != 0 ||
      chmod(dir_.c_str(), 0755) != 0) {
    return InternalError("cannot hand " + dir_ + "/munge to munge");
  }
  ELASTRA_RETURN_IF_ERROR(WriteConf());
  const std::string log = dir_ + "/log/";
  const std::map<std::string, std::string> env = {{"SLURM_CONF", conf_path()}};
  const std::string m = dir_ + "/munge/";
  ELASTRA_RETURN_IF_ERROR(
      cluster_
          ->Spawn(0,
                  {Find("runuser"), "-u", "munge", "--", Find("munged"), "--foreground",
                   "--socket=" + m + "munge.socket.2", "--pid-file=" + m + "munged.pid",
                   "--log-file=" + m + "munged.log", "--seed-file=" + m + "munged.seed"},
                  env, log + "munged.out")
          .status());
  // slurmctld and slurmd need munged's socket at their start.
  const auto deadline = Clock::now() + options_.start_timeout;
  while (!fs::exists(m + "munge.socket.2")) {
    if (Clock::now() > deadline) {
      return TimedOutError("munged did not make its socket: " + Tail(log + "munged.out", 10) +
                           Tail(m + "munged.log", 10));
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  ELASTRA_RETURN_IF_ERROR(
      cluster_->Spawn(0, {Find("slurmctld"), "-D", "-f", conf_path()}, env, log + "ctl.out")
          .status());
  for (int k = 1; k <= options_.nodes; ++k) {
    ELASTRA_RETURN_IF_ERROR(
        cluster_
            ->Spawn(k, {Find("slurmd"), "-D", "-f", conf_path(), "-N", cluster_->Name(k)}, env,
                    log + cluster_->Name(k) + ".out")
            .status());
  }
  return WaitForIdleNodes();
}

Status SlurmCluster::WaitForIdleNodes() {
  const auto deadline = Clock::now() + options_.start_timeout;
  const std::string want = std::to_string(options_.nodes);
  while (Clock::now() < deadline) {
    auto r = Run({"sinfo", "-h", "-t", "idle", "-o", "%D"}, seconds(30));
    if (r.ok() && r->exit_code == 0 && Trim(r->output) == want) return OkStatus();
    std::this_thread::sleep_for(milliseconds(100));
  }
  return TimedOutError("the Slurm nodes did not come up idle within " +
                       std::to_string(options_.start_timeout.count()) + " s\n" + Logs());
}

StatusOr<RunResult> SlurmCluster::Run(const std::vector<std::string>& argv, seconds timeout,
                                      const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> all = env;
  all["SLURM_CONF"] = conf_path();
  return cluster_->Run(0, argv, timeout, all);
}

std::vector<std::string> SlurmCluster::JobNodes(const std::string& id) {
  auto list = Run({"squeue", "-h", "-j", id, "-t", "running", "-o", "%N"});
  if (!list.ok() || list->exit_code != 0 || Trim(list->output).empty()) return {};
  auto names = Run({"scontrol", "show", "hostnames", Trim(list->output)});
  if (!names.ok() || names->exit_code != 0) return {};
  std::vector<std::string> out;
  std::istringstream in(names->output);
  for (std::string line; std::getline(in, line);) {
    if (!Trim(line).empty()) out.push_back(Trim(line));
  }
  return out;
}

std::string SlurmCluster::JobState(const std::string& id) {
  auto r = Run({"squeue", "-h", "-j", id, "-t", "all", "-o", "%T"});
  return r.ok() && r->exit_code == 0 ? Trim(r->output) : "";
}

std::string SlurmCluster::NodeState(int node) {
  auto r = Run({"sinfo", "-h", "-N", "-n", cluster_->Name(node), "-o", "%T"});
  return r.ok() && r->exit_code == 0 ? Trim(r->output) : "";
}

std::string SlurmCluster::Logs() const {
  std::string out;
  std::vector<std::string> logs = {dir_ + "/log/slurmctld.log", dir_ + "/log/ctl.out"};
  for (int k = 1; k <= options_.nodes; ++k) {
    logs.push_back(dir_ + "/log/slurmd-" + cluster_->Name(k) + ".log");
  }
  for (const std::string& path : logs) out += "--- " + path + "\n" + Tail(path, kLogTailLines);
  return out;
}

}  // namespace elastra::testing
