// Rank assignment, internal to the planner: which workers stay and which ranks they take, TP
// groups inside hosts, keeping the most state in place (exactly while the search fits its budget,
// else each host placed exactly after a heuristic choice of hosts). Its public surface
// (AssignRanks, EstimateKeptBytes) is declared in planner.h. Pure computation: thread-safe.
#pragma once

#include <cstddef>

#include "planner/planner.h"
#include "elastra/status.h"

namespace elastra::planner_internal {

// Checks a current placement against the workers: OK when it is empty, or when it fills its
// layout with distinct known workers; else kInvalidArgument with what is wrong.
[[nodiscard]] Status CheckCurrent(const CurrentPlacement& current, size_t num_workers);

}  // namespace elastra::planner_internal
