// Blocking calls from Python: a call that may wait on peers or on the coordinator runs on a
// thread of its own while the Python thread waits with the GIL released, waking every 50 ms to
// run Python's signal handlers (PyErr_CheckSignals), so that Ctrl-C during a collective or a
// StepEnd() raises KeyboardInterrupt instead of waiting for the call to return.
//
// The call itself must not touch Python objects (it runs without the GIL) and must keep alive
// whatever it uses through its own captures: after an interrupt that cannot break it, it runs on,
// detached, and ends on its own. Needs the GIL; one call at a time per caller.
#pragma once

#include <functional>

namespace elastra::python {

// The name of the thread that runs a blocking call (as /proc/PID/task/TID/comm shows it).
inline constexpr char kCallThreadName[] = "elastra-call";

// What to do with a call still running when a signal handler raised.
enum class OnInterrupt {
  // `interrupt` broke the call (a communicator's Abort()): wait for it to return, then raise.
  kWaitAfterInterrupt,
  // The call cannot be broken (Worker::StepEnd): raise at once, leaving it to run to its end.
  kAbandon,
};

// Runs `call` as described above. Returns once it is done. When a signal handler raises meanwhile
// (KeyboardInterrupt), calls `interrupt` (may be empty), then waits or abandons the call as
// `on_interrupt` says and throws pybind11::error_already_set with that exception.
void RunBlocking(std::function<void()> call, const std::function<void()>& interrupt,
                 OnInterrupt on_interrupt);

}  // namespace elastra::python
