#include "protocol/control_client.h"

#include <zmq.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "common/logging.h"

namespace elastra {
namespace {

using SteadyClock = std::chrono::steady_clock;

thread_local uint64_t tls_last_request_id = 0;

// Replies kept for AwaitReply after their first waiter is gone; older ones are dropped.
constexpr size_t kMaxStoredReplies = 1024;
constexpr size_t kMaxQueuedPushes = 4096;

bool IsPush(proto::MessageType type) {
  switch (type) {
    case proto::MessageType::kPauseRequest:
    case proto::MessageType::kRecoverRequest:
    case proto::MessageType::kNewGeneration:
    case proto::MessageType::kSpawnRequest:
    case proto::MessageType::kShutdown:
      return true;
    default:
      return false;
  }
}

std::string ZmqError() { return zmq_strerror(zmq_errno()); }

Status StatusFromErrorReply(const proto::Envelope& e) {
  auto err = proto::DecodePayload<proto::ErrorReply>(e.payload);
  if (!err.ok()) return err.status().WithContext("unreadable error reply");
  int code = err->code;
  if (code <= 0 || code > static_cast<int>(StatusCode::kBusy)) {
    return InternalError("coordinator error (code " + std::to_string(code) + "): " + err->message);
  }
  return Status(static_cast<StatusCode>(code), err->message);
}

// Reads one monitor event (two frames: 6 bytes event+value, then the endpoint).
bool ReadMonitorEvent(void* monitor, uint16_t* event, int32_t* value) {
  zmq_msg_t msg;
  zmq_msg_init(&msg);
  if (zmq_msg_recv(&msg, monitor, 0) < 0) {
    zmq_msg_close(&msg);
    return false;
  }
  bool ok = zmq_msg_size(&msg) >= 6;
  if (ok) {
    const auto* data = static_cast<const uint8_t*>(zmq_msg_data(&msg));
    std::memcpy(event, data, 2);
    std::memcpy(value, data + 2, 4);
  }
  bool more = zmq_msg_more(&msg);
  zmq_msg_close(&msg);
  while (more) {
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, monitor, 0) < 0) {
      zmq_msg_close(&msg);
      return false;
    }
    more = zmq_msg_more(&msg);
    zmq_msg_close(&msg);
  }
  return ok;
}

}  // namespace

class ControlClient::Impl {
 public:
  explicit Impl(ControlClientOptions options) : options_(std::move(options)) {
    if (options_.clock == nullptr) options_.clock = SystemClock::Get();
  }

  ~Impl() { Close(); }

  Status Open() {
    ctx_ = zmq_ctx_new();
    if (ctx_ == nullptr) return InternalError("zmq_ctx_new: " + ZmqError());
    dealer_ = zmq_socket(ctx_, ZMQ_DEALER);
    if (dealer_ == nullptr) return InternalError("zmq_socket: " + ZmqError());
    int zero = 0;
    int64_t max_msg = static_cast<int64_t>(proto::kMaxFrameBytes) + 4096;
    zmq_setsockopt(dealer_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(dealer_, ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg));
    int reconnect_ms = 50;
    zmq_setsockopt(dealer_, ZMQ_RECONNECT_IVL, &reconnect_ms, sizeof(reconnect_ms));
    if (zmq_setsockopt(dealer_, ZMQ_CURVE_SERVERKEY, options_.server_public.data(), 40) != 0 ||
        zmq_setsockopt(dealer_, ZMQ_CURVE_PUBLICKEY, options_.client_keys.public_key.data(), 40) !=
            0 ||
        zmq_setsockopt(dealer_, ZMQ_CURVE_SECRETKEY, options_.client_keys.secret_key.data(), 40) !=
            0) {
      return InternalError("setting CURVE keys failed (libzmq built without CURVE?): " +
                           ZmqError());
    }
    const std::string monitor_ep =
        "inproc://elastra-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    if (zmq_socket_monitor(dealer_, monitor_ep.c_str(),
                           ZMQ_EVENT_HANDSHAKE_SUCCEEDED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                               ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0) {
      return InternalError("zmq_socket_monitor: " + ZmqError());
    }
    void* monitor = zmq_socket(ctx_, ZMQ_PAIR);
    zmq_setsockopt(monitor, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_connect(monitor, monitor_ep.c_str()) != 0) {
      zmq_close(monitor);
      return InternalError("connecting the socket monitor: " + ZmqError());
    }
    if (zmq_connect(dealer_, options_.address.c_str()) != 0) {
      zmq_close(monitor);
      return InvalidArgumentError("cannot connect to '" + options_.address + "': " + ZmqError());
    }
    Status result = WaitForHandshake(monitor);
    zmq_socket_monitor(dealer_, nullptr, 0);
    zmq_close(monitor);
    if (!result.ok()) return result;

