// The gloo tcp devices a process's communicators run on: one per bind address, shared, its loop
// thread at SCHED_BATCH (gloo_device.cc says why). Private to the Gloo backend (it includes gloo
// headers); HoldSharedGlooDevice and GlooSharedDeviceExists are public in gloo_communicator.h.
#pragma once

#include <memory>

#include <gloo/transport/device.h>

#include "collectives/gloo/gloo_communicator.h"

namespace elastra {

// The device the context of `options` connects on: the process's shared one for
// options.hostname, or with options.own_device a device of its own. Throws what gloo throws when
// it cannot make one (no such address).
std::shared_ptr<gloo::transport::Device> OwnOrSharedDevice(const GlooOptions& options);

}  // namespace elastra
