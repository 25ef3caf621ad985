// An embedded coordinator: the one `elastra run`, `elastra coordinator` and the mpirun bootstrap
// start inside their own process. Makes the state directory (mode 0700) and the job's CURVE keys
// (server, admin, worker), starts a CoordinatorServer, and writes two files, both mode 0600
// (docs/hosts.md, "Keys and the join file"): <state_dir>/join.json, what agents and workers on
// every host join with (the advertised address, the job, the coordinator's public key and the
// worker key pair, nothing that grants admin), then <state_dir>/coordinator.json, what
// `elastra resize|status|drain --state-dir` and workers started with ELASTRA_STATE_DIR use (the
// same address, the admin and worker key pairs, the pid). Heartbeat and spawn timing come from ELASTRA_HEARTBEAT_MS,
// ELASTRA_HEARTBEAT_TIMEOUT_MS and ELASTRA_SPAWN_TIMEOUT_MS when set. The coordinator journals the
// job to <state_dir>/journal.bin (or to etcd: EmbeddedOptions::etcd) and keeps its key pair in
// <state_dir>/server.key (mode 0600), so that a restart (EmbeddedOptions::restart) takes the job
// back on the same address and keys.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "protocol/keys.h"
#include "coordinator/server.h"
#include "elastra/status.h"
#include "http/server.h"

namespace elastra::launch {

struct EmbeddedOptions {
  // Where coordinator.json and the keys go; created when missing.
  std::string state_dir = ".elastra";
  // The job's name.
  std::string job = "elastra";
  // ZeroMQ endpoint to bind; port 0 picks a free port.
  std::string bind = "tcp://127.0.0.1:0";
  // The address to publish in join.json and coordinator.json, what clients on other hosts connect
  // to: "tcp://HOST:PORT", "HOST:PORT" or "HOST" (with the bound port). Empty: the bound address;
  // for a wildcard bind (0.0.0.0 or *), the first non-loopback IPv4 address of this machine.
  std::string advertise;
  // The first generation forms when this many workers joined.
  int initial_workers = 1;
  // Upper bound on the workers of one generation (raised to initial_workers when lower).
  int max_workers = 64;
  // Standby workers kept beyond the layout (CoordinatorOptions::spares; docs/recovery.md).
  int spares = 0;
  // A checkpoint root to resume from (CoordinatorOptions::resume_from); empty: a fresh start.
  std::string resume_from;
  // Take back the job in state_dir after its coordinator died (docs/journal.md): reuse the
  // address, job name and keys of coordinator.json and server.key and replay journal.bin; job,
  // bind (the journaled bind host with the published port), the published address (unless
  // `advertise` is given), initial_workers and max_workers are then read from the state
  // directory, and both files are written again with the same keys. Without it a new job starts
  // and an old journal in state_dir is discarded.
  bool restart = false;
  // The HTTP API (docs/http.md): "HOST:PORT" or ":PORT" (loopback; port 0 picks one). Empty: off,
  // except on a restart, which serves it again where coordinator.json's "http" says. Its tokens
  // are <state_dir>/admin.token and read.token (0600), kept across restarts.
  std::string http;
  // The etcd cluster that keeps the job's journal instead of <state_dir>/journal.bin
  // (CoordinatorOptions::etcd, docs/ha.md): comma-separated client URLs; empty: the file. The
  // job's keys and published address are kept there too, at /elastra/JOB/coordinator, and a job
  // name that etcd holds a job of is taken over as a restart takes its job back (from etcd, with
  // the state directory's files written again, so a lost state directory loses nothing), with or
  // without `restart`; `restart` then only requires that etcd holds the job.
  std::string etcd;
  // The leadership this coordinator won for the job on etcd (CoordinatorOptions::etcd_fence_key
  // and etcd_fence_revision): every journal write, the takeover's and the start's included, is
  // fenced on it. Empty: unfenced.
  std::string etcd_fence_key;
  int64_t etcd_fence_revision = 0;
  // With a fence: what a journal write the fence refused calls (CoordinatorOptions::on_fenced).
  std::function<void(const Status&)> on_fenced;
  // With etcd: compact the journal every this many records (CoordinatorOptions::
  // journal_compact_records; docs/ha.md, "Compaction").
  uint64_t journal_compact_records = 1000;
};

struct EmbeddedCoordinator {
  std::unique_ptr<coordinator::CoordinatorServer> server;
  ConnectionInfo info;  // what coordinator.json holds (the advertised address, keys, pid)
  ConnectionInfo join;  // what join.json holds (no admin keys, no pid)
  std::unique_ptr<http::HttpServer> http;  // null without EmbeddedOptions::http; stops before `server`
  // Where the journal is: "file <state_dir>/journal.bin" or "etcd URLS /elastra/JOB/".
  std::string journal;
};

// kInvalidArgument when the state directory cannot be made or an option is out of range,
// kUnavailable when the address cannot be bound, kInternal when libzmq lacks CURVE or the file
// cannot be written.
StatusOr<EmbeddedCoordinator> StartEmbeddedCoordinator(const EmbeddedOptions& options);

// The address to publish for a coordinator bound at `bound` ("tcp://0.0.0.0:40123"), given
// EmbeddedOptions::advertise. kInvalidArgument when `bound` or `advertise` is not tcp://HOST:PORT
// (HOST:PORT or HOST for advertise). `first_ipv4` answers the wildcard case (tests pass their own).
StatusOr<std::string> AdvertisedAddress(const std::string& bound, const std::string& advertise,
                                        std::string (*first_ipv4)() = nullptr);
// The first IPv4 address of an up, non-loopback interface of this machine; "127.0.0.1" when there
// is none.
std::string FirstNonLoopbackIPv4();
// The endpoint a restart binds: `journaled_bind` (what the first start was asked to bind) with the
// port of `published` when that bind asked for any port (0); `published` itself when nothing was
// journaled (a journal from before the bind was recorded).
std::string RestartBindAddress(const std::string& journaled_bind, const std::string& published);

}  // namespace elastra::launch
