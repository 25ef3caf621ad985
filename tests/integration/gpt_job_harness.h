// What the train_gpt job tests share (gpt_job_test.cc, gpt_recovery_test.cc): the small model's
// flags and the check of a stopped run against `train_gpt --reference`, with a tolerance derived
// from float32 reduction order.
//
// The tolerance. A run differs from the reference only in the order of float32 sums (tp partial
// sums, dp gradient sums, micro-batch gradient accumulation) and, through them, in which way a
// few fp32 master weights round to bf16. The reference run at another micro-batch count changes
// exactly that (the same samples, the gradient accumulated in other groups), so the check
// measures that difference, d, the largest between the references at 1, 2, 4 and 8 micro-batches
// over the same steps, and allows 20 d (a resized run goes through more groupings than one
// reference does, but differences of the same kind), never less than 1e-6 (a d of 0 would mean
// the regrouping changed no bit). The sample accounting is exact.
#pragma once

#include <string>
#include <vector>

#include "examples/log_check.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {

// train_gpt's flags for a model small enough for 8 workers on 2 cores: 2 layers, hidden 32,
// 4 heads (tp up to 4, pp up to 2), a global batch of 8 windows of 32 bytes.
std::vector<std::string> GptArgs(int steps, int micro_batches = 2);

// The loss difference that float32 reduction order alone makes over `steps` steps of
// GptArgs(steps, m), and the tolerance derived from it (see the top of the file). The reference
// logs go to `dir`; gtest expectations on the reference runs.
double DerivedTolerance(const std::string& dir, int steps);

// For a job ended by StopTraining(): checks its log against `train_gpt --reference` with `args`
// (--steps replaced by the steps the job applied) within DerivedTolerance (gtest expectations).
// Returns the run's log.
examples::TrainLog ExpectStoppedGptRunMatches(const Job& job, const std::vector<std::string>& args);

}  // namespace elastra::testing
