// The Hungarian algorithm (SolveAssignment) and the branch and bound over group choices
// (GroupSearch) of the rank assignment. See assignment_solver.h and docs/resharding.md.
#include "planner/assignment_solver.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "planner/planner.h"

namespace elastra {

namespace {

// The Hungarian algorithm over any n x m cost matrix read through at(i, j).
template <typename At>
std::vector<int> Hungarian(int n, int m, const At& at) {
  if (n == 0) return {};
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  std::vector<int64_t> u(n + 1, 0), v(m + 1, 0);
  std::vector<int> p(m + 1, 0), way(m + 1, 0);
  std::vector<int64_t> minv(m + 1);
  std::vector<char> used(m + 1);
  for (int i = 1; i <= n; ++i) {
    p[0] = i;
    int j0 = 0;
    std::fill(minv.begin(), minv.end(), kInf);
    std::fill(used.begin(), used.end(), false);
    do {
      used[j0] = true;
      const int i0 = p[j0];
      int64_t delta = kInf;
      int j1 = 0;
      for (int j = 1; j <= m; ++j) {
        if (used[j]) continue;
        const int64_t cur = at(i0 - 1, j - 1) - u[i0] - v[j];
        if (cur < minv[j]) {
          minv[j] = cur;
          way[j] = j0;
        }
        if (minv[j] < delta) {
          delta = minv[j];
          j1 = j;
        }
      }
      for (int j = 0; j <= m; ++j) {
        if (used[j]) {
          u[p[j]] += delta;
          v[j] -= delta;
        } else {
          minv[j] -= delta;
        }
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      const int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0 != 0);
  }
  std::vector<int> assign(n, -1);
  for (int j = 1; j <= m; ++j) {
    if (p[j] != 0) assign[p[j] - 1] = j - 1;
  }
  return assign;
}

}  // namespace

std::vector<int> SolveAssignment(const std::vector<std::vector<int64_t>>& a) {
  if (a.empty()) return {};
  return Hungarian(static_cast<int>(a.size()), static_cast<int>(a[0].size()),
                   [&a](int i, int j) { return a[i][j]; });
}

namespace planner_internal {

std::vector<int> SolveAssignmentFlat(const int64_t* cost, int rows, int cols) {
  return Hungarian(rows, cols, [cost, cols](int i, int j) { return cost[i * cols + j]; });
}

}  // namespace planner_internal

namespace planner_internal {

GroupSearch::GroupSearch(std::vector<std::vector<int64_t>> kept, std::vector<int> group_of_col,
                         std::vector<int> slots, const std::vector<std::vector<int64_t>>& best,
                         int tp, int64_t max_nodes)
    : kept_(std::move(kept)),
      group_of_col_(std::move(group_of_col)),
      slots_(std::move(slots)),
      best_(best),
      tp_(tp),
      max_nodes_(max_nodes) {
  const int units = static_cast<int>(best.size());
  order_.resize(units);
  std::iota(order_.begin(), order_.end(), 0);
  auto top = [&](int u) { return *std::max_element(best[u].begin(), best[u].end()); };
  std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) { return top(a) > top(b); });
  // A group none of whose workers keeps anything is interchangeable with any other such group
  // of the same size and free slots: only the first of them is tried.
  barren_.assign(slots_.size(), true);
  size_.assign(slots_.size(), 0);
  for (size_t c = 0; c < group_of_col_.size(); ++c) {
    ++size_[group_of_col_[c]];
    for (const auto& row : kept_) {
      if (row[c] != 0) barren_[group_of_col_[c]] = false;
    }
  }
  forbidden_ = 1;
  for (const auto& row : kept_) forbidden_ += *std::max_element(row.begin(), row.end());
}

bool GroupSearch::Run(int64_t incumbent, std::vector<int>* group_of_unit) {
  incumbent_ = incumbent;
  best_map_ = *group_of_unit;
  choice_.assign(order_.size(), -1);
  used_.assign(slots_.size(), 0);
  Visit(0);
  *group_of_unit = best_map_;
  return !aborted_;
}

int64_t GroupSearch::Bound() {
  const int rows = static_cast<int>(kept_.size()), cols = static_cast<int>(group_of_col_.size());
  std::vector<std::vector<int64_t>> cost(rows, std::vector<int64_t>(cols));
  for (int r = 0; r < rows; ++r) {
    const int g = choice_[r / tp_];
    for (int c = 0; c < cols; ++c) {
      cost[r][c] = g < 0 || group_of_col_[c] == g ? -kept_[r][c] : forbidden_;
    }
  }
  const std::vector<int> pick = SolveAssignment(cost);
  int64_t total = 0;
  for (int r = 0; r < rows; ++r) total -= cost[r][pick[r]];
  return total;  // never negative: the slots leave a choice without forbidden pairs
}

void GroupSearch::Visit(size_t k) {
  if (aborted_) return;
  if (++nodes_ > max_nodes_) {
    aborted_ = true;
    return;
  }
  const int64_t bound = Bound();
  if (bound <= incumbent_) return;
  if (k == order_.size()) {  // every unit placed: the bound is the value
    incumbent_ = bound;
    best_map_ = choice_;
    return;
  }
  const int u = order_[k];
  std::vector<int> groups;
  for (size_t g = 0; g < slots_.size(); ++g) {
    if (used_[g] < slots_[g]) groups.push_back(static_cast<int>(g));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [&](int a, int b) { return best_[u][a] > best_[u][b]; });
  std::set<std::pair<int, int>> barren_tried;  // (size, free slots) of empty barren groups
  for (int g : groups) {
    if (barren_[g] && used_[g] == 0 && !barren_tried.insert({size_[g], slots_[g]}).second) {
      continue;
    }
    choice_[u] = g;
    ++used_[g];
    Visit(k + 1);
    --used_[g];
    choice_[u] = -1;
  }
}

}  // namespace planner_internal
}  // namespace elastra
