#include "bench/scale/lone_heartbeats.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "bench/scale/sim.h"
#include "protocol/codec.h"
#include "common/logging.h"
#include "coordinator/coordinator_core.h"

namespace elastra::scale {
namespace {

using proto::MessageType;

constexpr char kJob[] = "scale";
constexpr int kHostSize = 8;

}  // namespace

double MeasureLoneHeartbeats(int workers, int heartbeats, int passes, uint64_t seed) {
  logging::SetSink([](logging::Severity, const std::string&) {});  // the joins' lines
  FakeClock clock;
  coordinator::CoordinatorOptions options;
  options.job = kJob;
  options.initial_workers = workers;
  options.max_workers = workers;
  options.clock = &clock;
  coordinator::CoordinatorCore core(options);
  std::vector<std::string> ids;
  for (int i = 0; i < workers; ++i) ids.push_back("w" + std::to_string(i));
  auto handle = [&core](const std::string& frame, const std::string& identity) {
    auto envelope = proto::DecodeEnvelope(frame);
    return envelope.ok() ? core.Handle(identity, proto::Role::kWorker, *envelope)
                         : core.HandleMalformed(identity, envelope.status());
  };
  for (int i = 0; i < workers; ++i) {
    proto::JoinRequest join{ids[i], "host-" + std::to_string(i / kHostSize), 0, 100 + i};
    handle(proto::MakeFrame(MessageType::kJoin, join, kJob, 0, ids[i], 0), "id-" + ids[i]);
  }
  for (const std::string& id : ids) {
    const proto::GenerationReady ready{1, 1, 1, 0};
    handle(proto::MakeFrame(MessageType::kGenerationReady, ready, kJob, 0, id, 0), "id-" + id);
  }
  if (core.generation() != 1 || core.state() != proto::JobState::kRunning) {
    logging::ResetSink();
    return -1;
  }
  std::mt19937_64 rng(seed);
  std::vector<std::string> frames, identities;
  for (int i = 0; i < heartbeats; ++i) {
    const std::string& id = ids[rng() % ids.size()];
    frames.push_back(
        proto::MakeFrame(MessageType::kHeartbeat, proto::Heartbeat{i}, kJob, 0, id, 0));
    identities.push_back("id-" + id);
  }
  const int64_t overhead = CallClockOverheadNanos();
  std::vector<double> us;
  for (int pass = 0; pass < passes; ++pass) {
    int64_t total = 0;
    for (int i = 0; i < heartbeats; ++i) {
      const int64_t t0 = CallClockNanos();
      std::vector<coordinator::Outgoing> out = handle(frames[i], identities[i]);
      const int64_t t1 = CallClockNanos();
      total += std::max<int64_t>(0, t1 - t0 - overhead);
    }
    us.push_back(static_cast<double>(total) / 1000 / heartbeats);
  }
  logging::ResetSink();
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace elastra::scale
