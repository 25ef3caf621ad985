#include "coordinator/server.h"

#include <zmq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "protocol/codec.h"
#include "protocol/keys.h"
#include "common/logging.h"
#include "coordinator/coordinator_core.h"

namespace elastra::coordinator {
namespace {

constexpr char kZapEndpoint[] = "inproc://zeromq.zap.01";
// How often the loop wakes to tick deadlines and notice Stop().
constexpr long kLoopPollMs = 10;
// How often the ZAP thread wakes to notice Stop() when nobody is connecting.
constexpr long kZapPollMs = 100;
// Messages handled per wakeup before deadlines are checked again.
constexpr int kMaxBatch = 256;
// How long Stop() lets messages already sent leave before the socket closes.
constexpr int kStopLingerMs = 1000;

bool Over(proto::JobState state) {
  return state == proto::JobState::kFinished || state == proto::JobState::kFailed;
}

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

// Receives every frame of one message (at most `max_frames` kept; the rest drained).
bool RecvMultipart(void* socket, std::vector<zmq_msg_t>* frames, size_t max_frames,
                   size_t* total_frames, int flags) {
  *total_frames = 0;
  bool more = true;
  bool first = true;
  while (more) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, socket, first ? flags : 0) < 0) {
      zmq_msg_close(&msg);
      return !first;
    }
    first = false;
    more = zmq_msg_more(&msg);
    ++*total_frames;
    if (frames->size() < max_frames) {
      frames->push_back(msg);
    } else {
      zmq_msg_close(&msg);
    }
  }
  return true;
}

void CloseAll(std::vector<zmq_msg_t>* frames) {
  for (auto& m : *frames) zmq_msg_close(&m);
  frames->clear();
}

std::string AsString(zmq_msg_t& msg) {
  return std::string(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
}

}  // namespace

class CoordinatorServer::Impl {
 public:
  explicit Impl(const CoordinatorOptions& options) : options_(options), core_(options) {
    workers_.insert(options.worker_public_keys.begin(), options.worker_public_keys.end());
    admins_.insert(options.admin_public_keys.begin(), options.admin_public_keys.end());
  }

  ~Impl() { Stop(); }

  Status Open() {
    ctx_ = zmq_ctx_new();
    if (ctx_ == nullptr) return InternalError("zmq_ctx_new: " + ZmqError());
    int zero = 0;
    // The ZAP handler must be bound before the ROUTER accepts anyone: without a handler, libzmq
    // lets every CURVE client in.
    zap_ = zmq_socket(ctx_, ZMQ_REP);
    zmq_setsockopt(zap_, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_bind(zap_, kZapEndpoint) != 0) return InternalError("ZAP bind: " + ZmqError());
    // Its own thread: a connecting client's CURVE handshake waits for the ZAP reply, and the loop
    // thread can be busy for seconds with one batch of messages (each checkpoint commit syncs
    // files; docs/hardening.md, "The two unexplained failures"), which made `elastra status` and
    // connecting workers give up with "no coordinator answered within 5000 ms".
    zap_thread_ = std::thread([this] { ZapLoop(); });

    router_ = zmq_socket(ctx_, ZMQ_ROUTER);
    int one = 1;
    int64_t max_msg = static_cast<int64_t>(proto::kMaxFrameBytes) + 4096;
    // What the ROUTER queues per peer, each way: a live worker or agent reads its pushes and
    // replies at once and waits for its own requests' replies, so a thousand is far more than any
    // needs; a peer that sends without reading (a flood) loses replies past it instead of growing
    // the coordinator's memory (docs/hardening.md, "Hostile clients").
    int hwm = 1000;
    zmq_setsockopt(router_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(router_, ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg));
    zmq_setsockopt(router_, ZMQ_SNDHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(router_, ZMQ_RCVHWM, &hwm, sizeof(hwm));
    zmq_setsockopt(router_, ZMQ_ROUTER_HANDOVER, &one, sizeof(one));
    if (zmq_setsockopt(router_, ZMQ_CURVE_SERVER, &one, sizeof(one)) != 0 ||
        zmq_setsockopt(router_, ZMQ_CURVE_SECRETKEY, options_.server_keys.secret_key.data(), 40) !=
            0) {
      return InternalError("enabling CURVE failed (libzmq built without CURVE?): " + ZmqError());
    }
    const char domain[] = "elastra";
    zmq_setsockopt(router_, ZMQ_ZAP_DOMAIN, domain, sizeof(domain) - 1);
    if (zmq_bind(router_, options_.bind_address.c_str()) != 0) {
      return UnavailableError("cannot bind the coordinator to " + options_.bind_address + ": " +
                              ZmqError());
    }
    char endpoint[1024];
    size_t len = sizeof(endpoint);
    if (zmq_getsockopt(router_, ZMQ_LAST_ENDPOINT, endpoint, &len) != 0) {
      return InternalError("ZMQ_LAST_ENDPOINT: " + ZmqError());
    }
    address_ = std::string(endpoint, strnlen(endpoint, len));
    thread_ = std::thread([this] { Loop(); });
    LOG(INFO) << "coordinator for job " << options_.job << " listening on " << address_;
    return OkStatus();
  }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    if (zap_thread_.joinable()) zap_thread_.join();
    if (router_ != nullptr) {
      // What the loop sent last (the job's Shutdowns) still leaves; zmq_ctx_term waits for it.
      int linger = kStopLingerMs;
      zmq_setsockopt(router_, ZMQ_LINGER, &linger, sizeof(linger));
      zmq_close(router_);
    }
    if (zap_ != nullptr) zmq_close(zap_);
    router_ = zap_ = nullptr;
    if (ctx_ != nullptr) zmq_ctx_term(ctx_);
    ctx_ = nullptr;
  }

