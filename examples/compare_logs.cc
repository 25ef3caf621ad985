// compare_logs RUN_LOG REFERENCE_LOG STEPS: checks a train_mlp run against its reference and
// prints one JSON line {"steps", "max_rel_loss_diff", "accounting_ok", "reapplied", "problem"}.
// Exit 0 when the accounting holds and the loss matches within --tolerance (default 1e-4).
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "examples/log_check.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: compare_logs RUN_LOG REFERENCE_LOG STEPS [TOLERANCE]\n");
    return 2;
  }
  double tolerance = argc > 4 ? std::atof(argv[4]) : 1e-4;
  auto run = elastra::examples::ReadTrainLog(argv[1]);
  auto ref = elastra::examples::ReadTrainLog(argv[2]);
  if (!run.ok() || !ref.ok()) {
    std::fprintf(stderr, "compare_logs: %s\n",
                 (!run.ok() ? run.status() : ref.status()).ToString().c_str());
    return 2;
  }
  auto c = elastra::examples::Compare(*run, *ref, std::atoll(argv[3]));
  nlohmann::ordered_json out;
  out["steps"] = c.steps;
  out["max_rel_loss_diff"] = c.max_rel_loss_diff;
  out["accounting_ok"] = c.accounting_ok;
  out["reapplied"] = run->reapplied;
  out["problem"] = c.problem;  // free text: escaped by the JSON library
  std::printf("%s\n", out.dump().c_str());
  return (c.accounting_ok && c.max_rel_loss_diff <= tolerance) ? 0 : 1;
}
