#include "tests/cluster/cluster_job.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "testbed/sanitizers.h"

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// How long a process may take to print its first line (a coordinator up, an agent registered):
// a bound on something that happens in well under a second unless the machine is overloaded.
constexpr seconds kStartTimeout{60};
// How often JobStatus() is polled by WaitFor: each poll starts an `elastra status` process.
constexpr milliseconds kStatusPollInterval{150};
// Lines of each process log that Logs() shows.
constexpr size_t kLogTailLines = 60;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Tail(const std::string& path, size_t n) {
  std::vector<std::string> lines = Lines(ReadFile(path));
  std::string out;
  for (size_t i = lines.size() > n ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += lines[i] + "\n";
  }
  return out;
}

// The lines of `path` that start with `prefix`.
size_t CountLinesStartingWith(const std::string& path, const std::string& prefix) {
  size_t count = 0;
  for (const std::string& line : Lines(ReadFile(path))) count += line.rfind(prefix, 0) == 0;
  return count;
}

}  // namespace

StatusOr<std::unique_ptr<ClusterJob>> ClusterJob::Create(Options options) {
  std::unique_ptr<ClusterJob> job(new ClusterJob(std::move(options)));
  char tmpl[] = "/tmp/elastra_cluster_job_XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return InternalError("mkdtemp failed");
  job->dir_ = tmpl;
  ELASTRA_ASSIGN_OR_RETURN(job->cluster_, NamespaceCluster::Create(job->options_.hosts));
  return job;
}

