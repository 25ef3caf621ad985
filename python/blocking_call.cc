#include "python/blocking_call.h"

#include <pthread.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

namespace py = pybind11;

namespace elastra::python {
namespace {

// Signal handlers run within 50 ms of a Ctrl-C; waking more often costs the waiting thread CPU
// for nothing (a collective's own timeout is seconds).
constexpr std::chrono::milliseconds kSignalSlice{50};

// Shared by the caller and the call's thread, which may outlive the caller after kAbandon.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

}  // namespace

void RunBlocking(std::function<void()> call, const std::function<void()>& interrupt,
                 OnInterrupt on_interrupt) {
  auto pending = std::make_shared<Pending>();
  std::thread thread([pending, call = std::move(call)] {
    // Named, so that a stack dump (gdb, py-spy) or /proc/PID/task shows a call in flight.
    pthread_setname_np(pthread_self(), kCallThreadName);
    call();
    {
      std::lock_guard<std::mutex> lock(pending->mu);
      pending->done = true;
    }
    pending->cv.notify_all();
  });
  for (;;) {
    bool done = false;
    {
      py::gil_scoped_release release;
      std::unique_lock<std::mutex> lock(pending->mu);
      done = pending->cv.wait_for(lock, kSignalSlice, [&pending] { return pending->done; });
    }
    if (done) {
      thread.join();
      return;
    }
    // Python's handlers run only here, on the main thread; elsewhere this returns 0.
    if (PyErr_CheckSignals() != 0) {
      py::error_already_set raised;  // takes the exception the handler set
      if (interrupt) interrupt();
      if (on_interrupt == OnInterrupt::kWaitAfterInterrupt) {
        py::gil_scoped_release release;
        thread.join();
      } else {
        thread.detach();
      }
      throw raised;
    }
  }
}

}  // namespace elastra::python
