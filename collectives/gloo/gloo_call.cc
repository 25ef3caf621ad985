// WaitSet and Call: see gloo_call.h.
#include "collectives/gloo/gloo_call.h"

#include <algorithm>
#include <exception>

#include "common/logging.h"

namespace elastra {

void WaitSet::Interrupt() {
  std::lock_guard<std::mutex> lock(mu_);
  interrupted_ = true;
  // gloo keeps the abort as a flag on the buffer until a wait consumes it, so a call that has
  // registered a buffer but not yet entered its wait is broken too.
  for (gloo::transport::UnboundBuffer* buf : buffers_) {
    buf->abortWaitRecv();
    buf->abortWaitSend();
  }
}

int WaitSet::waits_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_in_flight_;
}

void WaitSet::Add(gloo::transport::UnboundBuffer* buf) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.insert(buf);
  if (interrupted_) {
    buf->abortWaitRecv();
    buf->abortWaitSend();
  }
}

void WaitSet::Remove(gloo::transport::UnboundBuffer* buf) {
  std::lock_guard<std::mutex> lock(mu_);
  buffers_.erase(buf);
}

void WaitSet::EnterWait() {
  std::lock_guard<std::mutex> lock(mu_);
  ++waits_in_flight_;
}

void WaitSet::LeaveWait() {
  std::lock_guard<std::mutex> lock(mu_);
  --waits_in_flight_;
}

Call::Call(gloo::Context& context, WaitSet& waits, Clock::time_point deadline,
           std::function<void()> on_failure)
    : context_(context),
      waits_(waits),
      deadline_(deadline),
      on_failure_(std::move(on_failure)),
      uncaught_at_start_(std::uncaught_exceptions()) {}

Call::~Call() {
  if (on_failure_ && !buffers_.empty() && std::uncaught_exceptions() > uncaught_at_start_) {
    try {
      on_failure_();
    } catch (const std::exception& e) {
      LOG(WARNING) << "gloo: closing the pairs of a failed call: " << e.what();
    } catch (...) {
      LOG(WARNING) << "gloo: closing the pairs of a failed call failed";
    }
  }
  for (const auto& buf : buffers_) waits_.Remove(buf.get());
}

char* Call::Scratch(size_t bytes) {
  scratch_.push_back(std::unique_ptr<char[]>(new char[std::max<size_t>(bytes, 1)]));
  return scratch_.back().get();
}

gloo::transport::UnboundBuffer* Call::NewBuffer(void* ptr, size_t bytes) {
  buffers_.push_back(context_.createUnboundBuffer(ptr, bytes));
  waits_.Add(buffers_.back().get());
  return buffers_.back().get();
}

std::chrono::milliseconds Call::Remaining() const {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline_ - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

void Call::WaitRecv(gloo::transport::UnboundBuffer* buf) { Wait(buf, true); }

void Call::WaitSend(gloo::transport::UnboundBuffer* buf) { Wait(buf, false); }

void Call::Wait(gloo::transport::UnboundBuffer* buf, bool recv) {
  waits_.EnterWait();
  bool completed = false;
  try {
    const std::chrono::milliseconds timeout = Remaining();
    completed = recv ? buf->waitRecv(nullptr, timeout) : buf->waitSend(nullptr, timeout);
  } catch (...) {
    waits_.LeaveWait();
    throw;
  }
  waits_.LeaveWait();
  if (!completed) throw CallInterrupted();
}

}  // namespace elastra
