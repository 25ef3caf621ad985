// The machinery of the control-plane simulator (docs/scale.md): an event loop over simulated time,
// the network between the simulated processes and the coordinator, the cost meter, and the
// coordinator itself: the real CoordinatorCore with its real journal, fed and ticked the way
// CoordinatorServer feeds and ticks it, every DecodeEnvelope + Handle and every Tick timed on the
// thread CPU clock. What is modelled, not real: the network (latency, link bandwidth), ZeroMQ and
// CURVE (measured apart, curve_probe.h) and the journal's fdatasync latency (the journal is written
// for real; each sync it does adds a modelled latency to the coordinator's service time).
//
// Not thread-safe: a simulation runs on one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/env.h"
#include "common/clock.h"
#include "protocol/messages.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/options.h"
#include "elastra/status.h"

namespace elastra::scale {

// Simulated time in microseconds since the simulation began.
using SimTime = int64_t;
inline constexpr SimTime kMs = 1000;
inline constexpr SimTime kSec = 1000 * kMs;

// A frame as it travels: identical frames to many recipients share one buffer.
using Frame = std::shared_ptr<const std::string>;

// The message type in a frame's envelope header (the bytes after magic and version), without
// decoding the rest; kError for a frame too short to have one.
proto::MessageType FrameType(const std::string& frame);
// KvSet, KvGet, KvWait, KvAdd: the rendezvous key-value requests.
bool IsKvRequest(proto::MessageType type);

// How each call of the core (a Handle, a Tick, the journal replay) is timed (docs/scale.md, "How
// a call is timed").
enum class CallClock {
  // CLOCK_MONOTONIC, read in user space (the vDSO: about 25 ns). The simulation is one thread
  // alone on its core, so a call's wall time is its CPU time unless the thread lost the core
  // meanwhile: ScaleRun::on_cpu says which share of a run's wall time the thread ran.
  kMonotonic,
  // CLOCK_THREAD_CPUTIME_ID: a system call per reading. Where system calls are dear (1.2 us each
  // on the machine of docs/scale.md, whose kernel flushes the TLB on every one: page-table
  // isolation without PCID), the call timed after a reading pays a page walk for each page it
  // touches, a cost that grows with the working set and belongs to the timer.
  kThreadCpu,
};
// Chooses the call clock; before any SimCoordinator is made. kMonotonic unless set.
void SetCallClock(CallClock clock);
CallClock GetCallClock();
const char* CallClockName(CallClock clock);
// The call clock's reading, in nanoseconds.
int64_t CallClockNanos();
// What two back-to-back CallClockNanos() readings measure with nothing between them (the median
// of many): subtracted from every timed call.
int64_t CallClockOverheadNanos();
// Thread CPU time in nanoseconds (CLOCK_THREAD_CPUTIME_ID), whatever the call clock: for a whole
// run, to tell how much of its wall time the thread ran.
int64_t ThreadCpuNanos();

// ---------------------------------------------------------------------------------------------
// The event loop: callbacks run in time order (ties in the order scheduled).

class EventLoop {
 public:
  explicit EventLoop(uint64_t seed) : rng_(seed) {}
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  void At(SimTime t, std::function<void()> f);
  void After(SimTime delay, std::function<void()> f) { At(now_ + delay, std::move(f)); }
  SimTime now() const { return now_; }

  // Runs events until `done()` holds (checked after every event) or the next event lies after
  // `until` (then the time is `until`). Returns done().
  bool RunUntil(const std::function<bool()>& done, SimTime until);
  // Runs every event up to `until`.
  void RunFor(SimTime duration);

  // A uniform integer in [0, n) (0 when n <= 0).
  int64_t Uniform(int64_t n);
  std::mt19937_64& rng() { return rng_; }
  uint64_t events_run() const { return events_run_; }

