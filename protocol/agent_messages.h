// Agent <-> coordinator messages (part of the wire protocol, messages.h): an agent's registration,
// the workers it is told to start, the exits it reports, and the order to shut down. Plain data;
// thread-compatible.
#pragma once

#include <cereal/cereal.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/vector.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/message_vocabulary.h"

namespace elastra::proto {

// Agent -> coordinator, at start and again every few seconds (and after a coordinator restart).
// One agent per host; its sender id names it.
struct AgentRegister {
  std::string host;         // the host's name (elastra agent --name; default gethostname())
  int32_t max_workers = 0;  // slots: how many workers this agent may run at once
  std::string address;      // where its workers bind their collectives (reachable by the others)
  int32_t gpus = 0;         // CUDA devices it hands its workers (0: CPU workers)
  template <class A> void serialize(A& ar) { ar(host, max_workers, address, gpus); }
};

struct SpawnRequest {
  std::vector<std::string> worker_ids;  // start one worker with each of these ids
  template <class A> void serialize(A& ar) { ar(worker_ids); }
};

struct ProcessExited {
  std::string worker_id;
  int32_t exit_code = 0;  // valid when signal == 0
  int32_t signal = 0;
  template <class A> void serialize(A& ar) { ar(worker_id, exit_code, signal); }
};

struct Shutdown {
  int32_t exit_code = 0;
  std::string reason;
  template <class A> void serialize(A& ar) { ar(exit_code, reason); }
};

}  // namespace elastra::proto
