#include "examples/log_check.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace elastra::examples {

StatusOr<TrainLog> ReadTrainLog(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFoundError("cannot open log " + path);
  TrainLog log;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j.contains("loss")) {
      ++log.unreadable;
      continue;
    }
    StepRecord r;
    r.step = j.value("step", int64_t{0});
    r.generation = j.value("generation", uint64_t{0});
    r.dp = j.value("dp", 1);
    r.pp = j.value("pp", 1);
    r.tp = j.value("tp", 1);
    r.loss = j.value("loss", 0.0);
    r.sample_begin = j.value("sample_begin", int64_t{0});
    r.sample_end = j.value("sample_end", int64_t{0});
    ++log.records;
    if (log.applied.count(r.step) > 0) ++log.reapplied;
    log.applied[r.step] = r;
  }
  return log;
}

Comparison Compare(const TrainLog& run, const TrainLog& reference, int64_t expected_steps) {
  Comparison c;
  c.accounting_ok = true;
  int64_t expected_begin = 0;
  for (int64_t s = 0; s < expected_steps; ++s) {
    auto it = run.applied.find(s);
    if (it == run.applied.end()) {
      c.accounting_ok = false;
      if (c.problem.empty()) c.problem = "step " + std::to_string(s) + " was never applied";
      continue;
    }
    const StepRecord& r = it->second;
    if (r.sample_begin != expected_begin) {
      c.accounting_ok = false;
      if (c.problem.empty()) {
        c.problem = "step " + std::to_string(s) + " begins at sample " +
                    std::to_string(r.sample_begin) + ", expected " + std::to_string(expected_begin);
      }
    }
    expected_begin = r.sample_end;
    auto ref = reference.applied.find(s);
    if (ref == reference.applied.end()) {
      if (c.problem.empty()) c.problem = "reference lacks step " + std::to_string(s);
      c.accounting_ok = false;
      continue;
    }
    if (ref->second.sample_begin != r.sample_begin || ref->second.sample_end != r.sample_end) {
      c.accounting_ok = false;
      if (c.problem.empty()) c.problem = "step " + std::to_string(s) + " used other samples";
    }
    double diff = std::fabs(r.loss - ref->second.loss) / std::max(std::fabs(ref->second.loss), 1e-12);
    c.max_rel_loss_diff = std::max(c.max_rel_loss_diff, diff);
    ++c.steps;
  }
  if (run.applied.size() > static_cast<size_t>(expected_steps)) {
    c.accounting_ok = false;
    if (c.problem.empty()) c.problem = "the run applied steps past the last one";
  }
  return c;
}

LogMatch MatchLogs(const std::string& run_log, const std::string& reference_log, int64_t steps,
                   double tolerance) {
  LogMatch m;
  auto run = ReadTrainLog(run_log);
  if (!run.ok()) {
    m.status = run.status();
    return m;
  }
  m.run = std::move(run).value();
  auto reference = ReadTrainLog(reference_log);
  if (!reference.ok()) {
    m.status = reference.status().WithContext("reference");
    return m;
  }
  m.comparison = Compare(m.run, *reference, steps);
  const Comparison& c = m.comparison;
  std::string problems;
  auto add = [&problems](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  if (!c.accounting_ok) add("sample accounting: " + c.problem);
  if (c.steps != steps) {
    add(std::to_string(c.steps) + " of " + std::to_string(steps) + " steps compared");
  }
  if (!(c.max_rel_loss_diff <= tolerance)) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "max relative loss difference %.3g exceeds %.3g",
                  c.max_rel_loss_diff, tolerance);
    add(buf);
  }
  if (!problems.empty()) {
    m.status = CorruptError(run_log + " against " + reference_log + ": " + problems);
  }
  return m;
}

}  // namespace elastra::examples