ClusterJob::~ClusterJob() {
  cluster_.reset();  // kills and reaps every process of the job
  if (!dir_.empty() && std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

Status ClusterJob::WaitForCoordinatorLine(size_t occurrence) {
  const auto deadline = Clock::now() + kStartTimeout;
  while (CountLinesStartingWith(coordinator_log(), "{\"address\"") < occurrence) {
    siginfo_t info = {};
    if (waitid(P_PID, coordinator_, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
      return InternalError("elastra coordinator exited before it was up:\n" +
                           Tail(coordinator_log(), kLogTailLines));
    }
    if (Clock::now() > deadline) {
      return TimedOutError("elastra coordinator not up within " +
                           std::to_string(kStartTimeout.count()) + " s:\n" +
                           Tail(coordinator_log(), kLogTailLines));
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return OkStatus();
}

Status ClusterJob::StartCoordinator(int workers, int max_workers) {
  ELASTRA_ASSIGN_OR_RETURN(
      coordinator_,
      cluster_->Spawn(0,
                      {ELASTRA_BINARY, "coordinator", "--state-dir", state_dir(), "--workers",
                       std::to_string(workers), "--max-workers", std::to_string(max_workers),
                       "--bind", "tcp://0.0.0.0:" + std::to_string(kPort)},
                      options_.env, coordinator_log()));
  return WaitForCoordinatorLine(1);
}

Status ClusterJob::RestartCoordinator() {
  const size_t before = CountLinesStartingWith(coordinator_log(), "{\"address\"");
  ELASTRA_ASSIGN_OR_RETURN(
      coordinator_,
      cluster_->Spawn(0, {ELASTRA_BINARY, "coordinator", "--state-dir", state_dir(), "--restart"},
                      options_.env, coordinator_log()));
  return WaitForCoordinatorLine(before + 1);
}

Status ClusterJob::StartAgent(int host, int slots) {
  // As an operator would: a copy of the join file on the host (the hosts share the file system
  // here, so any path would do; the copy is what the README asks for).
  const std::string name = cluster_->Name(host);
  const std::string host_dir = dir_ + "/" + name;
  std::error_code ec;
  fs::create_directories(host_dir, ec);
  fs::copy_file(state_dir() + "/join.json", host_dir + "/join.json",
                fs::copy_options::overwrite_existing, ec);
  if (ec) return InternalError("cannot copy join.json: " + ec.message());
  std::vector<std::string> argv = {ELASTRA_BINARY,
                                   "agent",
                                   "--join",
                                   host_dir + "/join.json",
                                   "--name",
                                   name,
                                   "--slots",
                                   std::to_string(slots),
                                   "--coordinator-timeout",
                                   "60",
                                   "--",
                                   TRAIN_MLP_BINARY,
                                   "--log",
                                   log_path(),
                                   "--stop-file",
                                   stop_path()};
  argv.insert(argv.end(), options_.train_args.begin(), options_.train_args.end());
  ELASTRA_ASSIGN_OR_RETURN(pid_t pid, cluster_->Spawn(host, argv, options_.env, agent_log(host)));
  agents_[host] = pid;
  const auto deadline = Clock::now() + kStartTimeout;
  while (CountLinesStartingWith(agent_log(host), "{\"address\"") == 0) {
    siginfo_t info = {};
    if (waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0) {
      return InternalError("elastra agent on " + name + " exited before it registered:\n" +
                           Tail(agent_log(host), kLogTailLines));
    }
    if (Clock::now() > deadline) {
      return TimedOutError("elastra agent on " + name + " not registered within " +
                           std::to_string(kStartTimeout.count()) + " s:\n" +
                           Tail(agent_log(host), kLogTailLines));
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  return OkStatus();
}

pid_t ClusterJob::agent_pid(int host) const {
  auto it = agents_.find(host);
  return it == agents_.end() ? -1 : it->second;
}

StatusOr<pid_t> ClusterJob::StartMpirun(const std::vector<std::string>& mpirun_argv) {
  // NamespaceCluster::Spawn starts in the test's working directory: a shell changes it first.
  std::vector<std::string> argv = mpirun_argv;
  argv.insert(argv.end(), {TRAIN_MLP_BINARY, "--log", log_path(), "--stop-file", stop_path()});
  argv.insert(argv.end(), options_.train_args.begin(), options_.train_args.end());
  std::vector<std::string> shell = {"bash", "-c", "cd \"$0\" && exec \"$@\"", dir_};
  shell.insert(shell.end(), argv.begin(), argv.end());
  std::map<std::string, std::string> env = options_.env;
  env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
  env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  if (testbed::kUnderAddressSanitizer) {
    env["ASAN_OPTIONS"] = testbed::AsanOptionsWith(testbed::kMpiAsanOptions);
  }
  return cluster_->Spawn(0, shell, env, mpirun_log());
}

std::vector<int> ClusterJob::agent_hosts() const {
  std::vector<int> hosts;
  for (const auto& [host, pid] : agents_) hosts.push_back(host);
  return hosts;
}

StatusOr<int> ClusterJob::KillHost(int host) {
  ELASTRA_RETURN_IF_ERROR(cluster_->KillHost(host));
  auto it = agents_.find(host);
  if (it == agents_.end()) return -1;
  const int code = WaitExit(it->second, seconds(10));
  agents_.erase(it);
  return code;
}

int ClusterJob::WaitExit(pid_t pid, seconds timeout) {
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pidfd < 0) return -1;
  struct pollfd pfd = {pidfd, POLLIN, 0};
  int ready = poll(&pfd, 1, static_cast<int>(milliseconds(timeout).count()));
  close(pidfd);
  int status = 0;
  if (ready != 1 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

RunResult ClusterJob::Elastra(std::vector<std::string> args, seconds timeout) {
  args.insert(args.begin(), ELASTRA_BINARY);
  args.insert(args.end(), {"--state-dir", state_dir()});
  auto r = cluster_->Run(0, args, timeout);
  if (!r.ok()) return RunResult{-1, r.status().ToString()};
  return *r;
}

nlohmann::json ClusterJob::JobStatus() {
  RunResult r = Elastra({"status", "--json"}, seconds(30));
  if (r.exit_code != 0) return nlohmann::json::object();
  for (const std::string& line : Lines(r.output)) {
    if (line.rfind('{', 0) != 0) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) return j;
  }
  return nlohmann::json::object();
}

bool ClusterJob::WaitFor(const std::function<bool(const nlohmann::json&)>& pred, seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto j = JobStatus();
    if (!j.empty() && pred(j)) return true;
    std::this_thread::sleep_for(kStatusPollInterval);
  }
  return false;
}

bool ClusterJob::WaitForStep(int64_t step, seconds timeout) {
  return WaitFor([&](const nlohmann::json& j) { return j.value("step", int64_t{-1}) >= step; },
                 timeout);
}

void ClusterJob::StopTraining() { std::ofstream(stop_path()) << "stop\n"; }

std::string ClusterJob::Logs() const {
  std::string out;
  if (fs::exists(mpirun_log())) {
    out += "--- mpirun.log (tail)\n" + Tail(mpirun_log(), 2 * kLogTailLines);
  }
  if (fs::exists(coordinator_log())) {
    out += "--- coordinator.log (tail)\n" + Tail(coordinator_log(), kLogTailLines);
  }
  for (const auto& [host, pid] : agents_) {
    out +=
        "--- agent" + std::to_string(host) + ".log (tail)\n" + Tail(agent_log(host), kLogTailLines);
  }
  return out;
}

std::map<int, std::string> MemberHostsByRank(const nlohmann::json& status) {
  std::map<int, std::string> out;
  for (const auto& w : status.value("workers", nlohmann::json::array())) {
    if (w.value("state", std::string()) == "member") {
      out[w.value("rank", -1)] = w.value("host", std::string());
    }
  }
  return out;
}

std::vector<nlohmann::json> History(const nlohmann::json& status) {
  std::vector<nlohmann::json> out;
  for (const auto& h : status.value("history", nlohmann::json::array())) out.push_back(h);
  return out;
}

nlohmann::json HostEntry(const nlohmann::json& status, const std::string& name) {
  for (const auto& h : status.value("hosts", nlohmann::json::array())) {
    if (h.value("name", std::string()) == name) return h;
  }
  return nlohmann::json::object();
}

std::vector<std::string> LinesWith(const std::string& path, const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& line : Lines(ReadFile(path))) {
    if (line.find(text) != std::string::npos) out.push_back(line);
  }
  return out;
}

}  // namespace elastra::testing
