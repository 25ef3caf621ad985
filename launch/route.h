// Where an agent's workers bind their collectives when `elastra agent --address` is not given:
// the local address of the route to the coordinator, i.e. the source address the kernel picks
// for a connection there. A host with several interfaces thus uses the one that reaches the job
// (docs/hosts.md, "Agents"). Thread-safe (no shared state).
#pragma once

#include <string>

#include "elastra/status.h"

namespace elastra::launch {

// A ZeroMQ TCP endpoint to connect to, split: "tcp://10.0.0.5:5555" -> {"10.0.0.5", 5555},
// "tcp://[fd00::2]:5555" -> {"fd00::2", 5555}, "tcp://head-node:5555" -> {"head-node", 5555}.
struct TcpEndpoint {
  std::string host;  // a name or an IP literal, without brackets
  int port = 0;
};

// kInvalidArgument, naming the address, when it is not tcp://HOST:PORT with a port in 1..65535
// (another transport, a wildcard host such as "*", no port). Pure.
StatusOr<TcpEndpoint> ParseTcpEndpoint(const std::string& address);

// The local address of the route to `coordinator_address` (a tcp:// endpoint): a UDP socket
// connect()ed there (which sends nothing), then getsockname(). 127.0.0.1 for a coordinator on
// loopback. Reads the kernel's routing table and resolves names; sends no packet.
// kInvalidArgument for a malformed address (ParseTcpEndpoint), kUnavailable when the host name
// does not resolve or this host has no route to it.
StatusOr<std::string> LocalAddressFor(const std::string& coordinator_address);

}  // namespace elastra::launch