 private:
  // The pending events: a 4-ary min-heap of 16-byte keys, by time and then the order scheduled,
  // each naming its callback's place in callbacks_ (where callbacks stay put). Four children share
  // a cache line, so taking the next event reads one line a level, log4 of the events pending.
  // The simulation shares its thread, and so its caches, with the core it measures: the lines it
  // reads between two messages are lines of the core's that the next message misses.
  struct Key {
    SimTime t;
    uint64_t order;  // (the order scheduled << kSlotBits) | the callback's slot
    bool operator<(const Key& o) const { return t != o.t ? t < o.t : order < o.order; }
  };
  static constexpr int kSlotBits = 24;  // events pending at once: 16.7 million at most
  static constexpr size_t kArity = 4;
  void SiftUp(size_t i);
  void SiftDown(size_t i);
  std::vector<Key> heap_;
  std::vector<std::function<void()>> callbacks_;
  std::vector<uint32_t> free_slots_;
  SimTime now_ = 0;
  uint64_t seq_ = 0;
  uint64_t events_run_ = 0;
  std::mt19937_64 rng_;
};

// ---------------------------------------------------------------------------------------------
// What is modelled.

struct NetworkModel {
  SimTime latency_us = 30;     // one way between any process and the coordinator (same fabric)
  SimTime jitter_us = 20;      // added uniformly in [0, jitter_us) to each message
  double worker_gbps = 100;    // a worker's or agent's link
  double coordinator_gbps = 25;  // the coordinator host's link, shared by everything it sends
                                 // (and, separately, everything it receives)
};

struct ServerModel {
  // Messages handled before deadlines are checked (Tick) again. 0: the loop drains its socket
  // first (it ticks only in a pass that finds nothing queued), so a backlog never expires the
  // heartbeats queued in it; 256: CoordinatorServer's kMaxBatch, with which a backlog longer than
  // the heartbeat timeout makes a Tick expire the workers whose heartbeats still wait in it.
  int batch = 0;
  SimTime tick_us = 10 * kMs;  // CoordinatorServer's kLoopPollMs
  double fsync_us = 100;       // modelled latency of one journal fdatasync
  // As CoordinatorServer: before a message is handled, the next ones already read (up to
  // CoordinatorCore::kLookAhead, of those that had arrived when the pass began) are decoded and
  // handed to CoordinatorCore::PrefetchAhead; that work is charged to the message handled.
  // False: each message is decoded and handled alone (--no-look-ahead, for comparison).
  bool look_ahead = true;
};

// ---------------------------------------------------------------------------------------------
// Costs, as the coordinator pays them.

struct TypeCost {
  uint64_t count = 0;
  double cpu_ms = 0;
  double max_ms = 0;
};

struct Cost {
  // Measured on the coordinator's thread: DecodeEnvelope + Handle of every message and every Tick,
  // the rendezvous' key-value requests excluded (below).
  double cpu_ms = 0;
  double tick_cpu_ms = 0;        // the part spent in Tick()
  double background_cpu_ms = 0;  // heartbeats, agent registrations, ticks that sent nothing
  uint64_t msgs_in = 0, msgs_out = 0, bytes_in = 0, bytes_out = 0;
  uint64_t background_msgs_in = 0, background_msgs_out = 0;
  uint64_t background_bytes_in = 0, background_bytes_out = 0;
  uint64_t fsyncs = 0;          // journal syncs (each adds ServerModel::fsync_us of service time)
  double busy_ms = 0;           // simulated time the coordinator's thread was busy (CPU + fsyncs)
  double longest_call_ms = 0;   // the longest single Handle or Tick
  std::string longest_call;     // what it handled
  uint64_t lost_in_restart = 0;  // messages that reached a dead coordinator
  // The rendezvous' key-value requests: measured as the sampled ranks sent them ...
  double kv_cpu_ms = 0;
  uint64_t kv_msgs_in = 0, kv_msgs_out = 0, kv_bytes_in = 0, kv_bytes_out = 0;
  // ... and scaled to every rank (each sampled request stands for `weight` like it).
  double kv_cpu_ms_all = 0;
  double kv_msgs_all = 0, kv_bytes_all = 0;
  // Control-plane messages by type handled (not the rendezvous').
  std::map<proto::MessageType, TypeCost> by_type;
  // The NewGeneration frames the core sent, and the part of cpu_ms that encoding them took: each
  // batch's frames are encoded again on the same thread and held together, as the core held them
  // (SimCoordinator::Emit). The rest of cpu_ms is the coordinator's own bookkeeping of the change.
  uint64_t new_generation_frames = 0, new_generation_bytes = 0;
  double new_generation_encode_ms = 0;