    wake_recv_ = zmq_socket(ctx_, ZMQ_PAIR);
    wake_send_ = zmq_socket(ctx_, ZMQ_PAIR);
    const std::string wake_ep =
        "inproc://elastra-wake-" + std::to_string(reinterpret_cast<uintptr_t>(this));
    zmq_setsockopt(wake_recv_, ZMQ_LINGER, &zero, sizeof(zero));
    zmq_setsockopt(wake_send_, ZMQ_LINGER, &zero, sizeof(zero));
    if (zmq_bind(wake_recv_, wake_ep.c_str()) != 0 ||
        zmq_connect(wake_send_, wake_ep.c_str()) != 0) {
      return InternalError("wakeup socket: " + ZmqError());
    }
    io_thread_ = std::thread([this] { IoLoop(); });
    return OkStatus();
  }

  Status WaitForHandshake(void* monitor) {
    const auto deadline = SteadyClock::now() + options_.connect_timeout;
    int failures = 0;
    for (;;) {
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
      if (left.count() <= 0) break;
      zmq_pollitem_t item{monitor, 0, ZMQ_POLLIN, 0};
      int rc = zmq_poll(&item, 1, static_cast<long>(left.count()));
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        return InternalError("zmq_poll: " + ZmqError());
      }
      if (rc == 0) break;
      uint16_t event = 0;
      int32_t value = 0;
      if (!ReadMonitorEvent(monitor, &event, &value)) continue;
      if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) return OkStatus();
      if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
        return UnauthenticatedError(
            "the coordinator at " + options_.address +
            " refused this client's key (CURVE authentication failed, ZAP status " +
            std::to_string(value) + "); check --key / the state directory");
      }
      // A protocol failure or a failure without detail: most often the server's public key is
      // wrong (the server cannot decrypt our hello). It may also be a transient; give it a few
      // tries before deciding.
      if (++failures >= 3) {
        return UnauthenticatedError(
            "the coordinator at " + options_.address +
            " refused this client's key (CURVE handshake failed; wrong server public key?); "
            "check --key / the state directory");
      }
    }
    if (failures > 0) {
      return UnauthenticatedError("the coordinator at " + options_.address +
                                  " refused this client's key (CURVE handshake failed); check "
                                  "--key / the state directory");
    }
    return UnavailableError("no coordinator answered at " + options_.address + " within " +
                            std::to_string(options_.connect_timeout.count()) + " ms");
  }

  StatusOr<proto::Envelope> Request(proto::MessageType type, const std::string& payload,
                                    std::chrono::milliseconds timeout, uint64_t generation) {
    uint64_t id = next_request_id_.fetch_add(1);
    tls_last_request_id = id;
    {
      std::lock_guard<std::mutex> lock(mu_);
      awaited_[id]++;
    }
    Status s = Enqueue(type, payload, generation, id);
    if (!s.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (--awaited_[id] == 0) awaited_.erase(id);
      return s;
    }
    return Await(id, timeout, /*registered=*/true);
  }

  StatusOr<proto::Envelope> AwaitReply(uint64_t request_id, std::chrono::milliseconds timeout) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      awaited_[request_id]++;
    }
    return Await(request_id, timeout, true);
  }

  StatusOr<proto::Envelope> Await(uint64_t id, std::chrono::milliseconds timeout, bool) {
    std::unique_lock<std::mutex> lock(mu_);
    const auto deadline = SteadyClock::now() + timeout;
    bool got = cv_.wait_until(lock, deadline, [&] {
      return closed_ || (replies_.count(id) && !replies_[id].empty());
    });
    auto release = [&] {
      if (--awaited_[id] == 0) awaited_.erase(id);
    };
    if (!got || replies_.count(id) == 0 || replies_[id].empty()) {
      release();
      if (closed_) return UnavailableError("control client closed");
      return TimedOutError("no reply to request " + std::to_string(id) + " from " +
                           options_.address + " within " + std::to_string(timeout.count()) +
                           " ms");
    }
    proto::Envelope e = std::move(replies_[id].front());
    replies_[id].pop_front();
    if (replies_[id].empty()) replies_.erase(id);
    release();
    lock.unlock();
    if (e.type == proto::MessageType::kError) return StatusFromErrorReply(e);
    return e;
  }

  Status Enqueue(proto::MessageType type, const std::string& payload, uint64_t generation,
                 uint64_t request_id) {
    proto::Envelope e;
    e.type = type;
    e.job = options_.job;
    e.generation = generation;
    e.sender = options_.sender;
    e.request_id = request_id;
    e.payload = payload;
    std::string frame = proto::EncodeEnvelope(e);
    if (frame.size() > proto::kMaxFrameBytes) {
      return InvalidArgumentError("message of " + std::to_string(frame.size()) +
                                  " bytes exceeds the frame limit");
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || stopping_) return UnavailableError("control client closed");
    outgoing_.push_back(std::move(frame));
    // The wake socket is used under mu_ only, so it is never touched by two threads at once.
    zmq_send(wake_send_, "", 0, ZMQ_DONTWAIT);
    return OkStatus();
  }

  std::optional<proto::Envelope> PollPush(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !pushes_.empty() || closed_; });
    if (pushes_.empty()) return std::nullopt;
    proto::Envelope e = std::move(pushes_.front());
    pushes_.pop_front();
    return e;
  }

  void SetPushObserver(std::function<void(const proto::Envelope&)> observer) {
    std::lock_guard<std::mutex> lock(observer_mu_);
    observer_ = std::move(observer);
  }

  void SetHeartbeatStep(int64_t step) { heartbeat_step_.store(step); }
  void SetHeartbeatInterval(std::chrono::milliseconds interval) {
    if (interval.count() > 0 && heartbeat_ms_.load() > 0) heartbeat_ms_.store(interval.count());
  }
  void SetHeartbeatTraining(int64_t samples, std::vector<proto::TrainingMetric> metrics) {
    std::lock_guard<std::mutex> lock(mu_);
    heartbeat_samples_ = samples;
    heartbeat_metrics_ = std::move(metrics);
  }

  void SetLease(Duration duration) {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lease_.set_duration(duration);
  }

  bool Fenced() {
    std::lock_guard<std::mutex> lock(lease_mu_);
    return lease_.Fenced(options_.clock->Now());
  }

  void Unfence() {
    std::lock_guard<std::mutex> lock(lease_mu_);
    lease_.Unfence();
    fence_logged_ = false;
  }

  LeaseStatus lease() {
    std::lock_guard<std::mutex> lock(lease_mu_);
    const TimePoint now = options_.clock->Now();
    LeaseStatus out;
    out.armed = lease_.armed();
    out.duration = lease_.duration();
    out.fenced = lease_.Fenced(now);
    out.silence = std::chrono::duration_cast<Duration>(now - lease_.last_heard());
    out.acked_generation = acked_generation_;
    return out;
  }

  void Close() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_ && !io_thread_.joinable() && ctx_ == nullptr) return;
      stopping_ = true;
      if (wake_send_ != nullptr) zmq_send(wake_send_, "", 0, ZMQ_DONTWAIT);
    }
    if (io_thread_.joinable()) io_thread_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
    for (void** s : {&dealer_, &wake_send_, &wake_recv_}) {
      if (*s != nullptr) {
        zmq_close(*s);
        *s = nullptr;
      }
    }
    if (ctx_ != nullptr) {
      zmq_ctx_term(ctx_);
      ctx_ = nullptr;
    }
  }

 private:
  void IoLoop() {
    auto next_heartbeat = SteadyClock::now();
    for (;;) {
      std::deque<std::string> to_send;
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        to_send.swap(outgoing_);
        stopping = stopping_;
      }
      for (auto& frame : to_send) {
        if (zmq_send(dealer_, frame.data(), frame.size(), ZMQ_DONTWAIT) < 0) {
          LOG_EVERY_MS(WARNING, 1000) << "dropping a message to " << options_.address << ": "
                                      << ZmqError();
        }
      }
      if (stopping) {
        // Give the frames just handed over a brief chance to leave before the socket closes.
        int linger = 200;
        zmq_setsockopt(dealer_, ZMQ_LINGER, &linger, sizeof(linger));
        return;
      }
      const std::chrono::milliseconds heartbeat_interval(heartbeat_ms_.load());
      if (heartbeat_interval.count() > 0 && SteadyClock::now() >= next_heartbeat) {
        proto::Heartbeat hb;
        hb.step = heartbeat_step_.load();
        {
          std::lock_guard<std::mutex> lock(mu_);
          hb.samples = heartbeat_samples_;
          hb.metrics = heartbeat_metrics_;
        }
        std::string frame = proto::MakeFrame(proto::MessageType::kHeartbeat, hb, options_.job, 0,
                                             options_.sender, 0);
        zmq_send(dealer_, frame.data(), frame.size(), ZMQ_DONTWAIT);
        next_heartbeat = SteadyClock::now() + heartbeat_interval;
      }
      long wait_ms = 100;
      if (heartbeat_interval.count() > 0) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat -
                                                                          SteadyClock::now());
        wait_ms = std::max<long>(0, std::min<long>(wait_ms, left.count()));
      }
      zmq_pollitem_t items[2] = {{dealer_, 0, ZMQ_POLLIN, 0}, {wake_recv_, 0, ZMQ_POLLIN, 0}};
      int rc = zmq_poll(items, 2, wait_ms);
      if (rc < 0) {
        if (zmq_errno() == EINTR) continue;
        LOG(ERROR) << "control client poll failed: " << ZmqError();
        return;
      }
      if (items[1].revents & ZMQ_POLLIN) {
        char buf[8];
        while (zmq_recv(wake_recv_, buf, sizeof(buf), ZMQ_DONTWAIT) >= 0) {
        }
      }
      if (items[0].revents & ZMQ_POLLIN) DrainIncoming();
      LogFenceOnce();
    }
  }

  // Says once per fence that the lease ran out (the owner acts on Fenced() in its own time).
  void LogFenceOnce() {
    LeaseStatus status;
    {
      std::lock_guard<std::mutex> lock(lease_mu_);
      if (fence_logged_ || !lease_.Fenced(options_.clock->Now())) return;
      fence_logged_ = true;
    }
    status = lease();
    LOG(WARNING) << "the lease on the coordinator at " << options_.address
                 << " ran out: nothing heard for " << status.silence.count() << " ms (lease "
                 << status.duration.count() << " ms); fenced until it answers";
  }

  void DrainIncoming() {
    for (;;) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, dealer_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&msg);
        return;
      }
      bool more = zmq_msg_more(&msg);
      auto decoded = proto::DecodeEnvelope(
          std::string_view(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg)));
      zmq_msg_close(&msg);
      while (more) {  // the coordinator sends single frames; drop any extra
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, dealer_, 0) < 0) more = false;
        else more = zmq_msg_more(&msg);
        zmq_msg_close(&msg);
      }
      if (!decoded.ok()) {
        LOG_EVERY_MS(WARNING, 1000) << "dropping an unreadable frame from the coordinator: "
                                    << decoded.status();
        continue;
      }
      Deliver(std::move(decoded).value());
    }
  }

  void Deliver(proto::Envelope e) {
    const bool ack = e.type == proto::MessageType::kHeartbeatAck;
    {
      std::lock_guard<std::mutex> lock(lease_mu_);
      lease_.Heard(options_.clock->Now(), ack);
      if (ack) {
        auto decoded = proto::DecodePayload<proto::HeartbeatAck>(e.payload);
        if (decoded.ok()) acked_generation_ = std::max(acked_generation_, decoded->generation);
      }
    }
    if (ack) return;
    if (e.request_id == 0 && IsPush(e.type)) {
      {
        std::lock_guard<std::mutex> lock(observer_mu_);
        if (observer_) observer_(e);
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (pushes_.size() >= kMaxQueuedPushes) pushes_.pop_front();
      pushes_.push_back(std::move(e));
      cv_.notify_all();
      return;
    }
    if (e.request_id == 0) {
      // An error about a frame the coordinator could not read; nobody waits for it.
      if (e.type == proto::MessageType::kError) {
        LOG_EVERY_MS(WARNING, 1000) << "coordinator refused a message: "
                                    << StatusFromErrorReply(e);
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (e.request_id >= next_request_id_.load()) return;  // not one of ours
    uint64_t id = e.request_id;
    replies_[id].push_back(std::move(e));
    reply_order_.push_back(id);
    while (reply_order_.size() > kMaxStoredReplies) {
      uint64_t old = reply_order_.front();
      reply_order_.pop_front();
      auto it = replies_.find(old);
      if (it != replies_.end() && !awaited_.count(old)) {
        if (!it->second.empty()) it->second.pop_front();
        if (it->second.empty()) replies_.erase(it);
      }
    }
    cv_.notify_all();
  }

  ControlClientOptions options_;
  void* ctx_ = nullptr;
  void* dealer_ = nullptr;     // owned by io_thread_ once it runs
  void* wake_recv_ = nullptr;  // owned by io_thread_
  void* wake_send_ = nullptr;  // guarded by mu_
  std::thread io_thread_;
  std::atomic<uint64_t> next_request_id_{1};
  std::atomic<int64_t> heartbeat_step_{-1};
  std::atomic<int64_t> heartbeat_ms_{options_.heartbeat_interval.count()};  // 0: none
  int64_t heartbeat_samples_ = 0;                         // guarded by mu_
  std::vector<proto::TrainingMetric> heartbeat_metrics_;  // guarded by mu_

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool closed_ = false;
  std::deque<std::string> outgoing_;
  std::map<uint64_t, std::deque<proto::Envelope>> replies_;
  std::deque<uint64_t> reply_order_;
  std::map<uint64_t, int> awaited_;
  std::deque<proto::Envelope> pushes_;

  std::mutex observer_mu_;
  std::function<void(const proto::Envelope&)> observer_;

  std::mutex lease_mu_;  // guards the three below (I/O thread, owner, checkpoint writer)
  Lease lease_;
  uint64_t acked_generation_ = 0;
  bool fence_logged_ = false;
};

StatusOr<std::unique_ptr<ControlClient>> ControlClient::Connect(
    const ControlClientOptions& options) {
  if (options.address.empty()) return InvalidArgumentError("no coordinator address given");
  if (!IsValidZ85Key(options.server_public)) {
    return InvalidArgumentError("the coordinator's public key is not a 40-character Z85 key");
  }
  if (!IsValidZ85Key(options.client_keys.public_key) ||
      !IsValidZ85Key(options.client_keys.secret_key)) {
    return InvalidArgumentError("this client's key pair is not two 40-character Z85 keys");
  }
  if (options.job.size() > proto::kMaxNameBytes || options.sender.size() > proto::kMaxNameBytes) {
    return InvalidArgumentError("job name or sender id longer than " +
                                std::to_string(proto::kMaxNameBytes) + " bytes");
  }
  auto impl = std::make_unique<Impl>(options);
  Status s = impl->Open();
  if (!s.ok()) {
    impl->Close();
    return s;
  }
  return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
}

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlClient::~ControlClient() { Close(); }

StatusOr<proto::Envelope> ControlClient::Request(proto::MessageType type,
                                                 const std::string& payload,
                                                 std::chrono::milliseconds timeout,
                                                 uint64_t generation) {
  return impl_->Request(type, payload, timeout, generation);
}

StatusOr<proto::Envelope> ControlClient::AwaitReply(uint64_t request_id,
                                                    std::chrono::milliseconds timeout) {
  return impl_->AwaitReply(request_id, timeout);
}

uint64_t ControlClient::last_request_id() const { return tls_last_request_id; }

Status ControlClient::Send(proto::MessageType type, const std::string& payload,
                           uint64_t generation) {
  return impl_->Enqueue(type, payload, generation, 0);
}

std::optional<proto::Envelope> ControlClient::PollPush(std::chrono::milliseconds timeout) {
  return impl_->PollPush(timeout);
}

void ControlClient::SetPushObserver(std::function<void(const proto::Envelope&)> observer) {
  impl_->SetPushObserver(std::move(observer));
}

void ControlClient::SetHeartbeatStep(int64_t step) { impl_->SetHeartbeatStep(step); }
void ControlClient::SetHeartbeatInterval(std::chrono::milliseconds interval) {
  impl_->SetHeartbeatInterval(interval);
}
void ControlClient::SetHeartbeatTraining(int64_t samples,
                                         std::vector<proto::TrainingMetric> metrics) {
  impl_->SetHeartbeatTraining(samples, std::move(metrics));
}

void ControlClient::SetLease(Duration duration) { impl_->SetLease(duration); }
bool ControlClient::Fenced() { return impl_->Fenced(); }
void ControlClient::Unfence() { impl_->Unfence(); }
LeaseStatus ControlClient::lease() { return impl_->lease(); }

void ControlClient::Close() {
  if (impl_) impl_->Close();
}

}  // namespace elastra
