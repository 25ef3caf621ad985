// The Gloo backend: CPU collectives over TCP, one gloo context per generation (or group), built
// through a KeyValueStore under a per-generation key prefix. Not a full mesh: a rank connects at
// build only to the ranks r +- 2^k mod n (at most 2 ceil(log2 n), every partner of the
// collectives), and Send, Recv and Exchange connect any other pair they use on demand, both ends
// through the store (gloo_mesh.h). Allreduce of small buffers (the per-step agreement) is
// recursive doubling: ceil(log2 n) rounds.
//
// Thread-compatible; Abort() may be called from any thread at any time. Send, Recv and Exchange
// may run on several threads at once (the reshard's per-peer threads do); collectives may not.
// Timeouts: a call's timeout bounds the whole call, as Communicator says and NCCL does (each
// wait used to get the full timeout, so a ring allreduce could run for 2(n-1) timeouts).
// Failures: a lost peer or connection is kPeerLost, a passed deadline kTimedOut. After the first
// such error the communicator is broken: the other calls in flight are interrupted and return the
// same status, every later call returns it without touching the network, and once no call is left
// in it the communicator closes its connections, so peers blocked on this rank fail with kPeerLost
// at once instead of waiting out their own timeouts. Closing waits until no call is left (a pair
// that gloo closes on request carries no error, so a call still posting on it would trip a gloo
// invariant), and each close through gloo waits for a tick of its device loop: peers learn some
// 10 ms later than from the shutdown(2) this backend used to do on sockets it looked up in the
// process's fd table behind gloo's back.
// Abort(): marks the communicator aborted and wakes every wait in flight (gloo's abortWaitRecv/
// abortWaitSend) without touching a socket. A call blocked on another thread at that moment
// returns kAborted (within milliseconds); every later call returns kAborted; peers see kPeerLost
// as soon as the last call has left and the connections are closed. With no call in flight,
// Abort() closes them itself before returning (about one tick of the process's gloo device loop,
// up to 10 ms; never a wait on a peer). A call connecting a pair on demand is woken too (a store
// wait within 100 ms, a blocked connect at once); a peer waiting to connect a pair to an aborted
// rank that never got to publish its address waits out its own timeout.
// Only this communicator's own connections are closed: another communicator on the same device
// (the next generation) is untouched. Destroying the communicator after Abort() is safe while
// such a call is still unwinding: the destructor waits for it.
// Process-wide side effects: the first Create sets SIGPIPE to SIG_IGN if it was SIG_DFL (gloo
// writes without MSG_NOSIGNAL, so a dead peer would otherwise kill this process); the event loop
// thread of each gloo device (one per bind address, shared by the process's communicators) runs
// SCHED_BATCH, so that a loop thread woken by a message never preempts the thread that is
// posting on a pair (gloo's loop busy-polls while a pair's mutex is held; the caller's threads
// keep their policy).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "collectives/kv_store.h"
#include "elastra/communicator.h"

namespace elastra {

struct GlooOptions {
  KeyValueStore* store = nullptr;  // not owned; must outlive Create()
  std::string prefix;              // unique per generation and group, e.g. "g3/world/"
  int rank = 0;
  int size = 1;
  std::string hostname = "127.0.0.1";  // address to bind and advertise
  std::chrono::milliseconds timeout{5000};          // default per-call timeout
  std::chrono::milliseconds connect_timeout{30000}; // rendezvous and connecting the build pairs
  // false: every context of the process on `hostname` shares one gloo device (one I/O thread),
  // which saves a device per group and generation. true: a device of its own, for ranks that are
  // threads of one process (tests, benchmarks), so that each has its I/O thread as separate
  // processes do; one shared loop thread would otherwise carry every rank's receives.
  bool own_device = false;
  // ExchangeV between ranks on one host (the same `hostname` in the same network namespace)
  // through a Unix socket instead of TCP (stream_mesh.h). false: TCP for every peer.
  bool local_streams = true;
};

// ExchangeV() runs over sockets of the communicator's own (collectives/gloo/stream_mesh.h), not
// gloo's pairs: each transfer is gathered from and scattered into its segments by the kernel, with
// no staging copy; a rank connects only to the peers it exchanges with, both ends through the
// store (one key a rank), and the same broken/abort rules hold.

// Builds and connects the context. kTimedOut when peers do not show up within connect_timeout,
// kPeerLost when a connection or the store fails, kInvalidArgument for a bad rank/size/store or
// a non-positive timeout, kInternal when gloo breaks an invariant of its own. Every rank of one
// prefix must call it; a prefix must not be reused.
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooOptions& options);

// Makes (or finds) the gloo device that this process's communicators on `hostname` share (its
// I/O thread) and keeps it while the returned handle lives, so that the next
// CreateGlooCommunicator there finds it running: a standby worker holds one before it is needed
// (GroupManager::WarmUp). kUnavailable when gloo cannot make it (no such address).
StatusOr<std::shared_ptr<void>> HoldSharedGlooDevice(const std::string& hostname);

// Whether a shared gloo device for `hostname` exists now (held by a communicator or a handle).
bool GlooSharedDeviceExists(const std::string& hostname);

// For tests: how many waits the calls of `comm` are in now (entered and not yet returned; a call
// blocked on a peer is in one), so that a test knows a call is blocked before it breaks it,
// instead of sleeping and hoping. -1 when `comm` is not a Gloo communicator.
int GlooWaitsInFlightForTesting(const Communicator& comm);

// How many peers `comm` holds a connection to now (its build pairs plus those Send, Recv and
// Exchange connected since, plus ExchangeV's sockets); -1 when `comm` is not a Gloo
// communicator.
int GlooConnectedPairs(const Communicator& comm);

// Of ExchangeV's connections, those to peers on this host through a Unix socket; -1 when `comm`
// is not a Gloo communicator.
int GlooLocalStreams(const Communicator& comm);

}  // namespace elastra
