#include "coordinator/layout_policy.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>
#include <nlohmann/json.hpp>

#include "common/id_index.h"
#include "common/logging.h"

namespace elastra::coordinator {

std::vector<int> HostIndices(const std::vector<std::string>& hosts) {
  std::unordered_map<std::string, int> index;
  std::vector<int> out;
  out.reserve(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    // Workers of a host usually come one after another (ranks by host): no hash for those.
    if (i > 0 && hosts[i] == hosts[i - 1]) {
      out.push_back(out.back());
      continue;
    }
    auto [it, added] = index.emplace(hosts[i], static_cast<int>(index.size()));
    out.push_back(it->second);
  }
  return out;
}

namespace {

// The "pins" of a join's model description: {"tp": T, "pp": P, "only_dp": B}, each optional.
// kInvalidArgument naming the field (the text comes from a worker: any JSON may be there).
StatusOr<PlannerPins> PinsFromJson(const nlohmann::json& j) {
  PlannerPins pins;
  auto it = j.find("pins");
  if (it == j.end()) return pins;
  if (!it->is_object()) return InvalidArgumentError("\"pins\" must be an object");
  for (const auto& [key, value] : it->items()) {
    if (key == "tp" || key == "pp") {
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() > (1 << 20)) {
        return InvalidArgumentError("pin '" + key + "' must be an integer from 0 to 2^20");
      }
      (key == "tp" ? pins.tp : pins.pp) = static_cast<int>(value.get<int64_t>());
    } else if (key == "only_dp") {
      if (!value.is_boolean()) return InvalidArgumentError("pin 'only_dp' must be a boolean");
      pins.only_dp = value.get<bool>();
    } else {
      return InvalidArgumentError("unknown pin '" + key + "'");
    }
  }
  return pins;
}

}  // namespace

Status CheckState(const StateSpec& state) {
  int64_t total = 0;
  for (const TensorSpec& t : state.tensors) {
    ELASTRA_RETURN_IF_ERROR(ValidateTensor(t, state.num_layers, Layout{}));
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d > kMaxTensorDim) {
        return InvalidArgumentError("tensor '" + t.name + "': dimension of " + std::to_string(d) +
                                    " elements (at most 2^40)");
      }
      // Stop before the product passes 2^48 (two dimensions of 2^40 would overflow int64_t).
      if (d > 0 && elements > kMaxTensorElements / d) {
        return InvalidArgumentError("tensor '" + t.name + "': more than 2^48 elements");
      }
      elements *= d;
    }
    if (elements > kMaxTensorElements || t.element_size > kMaxElementSize) {
      return InvalidArgumentError("tensor '" + t.name + "': " + std::to_string(elements) +
                                  " elements of " + std::to_string(t.element_size) +
                                  " bytes (at most 2^48 elements of at most 64 bytes)");
    }
    total += elements * static_cast<int64_t>(t.element_size);  // each term at most 2^54
    if (total > kMaxStateBytes) return InvalidArgumentError("the state has more than 2^56 bytes");
  }
  return OkStatus();
}

bool LayoutPolicy::Learn(const proto::JoinRequest& join) {
  const bool learned = state_.tensors.empty() && !join.state.tensors.empty();
  if (learned) {
    state_ = join.state;
    need_.clear();  // computed without the state
  }
  if (!model_json_.empty() || join.model_json.empty()) return learned;
  model_json_ = join.model_json;
  const auto j = nlohmann::json::parse(model_json_, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("model")) return learned;
  // Parsed once and never dumped: the text comes from a worker and may nest deeply.
  auto model = ModelDescriptionFromJson(j["model"]);
  auto pins = model.ok() ? PinsFromJson(j) : StatusOr<PlannerPins>(model.status());
  if (!pins.ok()) {
    LOG(WARNING) << "ignoring the model description of " << join.worker_id << ": "
                 << pins.status();
    return learned;
  }
  model_ = *model;
  pins_ = *pins;
  need_.clear();  // computed without the model's activations
  LOG(INFO) << "planning layouts for the model of worker " << join.worker_id;
  return learned;
}

