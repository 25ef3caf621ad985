// The planner's layout search: every (dp, pp, tp) the workers allow, scored by the cost model
// (planner_cost.h), ranked, and the best one's ranks assigned (rank_assignment.h). See planner.h
// and docs/resharding.md.
#include "planner/planner.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "planner/planner_cost.h"
#include "planner/rank_assignment.h"

namespace elastra {

using planner_internal::CheckCurrent;
using planner_internal::HostStats;
using planner_internal::ValidateAndScore;

StatusOr<PlanResult> PlanLayout(const ModelDescription& model,
                                const std::vector<int>& host_of_worker, const PlannerPins& pins,
                                const CurrentPlacement& current, const PlannerOptions& options) {
  const int num_workers = static_cast<int>(host_of_worker.size());
  if (num_workers < 1) return InvalidArgumentError("no workers to plan for");
  ELASTRA_RETURN_IF_ERROR(CheckCurrent(current, host_of_worker.size()));
  int pin_tp = pins.tp, pin_pp = pins.pp;
  if (pins.only_dp) {
    if (current.worker_of_rank.empty()) {
      return InvalidArgumentError("pin 'only dp changes' needs a current layout");
    }
    if ((pin_tp && pin_tp != current.layout.tp) || (pin_pp && pin_pp != current.layout.pp)) {
      return InvalidArgumentError("pins contradict: only dp changes, but tp/pp pinned elsewhere");
    }
    pin_tp = current.layout.tp;
    pin_pp = current.layout.pp;
  }
  if (pin_tp < 0 || pin_pp < 0) return InvalidArgumentError("pins must be >= 0");

  HostStats hosts(host_of_worker);
  std::vector<LayoutScore> valid;
  int64_t considered = 0;
  std::string first_reason;
  double least_memory = -1;
  // Why no layout that uses every worker is valid: the first reason, or the one that came
  // closest to fitting in memory.
  std::string all_reason, all_memory_reason;
  double all_least_memory = -1;
  const int64_t batches = model.global_batch / model.micro_batch;
  for (int tp = 1; tp <= num_workers; ++tp) {
    if (pin_tp && tp != pin_tp) continue;
    for (int pp = 1; pp * tp <= num_workers; ++pp) {
      if (pin_pp && pp != pin_pp) continue;
      for (int dp = 1; dp * pp * tp <= num_workers; ++dp) {
        const bool all = dp * pp * tp == num_workers;
        if (batches % dp != 0 && !(pin_tp && pin_pp) && !all) continue;  // cheap skip
        ++considered;
        LayoutScore s;
        std::string why;
        const Layout layout{dp, pp, tp};
        const int rc = ValidateAndScore(model, layout, host_of_worker.size(), hosts, options.cost,
                                        pins, &s, &why);
        if (rc == 0) {
          valid.push_back(s);
          continue;
        }
        if (first_reason.empty()) first_reason = layout.ToString() + ": " + why;
        if (rc == 2 && (least_memory < 0 || s.memory_gib < least_memory)) {
          least_memory = s.memory_gib;
        }
        if (!all) continue;
        if (all_reason.empty()) all_reason = layout.ToString() + ": " + why;
        if (rc == 2 && (all_least_memory < 0 || s.memory_gib < all_least_memory)) {
          all_least_memory = s.memory_gib;
          all_memory_reason = layout.ToString() + ": " + why;
        }
      }
    }
  }
  if (valid.empty()) {
    std::string msg = "no valid layout for " + std::to_string(num_workers) + " workers";
    if (least_memory >= 0) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "; the smallest per-device memory estimate (with the least memory-hungry "
                    "recomputation) is %.1f GiB (+%.1f reserve), the device has %.1f GiB",
                    least_memory, options.cost.memory_reserve_gib, model.device_memory_gib);
      msg += buf;
    } else if (!first_reason.empty()) {
      msg += "; e.g. " + first_reason;
    } else {
      msg += " with the pins (tp=" + std::to_string(pin_tp) + ", pp=" + std::to_string(pin_pp) +
             ", 0 = free): tp x pp exceeds the workers";
    }
    return InvalidArgumentError(msg);
  }
  // TP across hosts only when no host-contained layout is valid; then every worker used when a
  // layout that does so is valid; then the step time.
  const bool any_in_host =
      std::any_of(valid.begin(), valid.end(), [](const LayoutScore& v) { return v.tp_in_host; });
  auto tier = [&](const LayoutScore& v) {
    return std::make_pair(any_in_host && !v.tp_in_host, v.layout.world() != num_workers);
  };
  std::sort(valid.begin(), valid.end(), [&](const LayoutScore& a, const LayoutScore& b) {
    if (tier(a) != tier(b)) return tier(a) < tier(b);
    if (a.step_time_s != b.step_time_s) return a.step_time_s < b.step_time_s;
    if (a.layout.world() != b.layout.world()) return a.layout.world() < b.layout.world();
    if (a.layout.tp != b.layout.tp) return a.layout.tp < b.layout.tp;
    return a.layout.pp < b.layout.pp;
  });
  PlanResult result;
  result.best = valid[0];
  for (size_t i = 1; i < valid.size() && static_cast<int>(i) <= options.alternatives; ++i) {
    result.alternatives.push_back(valid[i]);
  }
  result.layouts_considered = considered;
  if (result.best.layout.world() != num_workers) {
    const std::string n = std::to_string(num_workers);
    const bool all_across_hosts =
        std::any_of(valid.begin(), valid.end(),
                    [&](const LayoutScore& v) { return v.layout.world() == num_workers; });
    const std::string& why = !all_memory_reason.empty() ? all_memory_reason : all_reason;
    if (all_across_hosts) {
      result.idle_reason = "no layout with TP groups inside hosts uses all " + n +
                           " workers (those that do put TP across hosts)";
    } else if (!why.empty()) {
      result.idle_reason = "no valid layout uses all " + n + " workers: e.g. " + why;
    } else {
      result.idle_reason = "no layout with the pins uses all " + n +
                           " workers (tp x pp does "
                           "not divide " +
                           n + ")";
    }
  }
  for (const LayoutScore& v : valid) {
    if (tier(v).first != tier(result.best).first || v.layout.world() == num_workers) continue;
    if (v.step_time_s < result.best.step_time_s &&
        (!result.faster_with_idle_workers ||
         v.step_time_s < result.faster_with_idle_workers->step_time_s)) {
      result.faster_with_idle_workers = v;
    }
  }
  ELASTRA_ASSIGN_OR_RETURN(result.worker_of_rank,
                           AssignRanks(model, result.best.layout, host_of_worker, current,
                                       options, &result.exact_assignment, &result.kept_bytes));
  return result;
}

}  // namespace elastra
