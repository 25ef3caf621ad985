#include "bench/scale/sim.h"

#include <time.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "protocol/codec.h"
#include "common/logging.h"

namespace elastra::scale {

using coordinator::Outgoing;
using proto::MessageType;

proto::MessageType FrameType(const std::string& frame) {
  // EncodeEnvelope writes magic (u32), version (u16), type (u16), little-endian.
  if (frame.size() < 8) return MessageType::kError;
  uint16_t type = static_cast<uint8_t>(frame[6]) | (static_cast<uint8_t>(frame[7]) << 8);
  return static_cast<MessageType>(type);
}

bool IsKvRequest(proto::MessageType type) {
  return type == MessageType::kKvSet || type == MessageType::kKvGet ||
         type == MessageType::kKvWait || type == MessageType::kKvAdd ||
         type == MessageType::kKvSetAndGet;
}

namespace {

CallClock call_clock = CallClock::kMonotonic;

int64_t Nanos(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

void SetCallClock(CallClock clock) { call_clock = clock; }

CallClock GetCallClock() { return call_clock; }

const char* CallClockName(CallClock clock) {
  return clock == CallClock::kMonotonic ? "monotonic" : "thread_cpu";
}

int64_t ThreadCpuNanos() { return Nanos(CLOCK_THREAD_CPUTIME_ID); }

int64_t CallClockNanos() {
  return Nanos(call_clock == CallClock::kMonotonic ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID);
}

int64_t CallClockOverheadNanos() {
  static int64_t overhead[2] = {-1, -1};
  int64_t& o = overhead[call_clock == CallClock::kMonotonic ? 0 : 1];
  if (o < 0) {
    std::vector<int64_t> d;
    for (int i = 0; i < 4001; ++i) {
      const int64_t a = CallClockNanos();
      d.push_back(CallClockNanos() - a);
    }
    std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
    o = d[d.size() / 2];
  }
  return o;
}

namespace {

// Microseconds `bytes` take on a link of `gbps`.
SimTime LinkTime(size_t bytes, double gbps) {
  return static_cast<SimTime>(static_cast<double>(bytes) * 8 / (gbps * 1000));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// EventLoop

void EventLoop::At(SimTime t, std::function<void()> f) {
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    callbacks_[slot] = std::move(f);
  } else {
    if (callbacks_.size() >= (size_t{1} << kSlotBits)) {
      std::fprintf(stderr, "bench_scale: more than %zu simulated events pending at once\n",
                   size_t{1} << kSlotBits);
      std::abort();
    }
    slot = static_cast<uint32_t>(callbacks_.size());
    callbacks_.push_back(std::move(f));
  }
  heap_.push_back(Key{std::max(t, now_), (seq_++ << kSlotBits) | slot});
  SiftUp(heap_.size() - 1);
}

void EventLoop::SiftUp(size_t i) {
  const Key key = heap_[i];
  while (i > 0) {
    const size_t parent = (i - 1) / kArity;
    if (!(key < heap_[parent])) break;
    heap_[i] = heap_[parent];
    i = parent;
  }
  heap_[i] = key;
}

void EventLoop::SiftDown(size_t i) {
  const Key key = heap_[i];
  const size_t n = heap_.size();
  for (;;) {
    const size_t first = i * kArity + 1;
    if (first >= n) break;
    size_t least = first;
    for (size_t c = first + 1; c < std::min(first + kArity, n); ++c) {
      if (heap_[c] < heap_[least]) least = c;
    }
    if (!(heap_[least] < key)) break;
    heap_[i] = heap_[least];
    i = least;
  }
  heap_[i] = key;
}

bool EventLoop::RunUntil(const std::function<bool()>& done, SimTime until) {
  while (!done()) {
    if (heap_.empty() || heap_.front().t > until) {
      now_ = std::max(now_, until);
      return done();
    }
    const Key next = heap_.front();
    heap_.front() = heap_.back();
    heap_.pop_back();
    if (!heap_.empty()) SiftDown(0);
    const auto slot = static_cast<uint32_t>(next.order & ((uint64_t{1} << kSlotBits) - 1));
    std::function<void()> f = std::move(callbacks_[slot]);
    callbacks_[slot] = nullptr;
    free_slots_.push_back(slot);
    now_ = next.t;
    ++events_run_;
    f();
  }
  return true;
}

void EventLoop::RunFor(SimTime duration) {
  RunUntil([] { return false; }, now_ + duration);
}

int64_t EventLoop::Uniform(int64_t n) {
  if (n <= 0) return 0;
  return static_cast<int64_t>(rng_() % static_cast<uint64_t>(n));
}

// ---------------------------------------------------------------------------------------------
// Meter

void Meter::SwitchOn(proto::MessageType type, Cost* cost, std::function<void(SimTime)> on_switch) {
  switch_type_ = type;
  switch_to_ = cost;
  on_switch_ = std::move(on_switch);
}

void Meter::BeforeBooking(const std::vector<Outgoing>& out, SimTime started) {
  if (!switch_type_) return;
  for (const auto& o : out) {
    if (FrameType(o.frame) != *switch_type_) continue;
    current_ = switch_to_;
    switch_type_.reset();
    if (on_switch_) on_switch_(started);
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// CountingEnv

class CountingFile : public WritableFile {
 public:
  CountingFile(std::unique_ptr<WritableFile> base, CountingEnv* env)
      : base_(std::move(base)), env_(env) {}
  Status Append(std::span<const std::byte> data) override {
    env_->appended_bytes_ += data.size();
    return base_->Append(data);
  }
  Status Sync() override {
    ++env_->syncs_;
    return base_->Sync();
  }
  Status Close() override { return base_->Close(); }

 private:
  std::unique_ptr<WritableFile> base_;
  CountingEnv* env_;
};

StatusOr<std::unique_ptr<WritableFile>> CountingEnv::NewWritableFile(
    const std::string& path) {
  auto f = base_->NewWritableFile(path);
  if (!f.ok()) return f.status();
  return std::unique_ptr<WritableFile>(new CountingFile(std::move(f).value(), this));
}

StatusOr<std::unique_ptr<WritableFile>> CountingEnv::NewAppendableFile(
    const std::string& path) {
  auto f = base_->NewAppendableFile(path);
  if (!f.ok()) return f.status();
  return std::unique_ptr<WritableFile>(new CountingFile(std::move(f).value(), this));
}

Status CountingEnv::TruncateFile(const std::string& path, uint64_t size) {
  ++syncs_;  // ftruncate + fsync
  return base_->TruncateFile(path, size);
}

Status CountingEnv::SyncDir(const std::string& path) {
  ++syncs_;
  return base_->SyncDir(path);
}

// ---------------------------------------------------------------------------------------------
// SimCoordinator

SimCoordinator::SimCoordinator(EventLoop* loop, coordinator::CoordinatorOptions options,
                               NetworkModel net, ServerModel server, Meter* meter,
                               CountingEnv* env)
    : loop_(loop),
      options_(std::move(options)),
      net_(net),
      server_(server),
      meter_(meter),
      env_(env),
      cpu_overhead_ns_(CallClockOverheadNanos()) {
  options_.clock = &clock_;
  options_.env = env_;
}

SimCoordinator::~SimCoordinator() = default;

int SimCoordinator::Connect(proto::Role role, Receiver receiver) {
  Client c;
  c.role = role;
  c.receiver = std::move(receiver);
  clients_.push_back(std::move(c));
  return static_cast<int>(clients_.size()) - 1;
}

void SimCoordinator::Send(int client, std::string frame, double weight) {
  Client& c = clients_[client];
  if (!up() || !c.queued.empty()) {
    // The DEALER keeps it until it is connected again.
    c.queued.emplace_back(std::move(frame), weight);
    return;
  }
  Transmit(client, std::move(frame), weight);
}

void SimCoordinator::Transmit(int client, std::string frame, double weight) {
  Client& c = clients_[client];
  SimTime arrival = loop_->now() + net_.latency_us + loop_->Uniform(net_.jitter_us) +
                    LinkTime(frame.size(), net_.worker_gbps);
  arrival = std::max(arrival, c.last_arrival + 1);  // one connection delivers in order
  c.last_arrival = arrival;
  loop_->At(arrival, [this, client, epoch = epoch_, f = std::move(frame), weight]() mutable {
    Arrive(client, epoch, std::move(f), weight);
  });
}

void SimCoordinator::Arrive(int client, uint64_t epoch, std::string frame, double weight) {
  if (!up() || epoch != epoch_) {
    ++meter_->current()->lost_in_restart;  // read by nobody: the process that owned it died
    return;
  }
  const SimTime ready =
      std::max(loop_->now(), in_free_) + LinkTime(frame.size(), net_.coordinator_gbps);
  in_free_ = ready;
  inbox_.push_back(Inbound{ready, client, epoch, std::move(frame), weight});
  Wake(std::max(ready, busy_until_));
}

void SimCoordinator::Wake(SimTime at) {
  at = std::max(at, loop_->now());
  if (wake_at_ >= 0 && wake_at_ <= at) return;  // an earlier loop pass will look
  const uint64_t w = ++wake_;
  wake_at_ = at;
  loop_->At(at, [this, w] { Loop(w); });
}

void SimCoordinator::Loop(uint64_t wake) {
  if (wake != wake_) return;  // superseded by an earlier one
  wake_at_ = -1;
  if (!up()) return;
  const SimTime now = loop_->now();
  if (now < busy_until_) {
    Wake(busy_until_);
    return;
  }
  SimTime t = now;
  const bool drain = server_.batch <= 0;
  const bool backlog = !inbox_.empty() && inbox_.front().ready <= now;
  const int limit = drain ? INT_MAX : server_.batch;
  int handled = 0;
  while (up() && !inbox_.empty() && inbox_.front().ready <= now && handled < limit) {
    Inbound m = std::move(inbox_.front());
    inbox_.pop_front();
    // The messages after it that this pass reads too: arrived when it began, within its batch.
    size_t ahead = 0;
    if (server_.look_ahead) {
      const size_t most = std::min<size_t>(coordinator::CoordinatorCore::kLookAhead,
                                           static_cast<size_t>(limit - handled - 1));
      while (ahead < most && ahead < inbox_.size() && inbox_[ahead].ready <= now) ++ahead;
    }
    t += HandleOne(m, t, ahead);
    ++handled;
  }
  // Draining: what arrived while this batch was handled is read before deadlines are checked,
  // so the tick waits for a pass that starts with nothing queued.
  if (up() && t - last_tick_ >= server_.tick_us && !(drain && backlog)) {
    const SimTime started = t;
    t += TickOnce(t);
    last_tick_ = started;
  }
  busy_until_ = t;
  if (!up()) return;
  SimTime next = last_tick_ + server_.tick_us;
  if (!inbox_.empty()) next = std::min(next, inbox_.front().ready);
  Wake(std::max(next, t));
}

void SimCoordinator::SetClock(SimTime at) {
  if (at <= clock_at_) return;
  const int64_t from_ms = clock_at_ / kMs, to_ms = at / kMs;
  if (to_ms > from_ms) clock_.Advance(Duration(to_ms - from_ms));
  clock_at_ = at;
}

SimTime SimCoordinator::HandleOne(Inbound& m, SimTime at, size_t ahead) {
  SetClock(at);
  Client& c = clients_[m.client];
  const std::string identity = IdentityOf(m.client);
  const uint64_t syncs_before = env_->syncs();
  MessageType type = MessageType::kError;

  const int64_t cpu0 = CallClockNanos();
  std::vector<Outgoing> out;
  if (!m.envelope) m.envelope.emplace(proto::DecodeEnvelope(m.frame));
  const StatusOr<proto::Envelope>& envelope = *m.envelope;
  if (ahead > 0) {
    const proto::Envelope* next[coordinator::CoordinatorCore::kLookAhead] = {};
    for (size_t k = 0; k < ahead; ++k) {
      Inbound& n = inbox_[k];
      if (!n.envelope) n.envelope.emplace(proto::DecodeEnvelope(n.frame));
      if (n.envelope->ok()) next[k] = &**n.envelope;
    }
    core_->PrefetchAhead(std::span<const proto::Envelope* const>(next, ahead));
  }
  if (envelope.ok()) {
    type = envelope->type;
    out = core_->Handle(identity, c.role, *envelope);
  } else {
    out = core_->HandleMalformed(identity, envelope.status());
  }
  const int64_t cpu1 = CallClockNanos();

  ++messages_handled_;
  const double cpu_ms = static_cast<double>(std::max<int64_t>(0, cpu1 - cpu0 - cpu_overhead_ns_)) / 1e6;
  const uint64_t syncs = env_->syncs() - syncs_before;
  const SimTime service =
      static_cast<SimTime>(cpu_ms * 1000 + static_cast<double>(syncs) * server_.fsync_us);
  meter_->BeforeBooking(out, at);
  Cost* cost = meter_->current();
  cost->fsyncs += syncs;
  cost->busy_ms += static_cast<double>(service) / kMs;
  if (cpu_ms > cost->longest_call_ms) {
    cost->longest_call_ms = cpu_ms;
    cost->longest_call = proto::TypeName(type);
  }
  const bool kv = IsKvRequest(type);
  const bool background =
      type == MessageType::kHeartbeat || type == MessageType::kAgentRegister;
  if (kv) {
    c.pending_weight = m.weight;
    cost->kv_cpu_ms += cpu_ms;
    cost->kv_cpu_ms_all += cpu_ms * m.weight;
    ++cost->kv_msgs_in;
    cost->kv_bytes_in += m.frame.size();
    cost->kv_msgs_all += m.weight;
    cost->kv_bytes_all += static_cast<double>(m.frame.size()) * m.weight;
  } else {
    cost->cpu_ms += cpu_ms;
    ++cost->msgs_in;
    cost->bytes_in += m.frame.size();
    TypeCost& tc = cost->by_type[type];
    ++tc.count;
    tc.cpu_ms += cpu_ms;
    tc.max_ms = std::max(tc.max_ms, cpu_ms);
    if (background) {
      cost->background_cpu_ms += cpu_ms;
      ++cost->background_msgs_in;
      cost->background_bytes_in += m.frame.size();
    }
  }
  Emit(std::move(out), at + service, kv, m.weight, cost, background);
  return std::max<SimTime>(service, 1);
}

SimTime SimCoordinator::TickOnce(SimTime at) {
  SetClock(at);
  const uint64_t syncs_before = env_->syncs();
  const int64_t cpu0 = CallClockNanos();
  std::vector<Outgoing> out = core_->Tick();
  const int64_t cpu1 = CallClockNanos();
  const double cpu_ms = static_cast<double>(std::max<int64_t>(0, cpu1 - cpu0 - cpu_overhead_ns_)) / 1e6;
  const uint64_t syncs = env_->syncs() - syncs_before;
  const SimTime service =
      static_cast<SimTime>(cpu_ms * 1000 + static_cast<double>(syncs) * server_.fsync_us);
  Cost* cost = meter_->current();
  cost->cpu_ms += cpu_ms;
  cost->tick_cpu_ms += cpu_ms;
  // A tick that sent nothing only scanned deadlines; one that did started a change (workers
  // declared lost, a recovery, a generation built): that is the change's cost.
  if (out.empty()) cost->background_cpu_ms += cpu_ms;
  cost->fsyncs += syncs;
  cost->busy_ms += static_cast<double>(service) / kMs;
  if (cpu_ms > cost->longest_call_ms) {
    cost->longest_call_ms = cpu_ms;
    cost->longest_call = "Tick";
  }
  Emit(std::move(out), at + service, false, 1, cost, false);
  return std::max<SimTime>(service, 1);
}

void SimCoordinator::Emit(std::vector<Outgoing> out, SimTime at, bool kv, double weight,
                          Cost* cost, bool background) {
  MeasureNewGenerationEncoding(out, cost);
  Frame previous;
  for (auto& o : out) {
    const int client = ClientOf(o.identity);
    if (client < 0) continue;  // the ROUTER drops what it cannot route
    // NewGeneration goes out as one identical frame per member: share the buffer.
    Frame frame;
    if (previous && previous->size() == o.frame.size() && o.frame.size() > 1024 &&
        std::memcmp(previous->data(), o.frame.data(), o.frame.size()) == 0) {
      frame = previous;
    } else {
      frame = std::make_shared<const std::string>(std::move(o.frame));
      previous = frame;
    }
    Client& c = clients_[client];
    const size_t size = frame->size();
    const MessageType type = FrameType(*frame);
    const bool kv_reply = type == MessageType::kKvReply || type == MessageType::kKvValues ||
                          (type == MessageType::kError && c.pending_weight != 1);
    if (kv || kv_reply) {
      const double w = kv_reply ? c.pending_weight : weight;
      ++cost->kv_msgs_out;
      cost->kv_bytes_out += size;
      cost->kv_msgs_all += w;
      cost->kv_bytes_all += static_cast<double>(size) * w;
      if (kv_reply) c.pending_weight = 1;
    } else {
      ++cost->msgs_out;
      cost->bytes_out += size;
      if (background) {
        ++cost->background_msgs_out;
        cost->background_bytes_out += size;
      }
    }
    out_free_ = std::max(at, out_free_) + LinkTime(size, net_.coordinator_gbps);
    SimTime arrival = out_free_ + net_.latency_us + loop_->Uniform(net_.jitter_us) +
                      LinkTime(size, net_.worker_gbps);
    arrival = std::max(arrival, c.last_delivery + 1);
    c.last_delivery = arrival;
    loop_->At(arrival, [this, client, frame] { clients_[client].receiver(frame); });
  }
}

void SimCoordinator::MeasureNewGenerationEncoding(const std::vector<Outgoing>& out, Cost* cost) {
  // Every frame of the batch is encoded again and held until the batch is done, as the core held
  // them: the fresh memory a broadcast of N large frames takes (page faults, copies) is part of
  // its encoding cost. Past 2 GB in one batch, a sample of the frames is timed and scaled by bytes.
  constexpr uint64_t kHoldBytes = uint64_t{2} << 30;
  uint64_t bytes = 0, timed_bytes = 0;
  int64_t timed_ns = 0;
  std::vector<std::string> held;
  std::string shared, scratch;
  for (const auto& o : out) {
    if (FrameType(o.frame) != MessageType::kNewGeneration) continue;
    ++cost->new_generation_frames;
    bytes += o.frame.size();
    if (timed_bytes + o.frame.size() > kHoldBytes && timed_bytes > 0) continue;
    auto e = proto::DecodeEnvelope(o.frame);
    if (!e.ok()) continue;
    auto ng = proto::DecodePayload<proto::NewGeneration>(e->payload);
    if (!ng.ok()) continue;
    // As the core encodes them: the fields every recipient shares once, each one's own behind.
    const int64_t t0 = CallClockNanos();
    if (shared.empty()) shared = proto::EncodeShared(*ng);
    held.push_back(proto::MakeFrameShared(MessageType::kNewGeneration, shared, *ng, e->job,
                                          e->generation, e->sender, e->request_id,
                                          &scratch));
    timed_ns += std::max<int64_t>(0, CallClockNanos() - t0 - cpu_overhead_ns_);
    timed_bytes += held.back().size();
  }
  cost->new_generation_bytes += bytes;
  if (timed_bytes > 0) {
    cost->new_generation_encode_ms +=
        static_cast<double>(timed_ns) / 1e6 * static_cast<double>(bytes) / timed_bytes;
  }
}

std::string SimCoordinator::IdentityOf(int client) {
  Client& c = clients_[client];
  if (c.connection == 0 || c.epoch != epoch_) {
    connection_owner_.push_back(client);
    c.connection = static_cast<uint32_t>(connection_owner_.size());
    c.epoch = epoch_;
  }
  // A ROUTER's generated routing id: a zero byte and a 32-bit number.
  std::string id(5, '\0');
  for (int i = 0; i < 4; ++i) id[1 + i] = static_cast<char>((c.connection >> (8 * i)) & 0xFF);
  return id;
}

int SimCoordinator::ClientOf(const std::string& identity) const {
  if (identity.size() != 5 || identity[0] != '\0') return -1;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(identity[1 + i])) << (8 * i);
  if (n == 0 || n > connection_owner_.size()) return -1;
  return connection_owner_[n - 1];
}

Status SimCoordinator::Start() {
  SetClock(loop_->now());
  const uint64_t syncs_before = env_->syncs();
  const int64_t cpu0 = CallClockNanos();
  core_ = std::make_unique<coordinator::CoordinatorCore>(options_);
  const int64_t cpu1 = CallClockNanos();
  start_cpu_ms_ = static_cast<double>(cpu1 - cpu0) / 1e6;
  const uint64_t syncs = env_->syncs() - syncs_before;
  busy_until_ = loop_->now() + static_cast<SimTime>(start_cpu_ms_ * 1000 +
                                                    static_cast<double>(syncs) * server_.fsync_us);
  last_tick_ = busy_until_;
  Wake(busy_until_);
  return core_->journal_status();
}

void SimCoordinator::Crash() {
  core_.reset();
  ++epoch_;
  meter_->current()->lost_in_restart += inbox_.size();
  inbox_.clear();
  ++wake_;  // any scheduled loop pass is stale
  wake_at_ = -1;
  busy_until_ = loop_->now();
}

void SimCoordinator::Restart(SimTime delay, SimTime reconnect_us) {
  loop_->After(delay, [this, reconnect_us] {
    Status s = Start();
    if (!s.ok()) {
      LOG(ERROR) << "the restarted coordinator did not start: " << s;
      return;
    }
    for (size_t i = 0; i < clients_.size(); ++i) {
      if (clients_[i].queued.empty()) continue;
      const int client = static_cast<int>(i);
      loop_->After(loop_->Uniform(reconnect_us), [this, client] {
        auto queued = std::exchange(clients_[client].queued, {});
        for (auto& [frame, weight] : queued) Transmit(client, std::move(frame), weight);
      });
    }
  });
}

}  // namespace elastra::scale
