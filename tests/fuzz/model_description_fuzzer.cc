// Fuzz target: the model description the planner lays out (planner/model_description), in
// both of its forms: the JSON file `elastra plan --model` reads, and the {"model": ..., "pins":
// ...} text a worker sends in its JoinRequest, which the coordinator's LayoutPolicy learns from
// and plans with. What parses is planned for a few worker counts on one or two hosts, so the cost
// model's arithmetic runs on every value the parser lets through.
//
// Input: byte 0: bit 0 selects the join form (else the file form); bits 1-4 + 1 workers; bit 5 puts
// them on two hosts. The rest is the JSON text.
#include <string>
#include <vector>

#include "protocol/messages.h"
#include "coordinator/layout_policy.h"
#include "planner/model_description.h"
#include "planner/planner.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  const uint8_t flags = in.Byte();
  const int workers = 1 + ((flags >> 1) & 15);
  std::vector<std::string> hosts;
  for (int w = 0; w < workers; ++w) hosts.push_back((flags & 32) && w >= workers / 2 ? "b" : "a");
  const std::string text(in.Rest());

  if (flags & 1) {
    coordinator::LayoutPolicy policy;
    proto::JoinRequest join;
    join.worker_id = "w0";
    join.model_json = text;
    policy.Learn(join);
    const Layout chosen = policy.Choose(hosts, Layout{});
    CHECK_EQ(chosen.world(), workers) << chosen.ToString();
    return 0;
  }
  auto model = ParseModelDescription(text);
  if (!model.ok()) return 0;
  (void)model->ParameterCount();
  auto plan =
      PlanLayout(*model, coordinator::HostIndices(hosts), PlannerPins{}, CurrentPlacement{});
  if (plan.ok()) {
    CHECK_LE(plan->best.layout.world(), workers);
    (void)LayoutScoreJson(plan->best);
  }
  return 0;
}
