// The autoscaler's policy (examples/autoscaler/README.md), apart from HTTP so that its test steps
// it with made-up observations: grow one step at a time while the samples per second per worker
// stay within a tolerance of the best seen; once they fall out of it, go back to the last size
// that was within it and grow no further; shrink when capacity is needed (a ceiling below the
// current size). Pure; not thread-safe.
#pragma once

#include <algorithm>
#include <optional>
#include <string>

namespace elastra::autoscaler {

struct PolicyOptions {
  int min_workers = 1;     // never below
  int max_workers = 8;     // never above
  int step = 1;            // workers added per grow
  double tolerance = 0.1;  // grow while per-worker samples/s >= (1 - tolerance) * best seen
};

// One settled measurement: the job at `workers`, consuming `samples_per_second`.
struct Observation {
  int workers = 0;
  double samples_per_second = 0;
  // The most workers the job may hold now (capacity needed elsewhere), if any.
  std::optional<int> ceiling;
};

struct Decision {
  int workers = 0;     // the size to resize to; equal to the observation's: hold
  std::string reason;  // why, in words
};

class Policy {
 public:
  explicit Policy(PolicyOptions options) : o_(options) {}

  Decision Decide(const Observation& now) {
    const int cap = std::min(o_.max_workers, now.ceiling.value_or(o_.max_workers));
    if (now.workers > cap) {
      return {std::max(o_.min_workers, cap), "capacity needed: at most " + std::to_string(cap)};
    }
    if (now.workers <= 0) return {now.workers, "no workers"};
    const double per_worker = now.samples_per_second / now.workers;
    best_ = std::max(best_, per_worker);
    if (per_worker < (1 - o_.tolerance) * best_) {
      // Growing stopped paying: back to the last good size, and no higher from now on.
      plateau_ = std::max(o_.min_workers, last_good_);
      if (now.workers > plateau_) {
        return {plateau_, "per-worker throughput " + std::to_string(per_worker) + " fell below " +
                              std::to_string(1 - o_.tolerance) + " of the best " +
                              std::to_string(best_)};
      }
      return {now.workers, "holding below the plateau"};
    }
    last_good_ = now.workers;
    const int limit = std::min(cap, plateau_ > 0 ? plateau_ : o_.max_workers);
    if (now.workers < limit) {
      return {std::min(limit, now.workers + o_.step),
              "per-worker throughput " + std::to_string(per_worker) + " is within " +
                  std::to_string(o_.tolerance) + " of the best " + std::to_string(best_)};
    }
    return {now.workers, "at the limit of " + std::to_string(limit)};
  }

  double best_per_worker() const { return best_; }

 private:
  PolicyOptions o_;
  double best_ = 0;
  int last_good_ = 0;
  int plateau_ = 0;  // 0: none found yet
};

}  // namespace elastra::autoscaler
