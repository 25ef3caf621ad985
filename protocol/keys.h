// CURVE key pairs and the coordinator's connection file (coordinator.json).
// Keys are Z85 text (40 characters), as ZeroMQ's zmq_curve_keypair makes them.
#pragma once

#include <string>
#include <string_view>
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
// The same from the file's text; `source` names it in errors. kCorrupt when malformed.
StatusOr<KeyPair> ParseKeyFile(std::string_view text, const std::string& source);

// What a client needs to reach a coordinator; written by the coordinator's host to
// <state-dir>/coordinator.json with mode 0600.
struct ConnectionInfo {
  std::string address;         // "tcp://127.0.0.1:40123"
  std::string job;             // job name
  std::string server_public;   // the coordinator's CURVE public key
  KeyPair admin;               // admin credentials (may resize)
  KeyPair worker;              // worker credentials (local mode: shared by local workers)
  int64_t pid = 0;             // coordinator host process
  std::string http;            // the HTTP API's URL ("http://127.0.0.1:8080"); empty: none
};

Status WriteConnectionInfo(const std::string& path, const ConnectionInfo& info);
// kNotFound when the file is missing, kCorrupt when it does not parse or a key is malformed.
StatusOr<ConnectionInfo> ReadConnectionInfo(const std::string& path);
// The same from the file's text; `source` names it in errors. kCorrupt when malformed.
StatusOr<ConnectionInfo> ParseConnectionInfo(std::string_view text, const std::string& source);

// The join file (<state-dir>/join.json, mode 0600): what an agent or worker on another host needs
// to join the job, and nothing that lets its holder resize it (docs/hosts.md): the address to
// reach the coordinator at, the job, the coordinator's public key and the worker key pair. The
// same JSON as coordinator.json without "admin" and "pid".
Status WriteJoinFile(const std::string& path, const ConnectionInfo& info);
// kNotFound when missing, kCorrupt when malformed or without a worker key pair. The admin key
// pair of the result is always empty, even when the file was a coordinator.json.
StatusOr<ConnectionInfo> ReadJoinFile(const std::string& path);
// The same from the file's text; `source` names it in errors.
StatusOr<ConnectionInfo> ParseJoinFile(std::string_view text, const std::string& source);

// Writes `contents` to `path` atomically (temporary file, fsync, rename) with the given mode.
Status WriteFileAtomically(const std::string& path, const std::string& contents, int mode);

}  // namespace elastra
