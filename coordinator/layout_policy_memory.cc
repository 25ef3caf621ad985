// LayoutPolicy's memory constraint (see layout_policy.h): what a worker needs at a layout, the
// layout that fits the workers' budgets, and the recovery that keeps whole replicas in place
// (docs/recovery.md).
#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "common/logging.h"
#include "coordinator/layout_policy.h"

namespace elastra::coordinator {

std::string HumanBytes(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  } else if (bytes >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= (int64_t{1} << 10)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / (1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  }
  return buf;
}

int64_t LayoutPolicy::NeedBytes(const Layout& layout) const {
  if (!IsValidLayout(layout)) return INT64_MAX;
  const auto key = std::make_tuple(layout.dp, layout.pp, layout.tp);
  if (auto it = need_.find(key); it != need_.end()) return it->second;
  int64_t need = 0;
  if (!state_.tensors.empty()) {
    if (!Validate(layout).ok()) return INT64_MAX;  // no rank of it can hold the state
    const bool zero = std::any_of(state_.tensors.begin(), state_.tensors.end(),
                                  [](const TensorSpec& t) { return t.rule.zero; });
    // Without ZeRO a rank's shards depend on its pipeline and tensor positions only. With it,
    // the data-parallel split puts the remainder at one end: the first and last replicas bound
    // every other.
    std::vector<int> dp_ranks = {0};
    if (zero && layout.dp > 1) dp_ranks = {0, 1, layout.dp - 1};
    for (int d : dp_ranks) {
      for (int p = 0; p < layout.pp; ++p) {
        for (int t = 0; t < layout.tp; ++t) {
          Coordinates c;
          c.dp_rank = d;
          c.pp_rank = p;
          c.tp_rank = t;
          c.rank = (d * layout.pp + p) * layout.tp + t;
          int64_t bytes = 0;
          for (const TensorSpec& tensor : state_.tensors) {
            bytes += LocalRegion(tensor, state_.num_layers, layout, c).elements() *
                     static_cast<int64_t>(tensor.element_size);
          }
          need = std::max(need, bytes);
        }
      }
    }
  }
  if (model_) {
    // The activations and workspace the planner models for this layout (its weights and
    // optimizer state are the registered state, counted above).
    auto score = ScoreLayout(*model_, layout, std::vector<int>(layout.world(), 0), CostConstants{},
                             pins_);
    if (score.ok()) need += static_cast<int64_t>(score->activation_gib * double(1 << 30));
  }
  need_.emplace(key, need);
  return need;
}

Status LayoutPolicy::CheckMemory(const Layout& layout, int64_t budget,
                                 const std::string& who) const {
  if (budget <= 0) return OkStatus();
  const int64_t need = NeedBytes(layout);
  if (need <= budget) return OkStatus();
  if (need == INT64_MAX) return Validate(layout);
  return ResourceExhaustedError("layout " + layout.ToString() + " needs " + HumanBytes(need) +
                                " a worker, " + who + " has " + HumanBytes(budget));
}

std::optional<Layout> LayoutPolicy::ChooseFitting(const std::vector<std::string>& hosts,
                                                  int64_t budget, const Layout& current,
                                                  bool keep_model_parallel) const {
  const int n = static_cast<int>(hosts.size());
  if (n == 0) return std::nullopt;
  auto fits = [&](const Layout& l) {
    return l.world() >= 1 && l.world() <= n && Validate(l).ok() &&
           (budget <= 0 || NeedBytes(l) <= budget);
  };
  const int k = current.pp * current.tp;
  if (keep_model_parallel && current.dp >= 1 && k > 1 && n >= k) {
    const Layout keep{n / k, current.pp, current.tp};
    if (fits(keep)) return keep;
  }
  const Layout all = Choose(hosts, current);
  if (fits(all)) return all;
  // The fitting layout with the most ranks; among those, the current model parallelism, then the
  // fewest model-parallel ranks (the most data parallelism), then the smaller tp.
  auto better = [&](const Layout& a, const Layout& b) {
    if (a.world() != b.world()) return a.world() > b.world();
    const bool a_current = a.pp == current.pp && a.tp == current.tp;
    const bool b_current = b.pp == current.pp && b.tp == current.tp;
    if (a_current != b_current) return a_current;
    if (a.pp * a.tp != b.pp * b.tp) return a.pp * a.tp < b.pp * b.tp;
    return a.tp < b.tp;
  };
  // At most 1,024 tensor ranks and a pipeline no deeper than the layers: Validate refuses the
  // others, and the search stays short at 16,384 workers.
  const int max_pp = state_.tensors.empty() ? n : std::min(n, std::max(1, state_.num_layers));
  std::optional<Layout> best;
  for (int pp = 1; pp <= max_pp; ++pp) {
    for (int tp = 1; tp <= std::min(n / pp, 1024); ++tp) {
      const Layout l{n / (pp * tp), pp, tp};
      if (fits(l) && (!best || better(l, *best))) best = l;
    }
  }
  if (best) {
    LOG(INFO) << "memory: " << best->ToString() << " is the largest layout of " << n
              << " workers that fits " << HumanBytes(budget) << " a worker (needs "
              << HumanBytes(NeedBytes(*best)) << ")";
  }
  return best;
}

std::vector<std::string> KeepReplicas(
    const Layout& current, const std::vector<std::string>& current_members,
    const std::vector<std::string>& survivors, const std::vector<std::string>& spares, int dp,
    const std::function<std::string(const std::string&)>& host_of) {
  const int k = current.pp * current.tp;
  if (k < 1 || dp < 1 || current.dp < 1 ||
      current_members.size() != static_cast<size_t>(current.world())) {
    return {};
  }
  const std::unordered_set<std::string> alive(survivors.begin(), survivors.end());
  // Each old replica's survivors by position (pp_rank * tp + tp_rank); "" where one was lost.
  std::vector<std::vector<std::string>> at(current.dp, std::vector<std::string>(k));
  std::vector<int> count(current.dp, 0), order(current.dp);
  for (size_t r = 0; r < current_members.size(); ++r) {
    if (alive.count(current_members[r]) == 0) continue;
    at[r / k][r % k] = current_members[r];
    ++count[r / k];
  }
  for (int d = 0; d < current.dp; ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
  // The kept replicas stay in their old order: a dp group is kept only when its members are in
  // the same order (group_keeping.h), and a spare in a lost rank's place keeps every other one.
  std::sort(order.begin(), order.begin() + std::min(dp, current.dp));
  // The kept replicas (a replica beyond the old ones starts empty).
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < dp; ++i) {
    rows.push_back(i < current.dp ? at[order[i]] : std::vector<std::string>(k));
  }
  // The survivors of replicas not kept: first for their own position, then for any.
  std::vector<std::vector<std::string>> same_position(k);
  for (int i = dp; i < current.dp; ++i) {
    for (int pos = 0; pos < k; ++pos) {
      if (!at[order[i]][pos].empty()) same_position[pos].push_back(at[order[i]][pos]);
    }
  }
  for (auto& row : rows) {
    for (int pos = 0; pos < k; ++pos) {
      if (!row[pos].empty() || same_position[pos].empty()) continue;
      row[pos] = same_position[pos].front();
      same_position[pos].erase(same_position[pos].begin());
    }
  }
  std::vector<std::string> others(spares.begin(), spares.end());
  for (const auto& ids : same_position) others.insert(others.end(), ids.begin(), ids.end());
  std::vector<bool> taken(others.size(), false);
  // The first worker not taken, on `host` when one is (any host when `host` is empty).
  auto take = [&](const std::string& host) -> std::string {
    size_t pick = others.size();
    for (size_t i = 0; i < others.size(); ++i) {
      if (taken[i]) continue;
      if (pick == others.size()) pick = i;
      if (host.empty() || !host_of) break;
      if (host_of(others[i]) == host) {
        pick = i;
        break;
      }
    }
    if (pick == others.size()) return "";
    taken[pick] = true;
    return others[pick];
  };
  std::vector<std::string> members;
  members.reserve(static_cast<size_t>(dp) * k);
  for (auto& row : rows) {
    std::string host;  // of the row's first worker: its group's host
    for (int pos = 0; pos < k; ++pos) {
      if (row[pos].empty()) row[pos] = take(host);
      if (row[pos].empty()) return {};
      if (host.empty() && host_of) host = host_of(row[pos]);
      members.push_back(row[pos]);
    }
  }
  return members;
}

}  // namespace elastra::coordinator