  const std::string& address() const { return address_; }
  const std::string& public_key() const { return options_.server_keys.public_key; }

  template <class F>
  auto WithCore(F f) const {
    std::lock_guard<std::mutex> lock(mu_);
    return f(core_);
  }

  uint64_t rejected_keys() const { return rejected_keys_.load(); }

  bool done() const { return done_.load(); }
  bool WaitDone(std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> lock(done_mu_);
    return done_cv_.wait_for(lock, timeout, [this] { return done_.load(); });
  }

 private:
  void Loop() {
    auto last_tick = std::chrono::steady_clock::now();
    while (!stop_) {
      zmq_pollitem_t items[1] = {{router_, 0, ZMQ_POLLIN, 0}};
      int rc = zmq_poll(items, 1, kLoopPollMs);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        LOG(ERROR) << "coordinator poll failed: " << ZmqError();
        return;
      }
      if (items[0].revents & ZMQ_POLLIN) HandleBatch();
      auto now = std::chrono::steady_clock::now();
      if (now - last_tick >= std::chrono::milliseconds(kLoopPollMs)) {
        last_tick = now;
        std::vector<Outgoing> out;
        bool over = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          out = core_.Tick();
          over = Over(core_.state());
        }
        SendAll(out);
        if (over) MarkDone();
      }
    }
  }

  // The ZAP thread: answers every handshake's ZAP request as it comes, whatever the loop does. It
  // reads only the key sets, which never change after the constructor.
  void ZapLoop() {
    while (!stop_) {
      zmq_pollitem_t item{zap_, 0, ZMQ_POLLIN, 0};
      int rc = zmq_poll(&item, 1, kZapPollMs);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        LOG(ERROR) << "coordinator ZAP poll failed: " << ZmqError();
        return;
      }
      if (item.revents & ZMQ_POLLIN) HandleZap();
    }
  }

  // ZAP (RFC 27): admit listed keys only, and name the role in the User-Id.
  void HandleZap() {
    for (;;) {
      std::vector<zmq_msg_t> frames;
      size_t total = 0;
      if (!RecvMultipart(zap_, &frames, 8, &total, ZMQ_DONTWAIT)) return;
      std::string version = frames.size() > 0 ? AsString(frames[0]) : "";
      std::string request_id = frames.size() > 1 ? AsString(frames[1]) : "";
      std::string mechanism = frames.size() > 5 ? AsString(frames[5]) : "";
      std::string user_id;
      std::string status = "400";
      std::string text = "key not allowed";
      if (version == "1.0" && mechanism == "CURVE" && frames.size() >= 7 &&
          zmq_msg_size(&frames[6]) == 32) {
        char z85[41] = {0};
        zmq_z85_encode(z85, static_cast<const uint8_t*>(zmq_msg_data(&frames[6])), 32);
        std::string key(z85, 40);
        if (admins_.count(key)) {
          user_id = proto::ToString(proto::Role::kAdmin);
        } else if (workers_.count(key)) {
          user_id = proto::ToString(proto::Role::kWorker);
        }
        if (!user_id.empty()) {
          status = "200";
          text = "OK";
        }
      }
      CloseAll(&frames);
      if (status != "200") {
        ++rejected_keys_;
        LOG_EVERY_MS(WARNING, 1000) << "refused a client whose CURVE key is not listed";
      }
      const std::string reply[6] = {"1.0", request_id, status, text, user_id, ""};
      for (int i = 0; i < 6; ++i) {
        zmq_send(zap_, reply[i].data(), reply[i].size(), i < 5 ? ZMQ_SNDMORE : 0);
      }
    }
  }

  // One message read from the ROUTER socket, its frames released: the sender's identity, the
  // role its key was granted, and its envelope (or why there is none).
  struct Received {
    std::string identity;
    std::optional<StatusOr<proto::Envelope>> envelope;  // empty: not one frame after the identity
    size_t frames = 0;
    std::optional<proto::Role> role;
  };

  // Nullopt when nothing was waiting.
  std::optional<Received> Receive() {
    std::vector<zmq_msg_t> frames;
    size_t total = 0;
    if (!RecvMultipart(router_, &frames, 2, &total, ZMQ_DONTWAIT)) return std::nullopt;
    Received r;
    r.identity = AsString(frames[0]);
    r.frames = total;
    if (total == 2) {
      // The role the ZAP handler gave the client's key (ZAP carries it as the User-Id string).
      const char* user = zmq_msg_gets(&frames[1], "User-Id");
      if (user != nullptr && std::string_view(user) == proto::ToString(proto::Role::kAdmin)) {
        r.role = proto::Role::kAdmin;
      } else if (user != nullptr &&
                 std::string_view(user) == proto::ToString(proto::Role::kWorker)) {
        r.role = proto::Role::kWorker;
      }
      r.envelope.emplace(proto::DecodeEnvelope(std::string_view(
          static_cast<const char*>(zmq_msg_data(&frames[1])), zmq_msg_size(&frames[1]))));
    }
    CloseAll(&frames);
    return r;
  }

  // Up to kMaxBatch messages, each handled with the next ones already read and handed to
  // CoordinatorCore::PrefetchAhead: at 16,384 workers that overlaps the cache misses of a burst
  // of reports (docs/scale.md).
  void HandleBatch() {
    std::deque<Received> window;
    int read = 0;
    while (!stop_) {
      while (read < kMaxBatch && window.size() <= CoordinatorCore::kLookAhead) {
        std::optional<Received> r = Receive();
        if (!r) break;
        window.push_back(std::move(*r));
        ++read;
      }
      if (window.empty()) return;
      const proto::Envelope* next[CoordinatorCore::kLookAhead] = {};
      size_t ahead = 0;
      for (size_t k = 1; k < window.size() && ahead < CoordinatorCore::kLookAhead; ++k, ++ahead) {
        const Received& n = window[k];
        if (n.envelope && n.envelope->ok() && n.role) next[ahead] = &**n.envelope;
      }
      HandleOne(window.front(), std::span<const proto::Envelope* const>(next, ahead),
                /*more=*/window.size() > 1);
      window.pop_front();
    }
  }

  // `more`: messages wait behind this one (a checkpoint commit is then left for the tick).
  void HandleOne(const Received& m, std::span<const proto::Envelope* const> next, bool more) {
    std::vector<Outgoing> out;
    bool over = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!m.envelope) {
        // A DEALER of ours sends exactly one frame; anything else is not our protocol.
        out = core_.HandleMalformed(
            m.identity, CorruptError("expected one frame per message, got " +
                                         std::to_string(m.frames - 1)));
      } else if (!m.envelope->ok()) {
        out = core_.HandleMalformed(m.identity, m.envelope->status());
      } else if (!m.role) {
        out = core_.HandleMalformed(m.identity, UnauthenticatedError("the client has no role"));
      } else {
        core_.PrefetchAhead(next);
        core_.set_more_queued(more);
        out = core_.Handle(m.identity, *m.role, **m.envelope);
      }
      over = Over(core_.state());
    }
    SendAll(out);
    if (over) MarkDone();
  }

  // The messages that ended the job were handed to ZeroMQ: tell the owner.
  void MarkDone() {
    if (done_.load()) return;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done_ = true;
    }
    done_cv_.notify_all();
    LOG(INFO) << "job " << options_.job << " is over; every agent and standby worker was told";
  }

  void SendAll(const std::vector<Outgoing>& out) {
    for (const auto& o : out) {
      if (o.identity.empty()) continue;
      if (zmq_send(router_, o.identity.data(), o.identity.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT) <
          0) {
        continue;
      }
      zmq_send(router_, o.frame.data(), o.frame.size(), ZMQ_DONTWAIT);
    }
  }

  CoordinatorOptions options_;
  mutable std::mutex mu_;
  CoordinatorCore core_;  // guarded by mu_
  std::set<std::string> workers_;
  std::set<std::string> admins_;
  void* ctx_ = nullptr;
  void* router_ = nullptr;  // loop thread only
  void* zap_ = nullptr;     // ZAP thread only
  std::string address_;
  std::thread thread_;
  std::thread zap_thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> rejected_keys_{0};
  std::atomic<bool> done_{false};
  mutable std::mutex done_mu_;
  mutable std::condition_variable done_cv_;
};