  // What the change itself costs: everything but the steady-state background.
  double change_cpu_ms() const { return cpu_ms - background_cpu_ms; }
  // ... less the encoding of its NewGeneration frames.
  double change_own_cpu_ms() const {
    return std::max(0.0, change_cpu_ms() - new_generation_encode_ms);
  }
  uint64_t change_bytes() const {
    return bytes_in + bytes_out - background_bytes_in - background_bytes_out;
  }
  uint64_t change_msgs() const {
    return msgs_in + msgs_out - background_msgs_in - background_msgs_out;
  }
};

// Where the coordinator's costs go: the row the scenario is measuring now.
class Meter {
 public:
  Cost* current() { return current_ != nullptr ? current_ : &scratch_; }
  void Measure(Cost* cost) { current_ = cost; }
  // From the handling of the next message whose answer contains a frame of `type`, costs go to
  // `cost` (the first generation starts inside the Handle of the last join). `on_switch` gets the
  // time that handling started.
  void SwitchOn(proto::MessageType type, Cost* cost, std::function<void(SimTime)> on_switch);
  // Forgets a SwitchOn that has not happened.
  void CancelSwitch() {
    switch_type_.reset();
    on_switch_ = nullptr;
  }
  // Called by the coordinator after a Handle, before its cost is booked.
  void BeforeBooking(const std::vector<coordinator::Outgoing>& out, SimTime started);

