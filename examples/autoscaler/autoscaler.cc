// elastra-autoscaler: an example scheduler that drives a job through its HTTP API only (no ZeroMQ
// keys): it reads GET /v1/job, and when the policy (policy.h) says so, resizes with POST
// /v1/resize {"workers": N, "wait": true}. It grows while the samples per second per worker stay
// within --tolerance of the best seen, and shrinks when capacity is needed: the --capacity-file
// holds the most workers the job may keep, and each SIGUSR1 lowers that ceiling by --step.
// One JSON line per decision on stdout. See examples/autoscaler/README.md.
#include <httplib.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "examples/autoscaler/policy.h"

namespace {

using nlohmann::json;

std::atomic<int> g_capacity_signals{0};
std::atomic<bool> g_stop{false};

struct Flags {
  std::string url;
  std::string token_file;
  elastra::autoscaler::PolicyOptions policy;
  int settle_points = 3;  // points of the training series a measurement averages
  std::string capacity_file;
  int max_resizes = 0;  // 0: no limit
  int poll_ms = 500;
};

std::string ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  std::getline(in, token);
  return token;
}

// The ceiling the capacity file holds, if it holds one.
std::optional<int> FileCeiling(const std::string& path) {
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  int n = 0;
  if (in >> n) return n;
  return std::nullopt;
}

void Print(const json& line) {
  std::printf("%s\n", line.dump().c_str());
  std::fflush(stdout);
}

int Run(const Flags& flags) {
  const std::string token = ReadToken(flags.token_file);
  if (token.empty()) {
    std::fprintf(stderr, "elastra-autoscaler: no token in %s\n", flags.token_file.c_str());
    return 2;
  }
  httplib::Client http(flags.url);
  http.set_read_timeout(600, 0);  // a resize with "wait" answers when the change is done
  const httplib::Headers auth = {{"Authorization", "Bearer " + token}};
  elastra::autoscaler::Policy policy(flags.policy);
  int resizes = 0;
  int64_t measured_after = -1;  // measure from the training points past this step
  std::optional<int> signal_ceiling;
  int signals_seen = 0;
  while (!g_stop) {
    auto res = http.Get("/v1/job", auth);
    if (!res || res->status != 200) {
      std::fprintf(stderr, "elastra-autoscaler: GET /v1/job: %s\n",
                   res ? (std::to_string(res->status) + " " + res->body).c_str()
                       : httplib::to_string(res.error()).c_str());
      if (res && (res->status == 401 || res->status == 403)) return 1;
    } else {
      const json job = json::parse(res->body);
      const std::string state = job["state"];
      if (state == "finished" || state == "failed") {
        Print({{"event", "job_over"}, {"state", state}});
        return 0;
      }
      int members = 0;
      for (const json& w : job["workers"]) members += w["state"] == "member" ? 1 : 0;
      // Each SIGUSR1 lowers the ceiling by a step below the size the job has then.
      for (; signals_seen < g_capacity_signals; ++signals_seen) {
        signal_ceiling = std::max(flags.policy.min_workers,
                                  signal_ceiling.value_or(members) - flags.policy.step);
      }
      std::optional<int> ceiling = FileCeiling(flags.capacity_file);
      if (signal_ceiling) ceiling = std::min(ceiling.value_or(*signal_ceiling), *signal_ceiling);
      if (measured_after < 0) measured_after = job["step"].get<int64_t>();
      // The first point past the mark may span a pause: skip it, average the next ones.
      std::vector<double> rates;
      int64_t newest = measured_after;
      for (const json& p : job["training"]["series"]) {
        if (p["step"].get<int64_t>() <= measured_after) continue;
        rates.push_back(p["samples_per_second"].get<double>());
        newest = p["step"].get<int64_t>();
      }
      const bool capacity_short = ceiling && members > *ceiling;
      if (state == "running" && members > 0 &&
          (capacity_short || static_cast<int>(rates.size()) > flags.settle_points)) {
        double rate = 0;  // unmeasured when capacity is short before a measurement settled
        const size_t settle = static_cast<size_t>(flags.settle_points);
        if (rates.size() > settle) {
          for (size_t i = rates.size() - settle; i < rates.size(); ++i) rate += rates[i];
          rate /= static_cast<double>(settle);
        }
        const auto d = policy.Decide({members, rate, ceiling});
        Print({{"workers", members},
               {"samples_per_second", rate},
               {"per_worker", rate / members},
               {"best_per_worker", policy.best_per_worker()},
               {"decision", d.workers},
               {"reason", d.reason}});
        measured_after = newest;
        if (d.workers != members) {
          const json body = {{"workers", d.workers}, {"wait", true}};
          auto r = http.Post("/v1/resize", auth, body.dump(), "application/json");
          if (!r) {
            std::fprintf(stderr, "elastra-autoscaler: POST /v1/resize: %s\n",
                         httplib::to_string(r.error()).c_str());
          } else if (r->status == 200) {
            Print({{"resized", json::parse(r->body)}});
            ++resizes;
            measured_after = -1;  // measure the new size afresh
            if (flags.max_resizes > 0 && resizes >= flags.max_resizes) return 0;
          } else if (r->status == 409 || r->status == 202) {
            // Another change is in flight (or still is): decide again once it is done.
            Print({{"deferred", json::parse(r->body, nullptr, false)}});
            measured_after = -1;
          } else {
            std::fprintf(stderr, "elastra-autoscaler: resize to %d refused: HTTP %d %s\n",
                         d.workers, r->status, r->body.c_str());
            return 1;
          }
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.poll_ms));  // the poll period
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Resizes an Elastra job through its HTTP API by a throughput policy",
               "elastra-autoscaler"};
  app.add_option("--url", flags.url, "The job's HTTP API (coordinator.json's \"http\")")
      ->required();
  app.add_option("--token-file", flags.token_file, "The admin token (STATE_DIR/admin.token)")
      ->required();
  app.add_option("--min", flags.policy.min_workers, "Fewest workers")->capture_default_str();
  app.add_option("--max", flags.policy.max_workers, "Most workers")->capture_default_str();
  app.add_option("--step", flags.policy.step, "Workers added per grow")->capture_default_str();
  app.add_option("--tolerance", flags.policy.tolerance,
                 "Grow while samples/s per worker >= (1 - tolerance) x the best seen")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--settle-points", flags.settle_points,
                 "Training points (about 1 s each) a measurement averages")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--capacity-file", flags.capacity_file,
                 "A file holding the most workers the job may keep (capacity needed elsewhere)");
  app.add_option("--max-resizes", flags.max_resizes, "Exit 0 after this many resizes (0: never)")
      ->capture_default_str();
  app.add_option("--poll-ms", flags.poll_ms, "How often to read GET /v1/job")
      ->check(CLI::Range(10, 60000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (flags.policy.min_workers < 1 || flags.policy.max_workers < flags.policy.min_workers ||
      flags.policy.step < 1) {
    std::fprintf(stderr, "elastra-autoscaler: need 1 <= --min <= --max and --step >= 1\n");
    return 2;
  }
  signal(SIGUSR1, [](int) { ++g_capacity_signals; });
  signal(SIGTERM, [](int) { g_stop = true; });
  signal(SIGINT, [](int) { g_stop = true; });
  return Run(flags);
}