StatusOr<std::unique_ptr<CoordinatorServer>> CoordinatorServer::Start(
    const CoordinatorOptions& options) {
  if (!IsValidZ85Key(options.server_keys.public_key) ||
      !IsValidZ85Key(options.server_keys.secret_key)) {
    return InvalidArgumentError("the coordinator's key pair is not two 40-character Z85 keys");
  }
  if (options.worker_public_keys.empty() && options.admin_public_keys.empty()) {
    return InvalidArgumentError("no worker or admin public key is allowed; nobody could connect");
  }
  for (const auto* list : {&options.worker_public_keys, &options.admin_public_keys}) {
    for (const auto& key : *list) {
      if (!IsValidZ85Key(key)) {
        return InvalidArgumentError("allowed key '" + key + "' is not a 40-character Z85 key");
      }
    }
  }
  if (options.initial_workers < 1 || options.initial_workers > options.max_workers) {
    return InvalidArgumentError("initial_workers must be in [1, max_workers]");
  }
  if (options.heartbeat_interval.count() <= 0 ||
      options.heartbeat_timeout <= options.heartbeat_interval) {
    return InvalidArgumentError("heartbeat_timeout must be longer than heartbeat_interval > 0");
  }
  auto impl = std::make_unique<Impl>(options);
  Status journal = impl->WithCore([](const CoordinatorCore& c) { return c.journal_status(); });
  if (!journal.ok()) return journal.WithContext("opening the coordinator's journal");
  Status s = impl->Open();
  if (!s.ok()) {
    impl->Stop();
    return s;
  }
  return std::unique_ptr<CoordinatorServer>(new CoordinatorServer(std::move(impl)));
}