 private:
  Cost* current_ = nullptr;
  Cost scratch_;
  std::optional<proto::MessageType> switch_type_;
  Cost* switch_to_ = nullptr;
  std::function<void(SimTime)> on_switch_;
};

// ---------------------------------------------------------------------------------------------
// The journal's filesystem: the real one (Env::Default()), counting fdatasyncs.

class CountingEnv : public Env {
 public:
  explicit CountingEnv(Env* base) : base_(base) {}
  uint64_t syncs() const { return syncs_; }
  uint64_t appended_bytes() const { return appended_bytes_; }

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
      const std::string& path) override;
  Status TruncateFile(const std::string& path, uint64_t size) override;
  StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_->NewRandomAccessFile(path);
  }
  Status CreateDir(const std::string& path) override { return base_->CreateDir(path); }
  Status SyncDir(const std::string& path) override;
  Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  Status RemoveFile(const std::string& path) override { return base_->RemoveFile(path); }
  Status RemoveDir(const std::string& path) override { return base_->RemoveDir(path); }
  StatusOr<std::vector<std::string>> GetChildren(const std::string& dir) override {
    return base_->GetChildren(dir);
  }
  StatusOr<uint64_t> GetFileSize(const std::string& path) override {
    return base_->GetFileSize(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return base_->IsDirectory(path); }

 private:
  friend class CountingFile;
  Env* base_;
  uint64_t syncs_ = 0;
  uint64_t appended_bytes_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The coordinator host: the real CoordinatorCore behind a modelled network and server loop.
//
// Clients (workers, agents, the admin) connect and send frames; each frame reaches the
// coordinator after the link's latency, and waits its turn: the coordinator is one thread, busy
// for the measured CPU time of each call (plus the modelled fsyncs it did). Between batches it
// ticks every ServerModel::tick_us, as the server does. What the core answers leaves at the end of
// the call that produced it, through the coordinator's link, to the client's latest connection.

class SimCoordinator {
 public:
  // Receives a frame the coordinator sent to this client.
  using Receiver = std::function<void(const Frame&)>;

  SimCoordinator(EventLoop* loop, coordinator::CoordinatorOptions options, NetworkModel net,
                 ServerModel server, Meter* meter, CountingEnv* env);
  ~SimCoordinator();
  SimCoordinator(const SimCoordinator&) = delete;
  SimCoordinator& operator=(const SimCoordinator&) = delete;

  // A new client with the role its CURVE key would grant; returns its number.
  int Connect(proto::Role role, Receiver receiver);
  // Client `client` sends `frame`. `weight` > 1: the frame stands for `weight` frames like it (the
  // sampled rendezvous), its costs and its answer's are counted that many times in Cost::kv_*_all.
  void Send(int client, std::string frame, double weight = 1);

  // Builds the core (the first start, or a restart on the same state directory). The journal's
  // error when it cannot be opened. Its CPU time (the journal replay) is start_cpu_ms().
  Status Start();
  // The coordinator process dies: the core is destroyed, what it had not read is lost, and what
  // clients send meanwhile waits in their sockets until Restart().
  void Crash();
  // A new coordinator process starts at now + `delay`; each client reconnects within
  // `reconnect_us` and flushes what it queued.
  void Restart(SimTime delay, SimTime reconnect_us);

  bool up() const { return core_ != nullptr; }
  coordinator::CoordinatorCore& core() { return *core_; }
  double start_cpu_ms() const { return start_cpu_ms_; }
  uint64_t messages_handled() const { return messages_handled_; }

 private:
  struct Client {
    proto::Role role = proto::Role::kWorker;
    Receiver receiver;
    uint32_t connection = 0;   // current ROUTER identity number; 0: none yet
    uint64_t epoch = 0;        // coordinator incarnation it is connected to
    SimTime last_arrival = 0;  // keeps each direction of a connection in order
    SimTime last_delivery = 0;
    double pending_weight = 1;  // of its outstanding weighted request
    std::vector<std::pair<std::string, double>> queued;  // sent while the coordinator was down
  };
  struct Inbound {
    SimTime ready;  // through the coordinator's link, waiting to be read
    int client;
    uint64_t epoch;
    std::string frame;
    double weight;
    // Decoded ahead of its turn (ServerModel::look_ahead), else empty until it is handled.
    std::optional<StatusOr<proto::Envelope>> envelope;
  };

  void Transmit(int client, std::string frame, double weight);
  void Arrive(int client, uint64_t epoch, std::string frame, double weight);
  void Wake(SimTime at);
  void Loop(uint64_t wake);
  // One message: decode, Handle, book, send. Returns the service time it took. `ahead`: how many
  // of the messages queued after it the pass may read now (ServerModel::look_ahead).
  SimTime HandleOne(Inbound& m, SimTime at, size_t ahead);
  SimTime TickOnce(SimTime at);
  void SetClock(SimTime at);
  // Sends what a call answered, leaving at `at`. `weight` counts rendezvous replies.
  void Emit(std::vector<coordinator::Outgoing> out, SimTime at, bool kv, double weight,
            Cost* cost, bool background);
  // Books the CPU that encoding the NewGeneration frames of `out` took (Cost).
  void MeasureNewGenerationEncoding(const std::vector<coordinator::Outgoing>& out, Cost* cost);
  std::string IdentityOf(int client);
  int ClientOf(const std::string& identity) const;

  EventLoop* loop_;
  coordinator::CoordinatorOptions options_;
  NetworkModel net_;
  ServerModel server_;
  Meter* meter_;
  CountingEnv* env_;
  FakeClock clock_;
  SimTime clock_at_ = 0;  // the simulated time the FakeClock shows
  std::unique_ptr<coordinator::CoordinatorCore> core_;
  uint64_t epoch_ = 1;
  double start_cpu_ms_ = 0;
  int64_t cpu_overhead_ns_ = 0;

  std::vector<Client> clients_;
  std::vector<int> connection_owner_;  // by connection number
  std::deque<Inbound> inbox_;
  SimTime in_free_ = 0;     // the coordinator's inbound link is busy until then
  SimTime out_free_ = 0;    // and its outbound link
  SimTime busy_until_ = 0;  // the coordinator's thread
  SimTime last_tick_ = 0;
  uint64_t wake_ = 0;       // the scheduled Loop that counts; others are stale
  SimTime wake_at_ = -1;
  uint64_t messages_handled_ = 0;
};

}  // namespace elastra::scale
