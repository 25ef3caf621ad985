// Fuzz target: the coordinator as its clients reach it. A sequence of frames from up to eight
// clients (each a ROUTER identity with a worker or admin key) goes into a CoordinatorCore, as the
// server hands them over: decoded envelopes to Handle(), malformed ones to HandleMalformed(), with
// Tick() after each and a fake clock stepped in between. Every payload type is decoded where the
// coordinator decodes it (its managers), and what it does with the values (layouts, tensor
// specs, model descriptions, checkpoint descriptors, resizes, drains) runs too. The journal and
// the checkpoint commits go to an in-memory filesystem; optionally a second core takes the job
// back from that journal at the end (a restart). Every frame the coordinator sends must decode.
//
// Input: byte 0: bit 0 keeps a journal, bit 1 restarts at the end, bits 2-3 + 1 the workers the
// first generation waits for. Then records: a flags byte (bits 0-2 the client, bit 3 an admin
// key, bits 4-7 x 100 ms of time passing first), a 16-bit little-endian length, the frame.
#include <memory>
#include <string>
#include <vector>

#include "protocol/codec.h"
#include "coordinator/coordinator_core.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/memory_env.h"
#include "tests/fuzz/payloads.h"

namespace elastra::fuzz {
namespace {

// Every frame the coordinator sends decodes, payload included.
void CheckSent(const std::vector<coordinator::Outgoing>& out) {
  for (const auto& o : out) {
    auto e = proto::DecodeEnvelope(o.frame);
    CHECK(e.ok()) << "the coordinator sent a frame that does not decode: " << e.status();
    CHECK(DecodePayloadOf(e->type, e->payload))
        << "the coordinator sent a " << proto::TypeName(e->type)
        << " whose payload does not decode";
  }
}

}  // namespace
}  // namespace elastra::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  const uint8_t setup = in.Byte();
  fuzz::MemoryEnv env;
  FakeClock clock;
  coordinator::CoordinatorOptions options;
  options.job = "job";
  options.initial_workers = 1 + ((setup >> 2) & 3);
  options.max_workers = 8;
  options.spawn_timeout = Duration(3000);
  options.clock = &clock;
  options.env = &env;
  if (setup & 1) options.state_dir = "/state";
  {
    coordinator::CoordinatorCore core(options);
    if (!core.journal_status().ok()) return 0;
    while (!in.empty()) {
      const uint8_t flags = in.Byte();
      const std::string identity = "client-" + std::to_string(flags & 7);
      const proto::Role role = (flags & 8) ? proto::Role::kAdmin : proto::Role::kWorker;
      clock.Advance(Duration(100 * (flags >> 4)));
      const std::string_view frame = in.Bytes(in.U16());
      auto envelope = proto::DecodeEnvelope(frame);
      fuzz::CheckSent(envelope.ok() ? core.Handle(identity, role, *envelope)
                                    : core.HandleMalformed(identity, envelope.status()));
      fuzz::CheckSent(core.Tick());
      (void)core.Snapshot();
    }
  }
  if ((setup & 3) == 3) {
    // A coordinator started again on the same state directory takes the job back.
    coordinator::CoordinatorCore restarted(options);
    if (restarted.journal_status().ok()) {
      clock.Advance(Duration(2000));
      fuzz::CheckSent(restarted.Tick());
      (void)restarted.Snapshot();
    }
  }
  return 0;
}
