// This machine's place on the network, for deciding where to listen: the local address of the
// route to a peer, the IPv4 addresses of the interfaces, and a bounded probe for the first of
// several addresses that accepts a TCP connection. A worker's default bind address
// (WorkerOptions::bind_host), the mpirun bootstrap across hosts and the agent's --address are
// all decided with these (docs/hosts.md). IPv4 only, as the rest of the job's addressing.
// Thread-safe: no state.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "elastra/status.h"

namespace elastra {

// "tcp://HOST:PORT", split.
struct TcpEndpoint {
  std::string host;
  int port = 0;
};

// kInvalidArgument unless `endpoint` is "tcp://HOST:PORT" with a port in [0, 65535]. ZeroMQ's
// "tcp://SOURCE;HOST:PORT" gives HOST (the peer).
StatusOr<TcpEndpoint> ParseTcpEndpoint(const std::string& endpoint);

// The first IPv4 address of `host` (a name or a dotted quad). kNotFound when it resolves to none.
StatusOr<std::string> ResolveIpv4(const std::string& host);

// The address the kernel would give a connection from this machine to `host` as its source: the
// local end of a UDP socket connect()ed there (no packet is sent). 127.0.0.1 for a host on the
// loopback network; the address of the interface the route leaves by otherwise. kNotFound when
// `host` does not resolve, kUnavailable when there is no route to it.
StatusOr<std::string> LocalAddressToward(const std::string& host);

// One IPv4 address of an interface of this machine.
struct Ipv4Interface {
  std::string name;     // "eth0"
  std::string address;  // dotted quad
  std::string netmask;  // dotted quad
};

// The addresses of this machine's interfaces that are up, loopback ones left out, in the order
// the kernel lists them (getifaddrs). Empty when there is none (or getifaddrs fails).
std::vector<Ipv4Interface> LocalIpv4Interfaces();

// True when `address` is one of `interfaces`.
bool IsOneOf(const std::string& address, const std::vector<Ipv4Interface>& interfaces);

// `candidates` (dotted quads) with those on the subnet of one of `interfaces` first, each group in
// its given order. An address that does not parse goes last.
std::vector<std::string> OrderBySubnet(const std::vector<std::string>& candidates,
                                       const std::vector<Ipv4Interface>& interfaces);

// Connects over TCP to `port` at each of `hosts` in order, giving each at most `timeout_each`, and
// returns the first host that accepted (the connection is closed again at once). kUnavailable
// naming every host and why it failed when none did; kInvalidArgument for an empty list.
StatusOr<std::string> FirstAccepting(const std::vector<std::string>& hosts, int port,
                                     std::chrono::milliseconds timeout_each);

}  // namespace elastra
