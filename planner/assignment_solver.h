// The two solvers the rank assignment is built on, both over plain int64 matrices and free of
// layouts and models: the Hungarian algorithm (SolveAssignment, public, declared in planner.h)
// and GroupSearch, the branch and bound over which group of workers each TP group goes to
// (internal to the planner). Thread-compatible: a GroupSearch is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace elastra::planner_internal {

// SolveAssignment over a row-major rows x cols matrix (no vector per row).
std::vector<int> SolveAssignmentFlat(const int64_t* cost, int rows, int cols);

// Branch and bound over the group each unit goes to, for when units compete for the same
// workers so that the per-unit bound is not reached. The bound of a partial choice is the
// assignment problem over every rank and worker with the chosen units' ranks held to their
// groups and the others free: a relaxation, exact once every unit is chosen.
class GroupSearch {
 public:
  // kept: rank x column (columns: every worker of every group, group_of_col their group).
  GroupSearch(std::vector<std::vector<int64_t>> kept, std::vector<int> group_of_col,
              std::vector<int> slots, const std::vector<std::vector<int64_t>>& best, int tp,
              int64_t max_nodes);

  // Improves on `incumbent` (bytes kept by *group_of_unit). Returns true when the search ran to
  // the end, so that *group_of_unit is optimal.
  bool Run(int64_t incumbent, std::vector<int>* group_of_unit);

 private:
  int64_t Bound();
  void Visit(size_t k);

  const std::vector<std::vector<int64_t>> kept_;
  const std::vector<int> group_of_col_;
  const std::vector<int> slots_;
  const std::vector<std::vector<int64_t>>& best_;
  const int tp_;
  const int64_t max_nodes_;
  std::vector<int> order_, size_;
  std::vector<bool> barren_;
  int64_t forbidden_ = 1;
  int64_t incumbent_ = 0;
  int64_t nodes_ = 0;
  bool aborted_ = false;
  std::vector<int> choice_, used_, best_map_;
};

}  // namespace elastra::planner_internal
