// CoordinatorStore: the rendezvous KeyValueStore served by the coordinator, reached through this
// worker's ControlClient. Gloo contexts and NCCL unique ids are built over it. Thread-safe.
#pragma once

#include <functional>

#include "collectives/kv_store.h"
#include "protocol/control_client.h"

namespace elastra {

class CoordinatorStore : public KeyValueStore {
 public:
  explicit CoordinatorStore(ControlClient* client) : client_(client) {}

  // Blocking Get/Wait poll the coordinator in short slices and give up with kAborted as soon as
  // `cancelled` returns true, so a worker building a generation that a failure already doomed
  // does not wait out the rendezvous timeout. Set before use; called from the caller's thread.
  void SetCancel(std::function<bool()> cancelled) { cancelled_ = std::move(cancelled); }

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;
  // One KvSetAndGet per slice (the sets travel with each: setting them again is harmless).
  StatusOr<std::vector<std::string>> SetAndGet(
      const std::vector<std::pair<std::string, std::string>>& sets,
      const std::vector<std::string>& gets, std::chrono::milliseconds timeout) override;

 private:
  // Slack for the round trip on top of the coordinator-side timeout.
  static constexpr std::chrono::milliseconds kSlack{2000};
  // One blocking request to the coordinator lasts at most this long.
  static constexpr std::chrono::milliseconds kSlice{200};
  ControlClient* client_;
  std::function<bool()> cancelled_;
};

}  // namespace elastra
