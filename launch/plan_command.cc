// elastra plan: the planner and the reshard planner from the command line (no job needed).
//
//   elastra plan --model FILE --workers N [--workers-per-host H] [--tp T] [--pp P]
//                [--from LAYOUT [--only-dp]] [--json]
//     the chosen layout, its modelled step time, the next best alternatives, the planning time.
//   elastra plan --model FILE --from dp=A,pp=B,tp=C --to dp=D,pp=E,tp=F [--workers-per-host H]
//                [--json]
//     the transfer plan's totals for that change.
// Exit codes: 0 success, 1 no valid layout, 2 bad input.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "planner/model_description.h"
#include "planner/planner.h"
#include "elastra/sharding.h"
#include "launch/cli.h"
#include "launch/commands.h"
#include "state/plan/reshard_plan.h"

namespace elastra::launch {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// elastra plan's flags.
struct PlanOptions {
  std::string model;          // --model FILE
  std::optional<int> workers; // the layout choice for this many workers
  std::optional<Layout> from; // the current layout (both forms)
  std::optional<Layout> to;   // the transfer plan from `from` to this
  int per_host = 8;           // --workers-per-host
  std::optional<int> tp, pp;  // pins for the layout choice
  bool only_dp = false;
  bool json = false;
};

int Usage(const std::string& why) { return UsageError("elastra plan", why); }

// A layout flag's value checked against the model's structure (not its memory).
bool CheckLayout(const std::string& name, const Layout& layout, const ModelDescription& m) {
  std::string why;
  if (m.heads % layout.tp != 0 || m.hidden % layout.tp != 0) {
    why = "tp must divide heads and hidden";
  } else if (layout.pp > m.layers) {
    why = "pp exceeds the number of layers";
  } else if (m.global_batch % (static_cast<int64_t>(layout.dp) * m.micro_batch) != 0) {
    why = "global_batch is not a multiple of dp x micro_batch";
  } else if (static_cast<int64_t>(layout.dp) * layout.pp * layout.tp > (1 << 16)) {
    why = "more than 65536 ranks";
  }
  if (!why.empty()) {
    std::fprintf(stderr, "elastra plan: %s %s is not valid for this model: %s\n", name.c_str(),
                 layout.ToString().c_str(), why.c_str());
    return false;
  }
  return true;
}

GptConfig GptOf(const ModelDescription& m) {
  GptConfig g;
  g.layers = m.layers;
  g.hidden = m.hidden;
  g.ffn_hidden = m.ffn_hidden;
  g.vocab = m.vocab;
  g.seq_len = m.seq_len;
  g.param_size = m.dtype_size();
  g.adam = m.optimizer == "adam";
  g.zero = m.zero == 1;
  return g;
}

nlohmann::json ScoreJson(const LayoutScore& s) { return nlohmann::json::parse(LayoutScoreJson(s)); }

void PrintScore(const char* label, const LayoutScore& s) {
  std::string choice = s.recompute == Recompute::kNone
                           ? std::string("; no recomputation")
                           : std::string("; ") + RecomputeName(s.recompute) + " recomputation";
  if (s.sequence_parallel) choice += ", sequence parallel";
  if (!s.tp_in_host) choice += ", tp across hosts";
  std::printf("%-9s %-18s workers %-5d step %.4f s  (compute %.4f incl. recompute %.4f, bubble "
              "%.4f, tp %.4f, pp %.4f, dp %.4f; %lld micro-batches, %lld in flight, %.1f "
              "GiB/device, %.1f GiB activations%s)\n",
              label, s.layout.ToString().c_str(), s.layout.world(), s.step_time_s, s.compute_s,
              s.recompute_s, s.bubble_s, s.tp_comm_s, s.pp_comm_s, s.dp_comm_s,
              static_cast<long long>(s.micro_batches), static_cast<long long>(s.in_flight),
              s.memory_gib, s.activation_gib, choice.c_str());
}

std::vector<int> Hosts(int workers, int per_host) {
  std::vector<int> h(workers);
  for (int w = 0; w < workers; ++w) h[w] = w / per_host;
  return h;
}

std::vector<int> Identity(int n) {
  std::vector<int> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

int PlanLayoutMode(const PlanOptions& flags, const ModelDescription& model) {
  const int workers = *flags.workers, per_host = flags.per_host;
  PlannerPins pins;
  pins.tp = flags.tp.value_or(0);
  pins.pp = flags.pp.value_or(0);
  pins.only_dp = flags.only_dp;
  CurrentPlacement current;
  if (flags.from) {
    current.layout = *flags.from;
    if (!CheckLayout("--from", current.layout, model)) return 2;
    if (current.layout.world() > workers) {
      return Usage("--from " + current.layout.ToString() + " uses more than the " +
                   std::to_string(workers) + " workers");
    }
    current.worker_of_rank = Identity(current.layout.world());
  } else if (pins.only_dp) {
    return Usage("--only-dp needs --from (the current layout)");
  }
  const auto start = Clock::now();
  auto plan = PlanLayout(model, Hosts(workers, per_host), pins, current);
  const double ms = MsSince(start);
  if (!plan.ok()) {
    std::fprintf(stderr, "elastra plan: %s\n", plan.status().message().c_str());
    return 1;
  }
  if (flags.json) {
    nlohmann::json out = {{"workers", workers}, {"workers_per_host", per_host},
                          {"best", ScoreJson(plan->best)}, {"alternatives", nlohmann::json::array()},
                          {"worker_of_rank", plan->worker_of_rank},
                          {"layouts_considered", plan->layouts_considered},
                          {"exact_assignment", plan->exact_assignment},
                          {"kept_bytes", plan->kept_bytes}, {"planning_ms", ms},
                          {"idle_reason", plan->idle_reason},
                          {"faster_with_idle_workers",
                           plan->faster_with_idle_workers
                               ? ScoreJson(*plan->faster_with_idle_workers)
                               : nlohmann::json(nullptr)}};
    for (const auto& a : plan->alternatives) out["alternatives"].push_back(ScoreJson(a));
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf("workers %d (%d per host), %lld layouts considered, planned in %.2f ms\n", workers,
              per_host, static_cast<long long>(plan->layouts_considered), ms);
  PrintScore("best", plan->best);
  for (size_t i = 0; i < plan->alternatives.size(); ++i) {
    PrintScore(("alt " + std::to_string(i + 1)).c_str(), plan->alternatives[i]);
  }
  if (plan->best.layout.world() < workers) {
    std::printf("idle workers: %d: %s\n", workers - plan->best.layout.world(),
                plan->idle_reason.c_str());
  }
  if (const auto& faster = plan->faster_with_idle_workers) {
    std::printf("note: %s on %d workers is modelled %.0f %% faster (%.4f s); every worker is used "
                "instead\n",
                faster->layout.ToString().c_str(), faster->layout.world(),
                100.0 * (1.0 - faster->step_time_s / plan->best.step_time_s), faster->step_time_s);
  }
  if (!current.worker_of_rank.empty()) {
    std::printf("assignment: %s, state kept in place %lld bytes (estimate)\n",
                plan->exact_assignment ? "exact (proven optimal)" : "heuristic (each host exact)",
                static_cast<long long>(plan->kept_bytes));
  }
  return 0;
}

int PlanTransferMode(const PlanOptions& flags, const ModelDescription& model) {
  const Layout from = *flags.from, to = *flags.to;
  const int per_host = flags.per_host;
  if (!CheckLayout("--from", from, model) || !CheckLayout("--to", to, model)) return 2;
  const StateSpec state = GptState(GptOf(model));
  for (const auto& t : state.tensors) {
    for (const Layout* l : {&from, &to}) {
      Status s = ValidateTensor(t, state.num_layers, *l);
      if (!s.ok()) {
        std::fprintf(stderr, "elastra plan: %s cannot hold the model: %s\n",
                     l->ToString().c_str(), s.message().c_str());
        return 2;
      }
    }
  }
  const auto start = Clock::now();
  // Growing keeps every current worker and adds new ones after them; shrinking lets the
  // assignment choose who leaves.
  const int workers = std::max(from.world(), to.world());
  const std::vector<int> hosts = Hosts(workers, per_host);
  const CurrentPlacement current{from, Identity(from.world())};
  PlannerOptions options;
  // Exact kept bytes from the region math when the pairs to evaluate are few enough.
  const double work = static_cast<double>(from.world()) * to.world() * state.tensors.size();
  if (work <= 2e7) {
    options.kept_bytes = [&state, &from](int from_rank, const Layout& to_layout, int to_rank) {
      const Coordinates c = CoordinatesOf(from, from_rank);
      return KeptBytes(state, from, &c, to_layout, CoordinatesOf(to_layout, to_rank));
    };
  }
  bool exact = false;
  auto assignment = AssignRanks(model, to, hosts, current, options, &exact);
  if (!assignment.ok()) {
    std::fprintf(stderr, "elastra plan: %s\n", assignment.status().message().c_str());
    return 2;
  }
  auto plan = BuildReshardPlan(state, Placement{from, current.worker_of_rank},
                               Placement{to, *assignment}, hosts);
  const double ms = MsSince(start);
  if (!plan.ok()) {
    std::fprintf(stderr, "elastra plan: %s\n", plan.status().message().c_str());
    return 2;
  }
  std::vector<char> stays(workers, 0);
  for (int w : plan->to.worker_of_rank) stays[w] = 1;
  std::vector<int> leaving;
  for (int w = 0; w < from.world(); ++w) {
    if (!stays[w]) leaving.push_back(w);
  }
  const double ratio = plan->bytes_lower_bound > 0
                           ? static_cast<double>(plan->bytes_moved) / plan->bytes_lower_bound
                           : 1.0;
  if (flags.json) {
    nlohmann::json out = {{"from", from.ToString()}, {"to", to.ToString()},
                          {"workers", workers}, {"workers_per_host", per_host},
                          {"state_bytes", state.TotalBytes()},
                          {"bytes_moved", plan->bytes_moved},
                          {"bytes_lower_bound", plan->bytes_lower_bound},
                          {"moved_vs_lower_bound", ratio},
                          {"transfers", plan->num_transfers()},
                          {"max_sent", plan->max_sent}, {"max_received", plan->max_received},
                          {"bytes_local", plan->bytes_local},
                          {"bytes_same_host", plan->bytes_same_host},
                          {"worker_of_rank", plan->to.worker_of_rank}, {"leaving", leaving},
                          {"exact_assignment", exact}, {"planning_ms", ms}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  auto mib = [](int64_t b) { return static_cast<double>(b) / (1 << 20); };
  std::printf("%s -> %s on %d workers (%d per host), state %.1f MiB, planned in %.1f ms\n",
              from.ToString().c_str(), to.ToString().c_str(), workers, per_host,
              mib(state.TotalBytes()), ms);
  std::printf("bytes_moved        %lld (%.1f MiB, %.1f MiB of it inside hosts)\n",
              static_cast<long long>(plan->bytes_moved), mib(plan->bytes_moved),
              mib(plan->bytes_same_host));
  std::printf("bytes_lower_bound  %lld (moved/lower bound %.2f)\n",
              static_cast<long long>(plan->bytes_lower_bound), ratio);
  std::printf("transfers          %lld\n", static_cast<long long>(plan->num_transfers()));
  std::printf("max_sent           %lld (%.1f MiB)\n", static_cast<long long>(plan->max_sent),
              mib(plan->max_sent));
  std::printf("max_received       %lld (%.1f MiB)\n",
              static_cast<long long>(plan->max_received), mib(plan->max_received));
  std::printf("bytes_local        %lld (kept in place)\n",
              static_cast<long long>(plan->bytes_local));
  std::printf("assignment         %s\n",
              exact ? "exact (proven optimal)" : "heuristic (each host exact)");
  if (!leaving.empty()) {
    std::printf("leaving workers   ");
    for (int w : leaving) std::printf(" %d", w);
    std::printf("\n");
  }
  return 0;
}

int Plan(const PlanOptions& flags) {
  auto model = LoadModelDescription(flags.model);
  if (!model.ok()) {
    std::fprintf(stderr, "elastra plan: %s\n", model.status().message().c_str());
    return 2;
  }
  if (flags.to) {
    if (!flags.from) return Usage("--to needs --from");
    if (flags.workers) return Usage("give either --workers or --to, not both");
    if (flags.tp || flags.pp || flags.only_dp) {
      return Usage("--tp, --pp and --only-dp go with --workers");
    }
    return PlanTransferMode(flags, *model);
  }
  if (!flags.workers) return Usage("give --workers N, or --from and --to");
  return PlanLayoutMode(flags, *model);
}

}  // namespace

void AddPlanCommand(CLI::App* app, int* exit_code) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* plan = app->add_subcommand(
      "plan", "The layout the planner chooses for a model, or the transfer plan of a change");
  SetUsage(plan, {"elastra plan --model FILE --workers N [--workers-per-host H] [--tp T] [--pp P] "
                  "[--from LAYOUT [--only-dp]] [--json]",
                  "elastra plan --model FILE --from dp=A,pp=B,tp=C --to dp=D,pp=E,tp=F "
                  "[--workers-per-host H] [--json]"});
  plan->add_option("--model", o->model, "A GPT-style model description (JSON)")
      ->type_name("FILE")
      ->required();
  AddIntFlag(plan, "--workers", &o->workers, 1, 1 << 20, "N", "Choose a layout for N workers");
  AddLayoutFlag(plan, "--from", &o->from,
                "The current layout (with --workers: the assignment keeps state in place)");
  AddLayoutFlag(plan, "--to", &o->to, "The new layout: print the transfer plan from --from");
  AddIntFlag(plan, "--workers-per-host", &o->per_host, 1, 1 << 16, "H", "Workers on each host")
      ->capture_default_str();
  AddIntFlag(plan, "--tp", &o->tp, 1, 1 << 16, "T", "Pin the tensor-parallel degree");
  AddIntFlag(plan, "--pp", &o->pp, 1, 1 << 16, "P", "Pin the pipeline-parallel degree");
  plan->add_flag("--only-dp", o->only_dp, "Change only the data-parallel degree of --from");
  plan->add_flag("--json", o->json, "One JSON object instead of text");
  plan->callback([o, exit_code] { *exit_code = Plan(*o); });
}

}  // namespace elastra::launch
