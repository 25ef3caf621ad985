// One Gloo call's transfers, and the set of waits a communicator can interrupt. Private to the
// Gloo backend (it includes gloo headers).
//
// Every transfer of the backend runs on a gloo::transport::UnboundBuffer that a Call creates and
// registers with its communicator's WaitSet. gloo's own waits on such a buffer can be woken from
// another thread (UnboundBuffer::abortWaitRecv/abortWaitSend), so WaitSet::Interrupt() breaks a
// blocked call without touching a socket; and every wait is bounded by the call's deadline, not a
// fresh timeout per wait. Buffers of other contexts (other communicators on the same gloo device)
// are never registered here, so interrupting one communicator cannot disturb another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

namespace elastra {

// Thrown by a Call's wait that WaitSet::Interrupt() woke.
struct CallInterrupted : std::runtime_error {
  CallInterrupted() : std::runtime_error("wait interrupted (communicator aborted or broken)") {}
};

// The unbound buffers of the calls in flight on one communicator. Thread-safe.
class WaitSet {
 public:
  // Wakes every wait on a registered buffer, and makes every later wait on a buffer registered
  // from now on return at once (CallInterrupted). Idempotent.
  void Interrupt();

  // How many Call waits are in progress: entered and not yet returned. A call blocked on a peer
  // counts 1. For tests, which use it to know that a call is blocked before they break it.
  int waits_in_flight() const;

 private:
  friend class Call;
  void Add(gloo::transport::UnboundBuffer* buf);
  void Remove(gloo::transport::UnboundBuffer* buf);
  void EnterWait();
  void LeaveWait();

  mutable std::mutex mu_;
  std::set<gloo::transport::UnboundBuffer*> buffers_;  // guarded by mu_
  bool interrupted_ = false;                           // guarded by mu_
  int waits_in_flight_ = 0;                            // guarded by mu_
};

// The buffers and waits of one call on one context. Not thread-safe: one thread drives a call.
// Waits throw CallInterrupted when the WaitSet was interrupted, and gloo::IoException when a
// pair failed or the deadline passed (gloo's own timeout, which also closes the context's pairs).
//
// A call that fails may leave transfers posted: gloo's device thread may still write a send's
// bytes from, or a receive's bytes into, the memory of its buffers. So a call left by an exception
// runs `on_failure` in its destructor, which must close the context's pairs (after which gloo
// touches none of their buffers), before the buffers and the call's scratch memory go; its
// caller must keep the memory it gave NewBuffer until the call is destroyed.
class Call {
 public:
  using Clock = std::chrono::steady_clock;

  Call(gloo::Context& context, WaitSet& waits, Clock::time_point deadline,
       std::function<void()> on_failure = {});
  ~Call();  // on_failure when unwinding; unregisters and destroys the call's buffers
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  int rank() const { return context_.rank; }
  int size() const { return context_.size; }
  Clock::time_point deadline() const { return deadline_; }

  // A buffer over `bytes` bytes at `ptr`, owned by the call and registered with its WaitSet.
  // `ptr` may be null when `bytes` is 0 (a message that carries only its arrival).
  gloo::transport::UnboundBuffer* NewBuffer(void* ptr, size_t bytes);

  // `bytes` bytes of scratch memory (uninitialized) that live as long as the call: transfers
  // into or out of it may outlive the algorithm that posted them when the call fails.
  char* Scratch(size_t bytes);

  // Wait until one posted recv (send) of `buf` completes, at most until the deadline.
  void WaitRecv(gloo::transport::UnboundBuffer* buf);
  void WaitSend(gloo::transport::UnboundBuffer* buf);

 private:
  // What is left of the deadline, rounded up, so that gloo's timeout never fires before it.
  std::chrono::milliseconds Remaining() const;
  void Wait(gloo::transport::UnboundBuffer* buf, bool recv);

  gloo::Context& context_;
  WaitSet& waits_;
  const Clock::time_point deadline_;
  const std::function<void()> on_failure_;
  const int uncaught_at_start_;
  // Destroyed after buffers_ (members go in reverse order).
  std::vector<std::unique_ptr<char[]>> scratch_;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers_;
};

}  // namespace elastra