Status LayoutPolicy::Validate(const Layout& layout) const {
  for (const auto& t : state_.tensors) {
    Status s = ValidateTensor(t, state_.num_layers, layout);
    if (!s.ok()) {
      return InvalidArgumentError("layout " + layout.ToString() +
                                  " does not fit the job's state: " + s.message());
    }
  }
  return OkStatus();
}

Layout LayoutPolicy::Default(size_t workers, const Layout& current) const {
  const int n = static_cast<int>(workers);
  const int k = current.pp * current.tp;
  if (k > 1 && n % k == 0) {
    Layout keep{n / k, current.pp, current.tp};
    if (Validate(keep).ok()) return keep;
  }
  Layout dp;
  dp.dp = n;
  return dp;
}

Layout LayoutPolicy::Choose(const std::vector<std::string>& hosts, const Layout& current) const {
  const size_t n = hosts.size();
  if (!model_ || pins_.only_dp) return Default(n, current);
  auto planned = PlanLayout(*model_, HostIndices(hosts), pins_, CurrentPlacement{});
  if (!planned.ok()) {
    LOG(WARNING) << "planner: " << planned.status() << "; using the default layout";
    return Default(n, current);
  }
  std::vector<LayoutScore> ranked = {planned->best};
  ranked.insert(ranked.end(), planned->alternatives.begin(), planned->alternatives.end());
  for (const auto& score : ranked) {
    // Every worker is used: a worker left idle would hold no rank and no state.
    if (static_cast<size_t>(score.layout.world()) != n) continue;
    if (!Validate(score.layout).ok()) continue;
    LOG(INFO) << "planner chose " << score.layout.ToString() << " for " << n
              << " workers (modelled step " << score.step_time_s * 1e3 << " ms)";
    return score.layout;
  }
  return Default(n, current);
}

