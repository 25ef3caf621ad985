// CURVE key pairs, the coordinator's connection file (coordinator.json) and the join file
// (join.json) that agents and workers on other hosts join with.
// Keys are Z85 text (40 characters), as ZeroMQ's zmq_curve_keypair makes them.
#pragma once

#include <string>
#include <vector>

#include "elastra/status.h"

namespace elastra {

struct KeyPair {
  std::string public_key;  // Z85, 40 chars
  std::string secret_key;  // Z85, 40 chars
};

// A fresh CURVE key pair. Fails with kInternal when libzmq lacks CURVE.
StatusOr<KeyPair> GenerateKeyPair();

// True when `key` is 40 characters of Z85.
bool IsValidZ85Key(const std::string& key);

// Key files: a small JSON object {"public": "...", "secret": "..."} (secret optional), written
// with mode 0600. `elastra keygen` writes them.
Status WriteKeyFile(const std::string& path, const KeyPair& keys);
StatusOr<KeyPair> ReadKeyFile(const std::string& path);

// What a client needs to reach a coordinator; written by the coordinator's host to
// <state-dir>/coordinator.json with mode 0600.
struct ConnectionInfo {
  std::string address;         // "tcp://127.0.0.1:40123"
  std::string job;             // job name
  std::string server_public;   // the coordinator's CURVE public key
  KeyPair admin;               // admin credentials (may resize)
  KeyPair worker;              // worker credentials (local mode: shared by local workers)
  int64_t pid = 0;             // coordinator host process
};

Status WriteConnectionInfo(const std::string& path, const ConnectionInfo& info);
// kNotFound when the file is missing, kCorrupt when it does not parse or a key is malformed.
StatusOr<ConnectionInfo> ReadConnectionInfo(const std::string& path);

// What a worker or an agent needs to join a job (docs/hosts.md, "Keys and the join file"): written
// by the coordinator to <state-dir>/join.json with mode 0600 and copied to every host. It holds the
// worker key pair only: nothing in it grants the admin role.
struct JoinInfo {
  std::string address;        // the advertised endpoint, "tcp://10.0.0.5:40123"
  std::string job;            // job name
  std::string server_public;  // the coordinator's CURVE public key
  KeyPair worker;             // worker credentials (public and secret)
};

// kInvalidArgument when the address is empty or a key is malformed (a worker key without its
// secret included); kInternal when the file cannot be written.
Status WriteJoinInfo(const std::string& path, const JoinInfo& info);
// kNotFound when the file is missing, kCorrupt when it does not parse, a field is missing or a
// key is malformed (also when it holds admin credentials: that is a coordinator.json, not a join
// file).
StatusOr<JoinInfo> ReadJoinInfo(const std::string& path);

// Writes `contents` to `path` atomically (temporary file, fsync, rename) with the given mode.
Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode);

}  // namespace elastra
