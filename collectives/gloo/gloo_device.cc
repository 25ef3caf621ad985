// The gloo tcp devices of this process (gloo_device.h).
#include "collectives/gloo/gloo_device.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include <gloo/transport/tcp/device.h>

#include "common/logging.h"

namespace elastra {
namespace {

// A gloo tcp device, its event loop thread running SCHED_BATCH (the thread that creates the device
// sets that policy on itself, and the loop thread inherits it).
//
// Why. That loop reads every pair's socket, and it busy-polls while a caller's thread holds a
// pair's mutex: it try_locks the pair and, failing, goes straight back to a level-triggered
// epoll_wait, which returns at once for the same unread bytes. A caller posts every send and
// receive under the pair's mutex with a write to the peer's socket; on one host that write wakes
// the peer's loop thread (a synchronous wakeup, which the scheduler may place on the writer's
// CPU), and a woken thread preempts the writer while it still holds the mutex. Loop threads then
// spun until the scheduler took them off (perf sched: two loop threads on both cores for 3.6 ms
// each): ~600 epoll_wait and 1.4 ms of CPU per 16-byte agreement at 4 processes on 2 cores, a
// median agreement of 4 ms, one time slice (gloo 0.0~git20220518 of Debian 12). A SCHED_BATCH
// thread never preempts the running thread when it wakes: it waits for it to block (a caller does
// right after posting) or to end its slice. Its weight is unchanged, so it gets the same CPU share
// under load. Raw Gloo's own allreduce suffers the same (figures in docs/collectives.md).
// When the policy cannot be set the device is made anyway, with a warning.
std::shared_ptr<gloo::transport::Device> CreateDevice(const std::string& hostname) {
  std::shared_ptr<gloo::transport::Device> device;
  std::exception_ptr error;
  auto make = [&] {
    try {
      gloo::transport::tcp::attr attr;
      attr.hostname = hostname;
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      error = std::current_exception();
    }
  };
  try {
    std::thread maker([&] {
      sched_param param{};  // priority 0, the only one SCHED_BATCH takes
      if (const int rc = pthread_setschedparam(pthread_self(), SCHED_BATCH, &param); rc != 0) {
        LOG(WARNING) << "gloo device on " << hostname
                     << ": its loop thread keeps the default policy (SCHED_BATCH: "
                     << std::strerror(rc) << ")";
      }
      make();
    });
    maker.join();
  } catch (const std::system_error& e) {
    LOG(WARNING) << "gloo device on " << hostname << ": made on the caller's thread (" << e.what()
                 << ")";
    make();
  }
  if (error) std::rethrow_exception(error);
  return device;
}

// One gloo tcp device per bind address, shared by every context of the process while any of them
// holds it. Each tcp::Device owns an epoll loop thread, and in this gloo that loop only "ticks"
// every 10 ms when idle: a device's destructor joins the thread (up to 10 ms), so a device per
// context made every reconfiguration pay device creation plus up to 10 ms per context destroyed
// (a 1-D layout has three contexts: the world and the size-1 pp and tp groups). Sharing is safe:
// in this gloo every pair listens on and connects its own sockets; the device only multiplexes
// them (PyTorch's ProcessGroupGloo shares devices the same way). Held weakly, so the device goes
// when the last communicator on it does (a worker keeps the old generation's communicators until
// the new ones are built, so a reconfiguration reuses the device).
struct SharedDevices {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<gloo::transport::Device>> by_host;
};

SharedDevices& Shared() {
  static auto* devices = new SharedDevices();
  return *devices;
}

std::shared_ptr<gloo::transport::Device> SharedDevice(const std::string& hostname) {
  SharedDevices& devices = Shared();
  std::lock_guard<std::mutex> lock(devices.mu);
  std::weak_ptr<gloo::transport::Device>& slot = devices.by_host[hostname];
  if (std::shared_ptr<gloo::transport::Device> device = slot.lock()) return device;
  std::shared_ptr<gloo::transport::Device> device = CreateDevice(hostname);
  slot = device;
  return device;
}

}  // namespace

std::shared_ptr<gloo::transport::Device> OwnOrSharedDevice(const GlooOptions& options) {
  if (!options.own_device) return SharedDevice(options.hostname);
  return CreateDevice(options.hostname);
}

StatusOr<std::shared_ptr<void>> HoldSharedGlooDevice(const std::string& hostname) {
  try {
    return std::static_pointer_cast<void>(SharedDevice(hostname));
  } catch (const std::exception& e) {
    return UnavailableError("gloo device on " + hostname + ": " + e.what());
  }
}

bool GlooSharedDeviceExists(const std::string& hostname) {
  SharedDevices& devices = Shared();
  std::lock_guard<std::mutex> lock(devices.mu);
  auto it = devices.by_host.find(hostname);
  return it != devices.by_host.end() && !it->second.expired();
}

}  // namespace elastra