std::vector<std::string> LayoutPolicy::Assign(
    const Layout& layout, const std::vector<std::string>& candidates,
    const std::vector<std::string>& hosts, const Layout& current,
    const std::vector<std::string>& current_members) const {
  const size_t world = static_cast<size_t>(layout.world());
  if (world > candidates.size()) return candidates;  // nothing to choose; the caller's mistake
  std::vector<std::string> keep_order(candidates.begin(), candidates.begin() + world);
  // With nothing known to keep in place (no state registered, or a current member missing: a
  // failure, a drain), what still matters is that tensor-parallel groups stay inside hosts.
  auto by_hosts = [&]() -> std::vector<std::string> {
    if (layout.tp <= 1) return keep_order;
    auto assigned = AssignRanks(ModelDescription{}, layout, HostIndices(hosts), CurrentPlacement{});
    if (!assigned.ok()) return keep_order;
    std::vector<std::string> order;
    for (int w : *assigned) order.push_back(candidates[w]);
    return order;
  };
  if (state_.tensors.empty()) return by_hosts();
  // Data parallelism to data parallelism with no ZeRO-sharded tensor: every rank holds the whole
  // state before and after, so every order keeps the same bytes, and the candidates' own order
  // (the current members first, each at its rank) is an optimal one. No assignment to solve: at
  // 16,384 workers it cost a planned change some 15 ms (docs/scale.md).
  const StateSpec& state = state_;
  const bool zero = std::any_of(state.tensors.begin(), state.tensors.end(),
                                [](const TensorSpec& t) { return t.rule.zero; });
  if (!zero && layout.pp == 1 && layout.tp == 1 && current.pp == 1 && current.tp == 1) {
    return keep_order;
  }
  CurrentPlacement placement;
  placement.layout = current;
  IdIndex index;  // candidate -> its position (a flat index, not a hash node per candidate)
  index.Build(&candidates);
  placement.worker_of_rank.reserve(current_members.size());
  for (const auto& id : current_members) {
    const size_t i = index.Find(id);
    if (i == IdIndex::kNone) return by_hosts();
    placement.worker_of_rank.push_back(static_cast<int>(i));
  }
  // Exact bytes kept, from the registered state's region math. What a rank holds depends on its
  // pipeline and tensor coordinates, and on its data-parallel one only for ZeRO-sharded tensors:
  // without ZeRO the bytes are computed once per class of pairs (at most pp x tp x pp' x tp'),
  // not once per pair of ranks (millions at thousands of workers).
  PlannerOptions options;
  // A dense table by class when the classes are few enough (the usual case), else a hash map.
  const int64_t from_classes = static_cast<int64_t>(current.pp) * current.tp;
  const int64_t to_classes = static_cast<int64_t>(layout.pp) * layout.tp;
  constexpr int64_t kDenseClasses = int64_t{1} << 20;
  const bool dense = from_classes * to_classes <= kDenseClasses;
  auto by_class = std::make_shared<std::unordered_map<uint64_t, int64_t>>();
  auto dense_class = std::make_shared<std::vector<int64_t>>(
      !zero && dense ? 2 * from_classes * to_classes : 0, int64_t{-1});
  options.kept_bytes_memoized = !zero;
  options.kept_bytes = [&state, current, layout, zero, dense, to_classes, by_class, dense_class](
                           int from_rank, const Layout& to, int to_rank) {
    const Coordinates a = CoordinatesOf(current, from_rank), b = CoordinatesOf(to, to_rank);
    // Twice the bytes kept, plus 1 when the worker keeps its data-parallel index: among
    // assignments that keep as many bytes (every replica holds the same), the one that leaves
    // each replica at its index keeps its pp and tp groups (docs/recovery.md, "Rebuild only what
    // changed"); a regrow otherwise permuted the stages' hosts at random.
    const int same_dp = a.dp_rank == b.dp_rank ? 1 : 0;
    // Without ZeRO the class of a pair is its two (pp, tp) positions and whether dp is the same.
    const int64_t from_class = a.pp_rank * current.tp + a.tp_rank;
    const int64_t to_class = b.pp_rank * to.tp + b.tp_rank;
    const uint64_t key =
        (((static_cast<uint64_t>(from_class) << 32) | static_cast<uint64_t>(to_class)) << 1) |
        static_cast<uint64_t>(same_dp);
    int64_t* slot = nullptr;
    if (!zero && dense && to.pp == layout.pp && to.tp == layout.tp) {
      slot = &(*dense_class)[(from_class * to_classes + to_class) * 2 + same_dp];
      if (*slot >= 0) return *slot;
    } else if (!zero) {
      auto it = by_class->find(key);
      if (it != by_class->end()) return it->second;
    }
    int64_t kept = 0;
    for (const auto& t : state.tensors) {
      const Region ra = LocalRegion(t, state.num_layers, current, a);
      const Region rb = LocalRegion(t, state.num_layers, to, b);
      if (ra.empty() || rb.empty()) continue;
      for (const Rect& p : ra.Pieces()) {
        for (const Rect& q : rb.Pieces()) {
          kept += Intersect(p, q).volume() * static_cast<int64_t>(t.element_size);
        }
      }
    }
    kept = 2 * kept + same_dp;
    if (slot != nullptr) {
      *slot = kept;
    } else if (!zero) {
      by_class->emplace(key, kept);
    }
    return kept;
  };
  bool exact = false;
  int64_t kept = 0;
  auto assigned = AssignRanks(ModelDescription{}, layout, HostIndices(hosts), placement, options,
                              &exact, &kept);
  if (!assigned.ok()) {
    LOG(WARNING) << "rank assignment for " << layout.ToString() << " failed (" << assigned.status()
                 << "); keeping the current order";
    return keep_order;
  }
  std::vector<std::string> order;
  for (int w : *assigned) order.push_back(candidates[w]);
  // kept_bytes counted each byte twice and each worker left at its dp index once.
  LOG(INFO) << "rank assignment for " << layout.ToString() << " keeps about " << kept / 2
            << " bytes in place" << (exact ? "" : " (heuristic)");
  return order;
}

}  // namespace elastra::coordinator
