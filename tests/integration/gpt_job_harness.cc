#include "tests/integration/gpt_job_harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

namespace elastra::testing {

std::vector<std::string> GptArgs(int steps, int micro_batches) {
  return {"--steps",         std::to_string(steps),
          "--step-time-ms",  "10",
          "--global-batch",  "8",
          "--layers",        "2",
          "--hidden",        "32",
          "--heads",         "4",
          "--seq-len",       "32",
          "--micro-batches", std::to_string(micro_batches),
          "--commit-every",  "4"};
}

double DerivedTolerance(const std::string& dir, int steps) {
  std::vector<std::string> logs;
  for (int m : {1, 2, 4, 8}) {
    logs.push_back(dir + "/order_" + std::to_string(m) + ".jsonl");
    EXPECT_TRUE(RunReference(GptArgs(steps, m), logs.back()));
  }
  double d = 0;
  for (size_t i = 0; i < logs.size(); ++i) {
    for (size_t j = i + 1; j < logs.size(); ++j) {
      examples::LogMatch m = examples::MatchLogs(logs[i], logs[j], steps, 1.0);
      EXPECT_TRUE(m.status.ok()) << m.status;
      d = std::max(d, m.comparison.max_rel_loss_diff);
    }
  }
  const double tolerance = std::max(20 * d, 1e-6);
  std::printf("reduction-order difference over %d steps: %.3g; tolerance %.3g\n", steps, d,
              tolerance);
  ::testing::Test::RecordProperty("reduction_order_diff", std::to_string(d));
  return tolerance;
}

examples::TrainLog ExpectStoppedGptRunMatches(const Job& job,
                                              const std::vector<std::string>& args) {
  const int64_t steps = StepsApplied(job);
  EXPECT_GT(steps, 0);
  std::vector<std::string> ref_args = args;
  for (size_t i = 0; i + 1 < ref_args.size(); ++i) {
    if (ref_args[i] == "--steps") ref_args[i + 1] = std::to_string(steps);
  }
  const std::string ref = job.dir() + "/ref.jsonl";
  EXPECT_TRUE(RunReference(ref_args, ref));
  return ExpectLogMatches(job.log_path(), ref, static_cast<int>(steps),
                          DerivedTolerance(job.dir(), static_cast<int>(steps)));
}

}  // namespace elastra::testing
