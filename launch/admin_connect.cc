#include "launch/admin_connect.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>

#include "launch/etcd_job.h"
#include "protocol/keys.h"

namespace elastra::launch {

using std::chrono::milliseconds;

namespace {

// With --etcd: the connection of the job's leader (ReadEtcdLeaderInfo), waiting up to `timeout`
// for one to lead; nullopt after printing why.
std::optional<ConnectionInfo> FindLeader(const std::string& command, const AdminTarget& flags,
                                         milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last;
  while (true) {
    auto info = ReadEtcdLeaderInfo(flags.etcd, flags.job);
    if (info.ok() && info->has_value()) return **info;
    if (!info.ok() && info.status().code() != StatusCode::kUnavailable) {
      std::fprintf(stderr, "elastra %s: reading job %s on etcd %s: %s\n", command.c_str(),
                   flags.job.c_str(), flags.etcd.c_str(), info.status().ToString().c_str());
      return std::nullopt;
    }
    if (!info.ok()) last = info.status();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::fprintf(stderr, "elastra %s: no coordinator leads job %s on etcd %s (waited %s ms)%s%s\n",
               command.c_str(), flags.job.c_str(), flags.etcd.c_str(),
               std::to_string(timeout.count()).c_str(), last.ok() ? "" : ": ",
               last.ok() ? "" : last.ToString().c_str());
  return std::nullopt;
}

}  // namespace

std::unique_ptr<ControlClient> ConnectAdmin(const std::string& command, const AdminTarget& flags,
                                            milliseconds timeout) {
  const auto start = std::chrono::steady_clock::now();
  std::optional<ConnectionInfo> info;
  if (!flags.etcd.empty()) {
    info = FindLeader(command, flags, timeout);
    if (!info) return nullptr;
  } else {
    auto read = ReadConnectionInfo(flags.state_dir + "/coordinator.json");
    if (!read.ok()) {
      std::fprintf(stderr, "elastra %s: no job found in %s: %s\n", command.c_str(),
                   flags.state_dir.c_str(), read.status().ToString().c_str());
      return nullptr;
    }
    info = std::move(read).value();
  }
  // With --etcd, what finding the leader left of `timeout`, at least 1 s (or `timeout`) to connect.
  const auto spent =
      std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
  const milliseconds connect_timeout =
      flags.etcd.empty() ? timeout
                         : std::max(timeout - spent, std::min(timeout, milliseconds(1000)));
  ControlClientOptions o;
  o.address = info->address;
  o.server_public = info->server_public;
  o.client_keys = info->admin;
  o.job = info->job;
  o.sender = "admin-" + std::to_string(getpid());
  o.connect_timeout = connect_timeout;
  auto client = ControlClient::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "elastra %s: %s\n", command.c_str(), client.status().ToString().c_str());
    return nullptr;
  }
  return std::move(client).value();
}

}  // namespace elastra::launch
