// CoordinatorStore: the rendezvous KeyValueStore served by the coordinator, reached through this
// worker's ControlClient. Gloo contexts and NCCL unique ids are built over it. Thread-safe.
#pragma once

#include "collectives/kv_store.h"
#include "common/control_client.h"

namespace elastra {

class CoordinatorStore : public KeyValueStore {
 public:
  explicit CoordinatorStore(ControlClient* client) : client_(client) {}

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  // Slack for the round trip on top of the coordinator-side timeout.
  static constexpr std::chrono::milliseconds kSlack{2000};
  ControlClient* client_;
};

}  // namespace elastra
