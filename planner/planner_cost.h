// The planner's cost model, internal to the planner: the host facts, the per-layer memory and
// compute terms (Korthikanti et al. 2022), the recomputation and sequence-parallelism choice, and
// the validation and score of one layout. Its public surface (RecomputeName, LayoutScoreJson,
// ScoreLayout) is declared in planner.h; PlanLayout calls ValidateAndScore directly to keep the
// reason a layout failed. Pure computation: thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "planner/model_description.h"
#include "planner/planner.h"
#include "elastra/layout.h"

namespace elastra::planner_internal {

// Host facts the scoring needs, computed once per plan.
struct HostStats {
  std::map<int, int> workers_on_host;
  int max_host_size = 0;

  explicit HostStats(const std::vector<int>& host_of_worker) {
    for (int h : host_of_worker) ++workers_on_host[h];
    for (const auto& [h, n] : workers_on_host) max_host_size = std::max(max_host_size, n);
  }
  // TP groups of size tp that fit inside single hosts.
  int64_t Blocks(int tp) const {
    int64_t blocks = 0;
    for (const auto& [h, n] : workers_on_host) blocks += n / tp;
    return blocks;
  }
};

// Validates a layout and scores it with its fastest recomputation and sequence-parallel choice
// that fits (ties: the one that needs less memory). Returns 0, or 1 (structure) or 2 (memory:
// *s holds the least memory any allowed choice needs) with the reason in *why.
int ValidateAndScore(const ModelDescription& m, const Layout& l, size_t num_workers,
                     const HostStats& hosts, const CostConstants& c, const PlannerPins& pins,
                     LayoutScore* s, std::string* why);

}  // namespace elastra::planner_internal
