// NamespaceCluster: K "hosts" on one Linux machine, for many-host tests (per-host agents, host
// loss, partitions, mpirun across hosts). Each host runs real processes that talk real TCP.
//
// What a host is
//   A network namespace with `lo` up and one veth, `eth0`, addressed 198.18.0.(10+k)/24; a UTS
//   namespace with its own hostname ("host0".."hostK-1", so gethostname() differs per host); and a
//   mount namespace whose only change is a private /etc/hosts naming every host, so "host2"
//   resolves to 198.18.0.12 everywhere in the cluster. IPv6 is off on eth0 (lo keeps ::1): the
//   only addresses a host has are loopback and 198.18.0.0/24 (RFC 2544 benchmarking space, never
//   routed). A host has no default route: nothing it sends can leave the cluster.
//   The hosts' veths meet on a Linux bridge that lives in a "switch" network namespace of its own.
//   Nothing at all is created or changed in the root namespaces: no interface, route, sysctl,
//   mount or /run/netns entry.
//
// Lifetime
//   Each namespace is held by a small holder process (unshare + wait). Namespaces have no name in
//   /run/netns, so the kernel frees one, with its interfaces, when its last process exits. A
//   holder has PR_SET_PDEATHSIG: when the test process dies, even by SIGKILL, each holder kills
//   every process left in its host and exits, and the kernel frees the namespaces. Processes the
//   cluster starts have PR_SET_PDEATHSIG(SIGKILL) too. All of them are forked on one thread the
//   cluster owns, because PR_SET_PDEATHSIG fires when the *thread* that forked exits: a test may
//   call Spawn from any thread. The destructor kills every process in every host (grandchildren
//   and processes started through RshAgent() included), reaps what it can, and removes the
//   cluster's temp dir. Create makes the test process a child subreaper
//   (PR_SET_CHILD_SUBREAPER), so that orphans killed in a host are reaped here, by the
//   destructor, rather than left as zombies until init gets to them (on our test machines it
//   reaps orphans only now and then).
//
// Use
//   if (std::string why = NamespaceCluster::Unavailable(); !why.empty()) GTEST_SKIP() << why;
//   auto cluster = NamespaceCluster::Create(3);
//   ASSERT_TRUE(cluster.ok()) << cluster.status();
//   const std::string coordinator_url = "tcp://" + (*cluster)->Address(0) + ":5555";
//   auto coordinator = (*cluster)->Spawn(0, {elastra, "coordinator", "--state-dir", state,
//                                            "--workers", "2", "--bind", coordinator_url},
//                                        {}, dir + "/coordinator.log");
//   auto worker = (*cluster)->Spawn(1, worker_argv, {{"SOME_COORDINATOR_VAR", coordinator_url}},
//                                   dir + "/worker1.log");
//   ASSERT_TRUE((*cluster)->SetLinkUp(1, false).ok());   // host 1 is partitioned
//   ASSERT_TRUE((*cluster)->KillHost(1).ok());           // host 1 died
//   // mpirun across hosts, started in host 0 (checked with Open MPI 4.1: an allreduce over
//   // three hosts works; as root add OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1):
//   (*cluster)->Spawn(0, {"mpirun", "--mca", "plm_rsh_agent", (*cluster)->RshAgent(),
//                         "--host", "host1,host2", "-np", "2", worker}, env, dir + "/mpirun.log");
//
// Cost: each step runs `ip` or forks a holder; on a loaded 2-core machine 1-3 hosts take
// 0.1-0.4 s to build, 16 hosts 0.5 s, 64 hosts ~3-7 s; SetLinkUp ~50 ms; destruction ms.
//
// Not isolated between hosts, unlike real machines: the file system (a unix socket or a file
// made on one host is there on every host; only /etc/hosts differs), /dev/shm, the pid space
// (pids are global, any host's process can be signalled from anywhere) and /sys (sysfs is the
// root's: /sys/class/net lists the machine's interfaces, not the host's; getifaddrs() and
// netlink see the host's own).
//
// Thread-safety: after Create, every method may be called from any thread at the same time.
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN), `ip` (iproute2), `nsenter` (util-linux) and bash.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "elastra/status.h"
#include "testbed/child_process.h"

namespace elastra::testing {

// Run() returns a RunResult (child_process.h): the exit code and the output.
class NamespaceCluster {
 public:
  struct Options {
    // Host k is named name_prefix + k ("host0", ...). Letters, digits and '-' only.
    std::string name_prefix = "host";
    // Folder in which the cluster makes its own temp dir (rsh agent, hosts file, ip batches).
    // Empty: $TMPDIR, else /tmp.
    std::string temp_parent;
    // Limit on each step the cluster takes itself: a holder starting, an `ip` command, links
    // coming up in Create and SetLinkUp.
    std::chrono::milliseconds step_timeout{30000};
    // How long KillHost and the destructor wait for killed processes to leave a host.
    std::chrono::milliseconds kill_timeout{30000};
  };

  // Host k has address 198.18.0.(kFirstHostOctet + k).
  static constexpr int kFirstHostOctet = 10;
  static constexpr int kMaxHosts = 200;

