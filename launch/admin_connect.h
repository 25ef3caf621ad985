// How an admin command (elastra status, resize, drain) reaches the job's coordinator over ZeroMQ:
// with the admin key pair of DIR/coordinator.json (--state-dir), or of the job's key on etcd and
// the address in its leader key (--etcd URLS --job NAME; docs/ha.md, "Finding the leader").
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "protocol/control_client.h"

namespace elastra::launch {

// Where the job is: `etcd` and `job` when given (--etcd), else `state_dir`.
struct AdminTarget {
  std::string state_dir;
  std::string etcd;  // --etcd URL[,URL...]: the job's leader, found on etcd (with --job)
  std::string job;   // --job NAME, with --etcd
};

// Connects as the job's admin within `timeout`. With --etcd it first waits, up to `timeout`, for a
// coordinator to lead the job (reading the leader key every 100 ms), and fails with "no
// coordinator leads job NAME on etcd URLS" past it; connecting gets what is left, at least 1 s or
// `timeout`. nullptr after printing why on stderr, as "elastra COMMAND: ...".
std::unique_ptr<ControlClient> ConnectAdmin(const std::string& command, const AdminTarget& where,
                                            std::chrono::milliseconds timeout);

}  // namespace elastra::launch
