// DeviceSlots: which GPU each worker of `elastra run --gpus N` gets (its ELASTRA_DEVICE): the
// lowest device that no live worker of this launcher uses; when all N are in use, the device the
// fewest live workers share (several workers on one GPU need NCCL_HOSTID per worker, see
// docs/gpu.md). A worker's device is free again when it exits. Header-only. Not thread-safe.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace elastra::launch {

class DeviceSlots {
 public:
  explicit DeviceSlots(int devices) : users_(std::max(devices, 1), 0) {}

  int devices() const { return static_cast<int>(users_.size()); }

  // The device for `worker_id` (the same one again while it holds it).
  int Acquire(const std::string& worker_id) {
    auto it = device_of_.find(worker_id);
    if (it != device_of_.end()) return it->second;
    const int device =
        static_cast<int>(std::min_element(users_.begin(), users_.end()) - users_.begin());
    ++users_[device];
    device_of_[worker_id] = device;
    return device;
  }

  // Frees the device of `worker_id`; unknown ids are ignored.
  void Release(const std::string& worker_id) {
    auto it = device_of_.find(worker_id);
    if (it == device_of_.end()) return;
    --users_[it->second];
    device_of_.erase(it);
  }

 private:
  std::vector<int> users_;                  // live workers per device
  std::map<std::string, int> device_of_;    // worker id -> device
};

}  // namespace elastra::launch
