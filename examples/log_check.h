// Reading train_mlp's --log files and checking a run against its --reference: the same loss at
// every applied step, and exact sample accounting (each sample position applied exactly once).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "elastra/status.h"

namespace elastra::examples {

struct StepRecord {
  int64_t step = 0;
  uint64_t generation = 0;
  int dp = 1, pp = 1, tp = 1;
  double loss = 0;
  int64_t sample_begin = 0;
  int64_t sample_end = 0;
};

struct TrainLog {
  // The applied steps: for each step, its last record in the file (a step undone by a rollback is
  // logged again when re-applied).
  std::map<int64_t, StepRecord> applied;
  int64_t records = 0;       // lines read
  int64_t reapplied = 0;     // records that replaced an earlier record of the same step
  int64_t unreadable = 0;    // lines that did not parse (a writer killed mid-line)
};

StatusOr<TrainLog> ReadTrainLog(const std::string& path);

struct Comparison {
  int64_t steps = 0;              // steps compared
  double max_rel_loss_diff = 0;   // max |a-b| / max(|b|, 1e-12)
  bool accounting_ok = false;     // steps 0..n-1 all present; samples contiguous, none twice
  std::string problem;            // first problem found, empty when all is well
};

// Compares `run` against `reference` over steps [0, expected_steps).
Comparison Compare(const TrainLog& run, const TrainLog& reference, int64_t expected_steps);

struct LogMatch {
  // OK when both logs were read, the accounting holds over all `steps` steps and the loss is
  // within the tolerance; otherwise the reason (the read error, or every check that failed).
  Status status;
  TrainLog run;  // the run's log (empty when it could not be read)
  Comparison comparison;
};

// Reads the logs at `run_log` and `reference_log` and checks the run against the reference over
// steps [0, steps): exact sample accounting, every step compared, loss within `tolerance`
// relative. A read error is that error (kNotFound for a missing file); a mismatch is kCorrupt.
LogMatch MatchLogs(const std::string& run_log, const std::string& reference_log, int64_t steps,
                   double tolerance);

}  // namespace elastra::examples