  // Empty when this process can build a cluster here; else a one-line reason (not root, unshare
  // refused, `ip`/`nsenter`/bash missing, no veth or bridge support). Tests skip with it.
  // Takes ~0.1 s: it makes a throwaway namespace with a bridge and a veth pair in it.
  static std::string Unavailable();

  // Builds `hosts` hosts (1..kMaxHosts) and waits until every host's link forwards. Logs one line
  // with the hosts' names and addresses. Returns kInvalidArgument for a bad count or name prefix,
  // kUnavailable when namespaces cannot be made, kTimedOut when a step passes step_timeout;
  // whatever was made is torn down again.
  static StatusOr<std::unique_ptr<NamespaceCluster>> Create(int hosts, Options options);
  static StatusOr<std::unique_ptr<NamespaceCluster>> Create(int hosts) {
    return Create(hosts, Options());
  }

  // Kills every process in every host (SIGKILL), reaps its children among them, and frees the
  // namespaces and the temp dir.
  ~NamespaceCluster();
  NamespaceCluster(const NamespaceCluster&) = delete;
  NamespaceCluster& operator=(const NamespaceCluster&) = delete;

  int size() const { return static_cast<int>(hosts_.size()); }
  // "host2" (its gethostname() inside) and "198.18.0.12". Host must be in [0, size()).
  std::string Name(int host) const;
  std::string Address(int host) const;
  // The pid of the process that holds host k's namespaces: `nsenter -t PID -n -u -m` enters it.
  pid_t HolderPid(int host) const;
  // The pid of the process that holds the switch's namespaces (the bridge).
  pid_t SwitchPid() const { return switch_->holder.pid; }
  // The cluster's temp dir; removed by the destructor.
  const std::string& dir() const { return dir_; }

  // A script usable as Open MPI's `--mca plm_rsh_agent`: called like ssh,
  // `AGENT [ssh options] HOST COMMAND...`, it runs `bash -c "COMMAND..."` inside HOST's
  // namespaces (HOST: a name or an address of this cluster) with the caller's environment and
  // working directory. Exits 255 for an unknown host, like ssh.
  std::string RshAgent() const { return dir_ + "/rsh_agent"; }

  // Starts argv (argv[0] is looked up in PATH) inside host k's namespaces, with the test's
  // environment plus `env`, stdin from /dev/null and stdout+stderr appended to `log_path`. The
  // process is in a process group of its own and dies with the test process (PR_SET_PDEATHSIG).
  // The caller may signal it and waitpid() it; the destructor reaps it otherwise.
  // Returns kInvalidArgument for a bad host or log path, kNotFound when there is no such program,
  // and the failing step (setns, exec) otherwise.
  StatusOr<pid_t> Spawn(int host, const std::vector<std::string>& argv,
                        const std::map<std::string, std::string>& env, const std::string& log_path);

  // Runs argv inside host k (as Spawn) and waits for it. Returns its exit code and output, or
  // kTimedOut after `timeout` (the command's process group is then killed).
  StatusOr<RunResult> Run(int host, const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout,
                          const std::map<std::string, std::string>& env = {});

  // Takes host k's switch port down or back up. Down is a partition as when a cable is pulled:
  // packets to and from the host are dropped silently, so a connect times out, established
  // connections stall and nothing is reset; the host's own configuration is untouched. Returns
  // once the host has lost its carrier, or once its port forwards again. As on a real network,
  // the first packets after a heal may wait up to ~1 s for ARP (a host whose ARP query failed
  // during the partition asks again once a second): give connects after a heal seconds.
  // Returns kTimedOut after step_timeout.
  Status SetLinkUp(int host, bool up);

  // A machine that died: SIGKILLs every process in host k (what Spawn and Run started, their
  // children, whatever came in through RshAgent()) and waits until none is left. The host itself
  // (namespaces, address, link) stays and may be used again. Does not reap what Spawn started (the
  // caller may waitpid it). Returns kTimedOut when processes are left after kill_timeout.
  Status KillHost(int host);

  // The pids of the processes now in host k, its holder excepted.
  std::vector<pid_t> ProcessesIn(int host) const;

 private:
  using HeldNamespace = cluster_internal::HeldNamespace;

  explicit NamespaceCluster(Options options);
  Status Build(int hosts);
  Status WriteHostsFile(int hosts);
  Status WriteRshAgent();
  Status ConnectHosts();
  Status WaitForLinks(const std::vector<int>& hosts, bool up);
  StatusOr<RunResult> RunIn(const HeldNamespace& ns, const std::vector<std::string>& argv);
  Status RunIp(const HeldNamespace& ns, const std::vector<std::string>& args);
  Status CheckHost(int host) const;
  // SIGKILLs every process in `ns` until none is left; keeps their pidfds for the destructor to
  // reap (the caller may still waitpid() its own).
  Status Sweep(const HeldNamespace& ns);
  std::chrono::steady_clock::time_point StepDeadline() const;

  const Options options_;
  std::string dir_;
  std::unique_ptr<cluster_internal::ForkThread> forker_;
  std::unique_ptr<HeldNamespace> switch_;
  std::vector<HeldNamespace> hosts_;

  std::mutex mu_;
  std::vector<cluster_internal::Child> spawned_;    // guarded by mu_
  std::vector<cluster_internal::UniqueFd> killed_;  // pidfds; guarded by mu_
};

}  // namespace elastra::testing