CoordinatorServer::CoordinatorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CoordinatorServer::~CoordinatorServer() { Stop(); }
void CoordinatorServer::Stop() { impl_->Stop(); }
const std::string& CoordinatorServer::address() const { return impl_->address(); }
const std::string& CoordinatorServer::public_key() const { return impl_->public_key(); }
proto::JobStatus CoordinatorServer::Snapshot() const {
  return impl_->WithCore([](const CoordinatorCore& c) { return c.Snapshot(); });
}
proto::JobState CoordinatorServer::state() const {
  return impl_->WithCore([](const CoordinatorCore& c) { return c.state(); });
}
uint64_t CoordinatorServer::generation() const {
  return impl_->WithCore([](const CoordinatorCore& c) { return c.generation(); });
}
uint64_t CoordinatorServer::malformed_frames() const {
  return impl_->WithCore([](const CoordinatorCore& c) { return c.malformed_frames(); });
}
uint64_t CoordinatorServer::stale_messages() const {
  return impl_->WithCore([](const CoordinatorCore& c) { return c.stale_messages(); });
}
uint64_t CoordinatorServer::rejected_keys() const { return impl_->rejected_keys(); }
bool CoordinatorServer::done() const { return impl_->done(); }
bool CoordinatorServer::WaitDone(std::chrono::milliseconds timeout) const {
  return impl_->WaitDone(timeout);
}

}  // namespace elastra::coordinator
