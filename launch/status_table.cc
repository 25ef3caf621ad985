#include "launch/status_table.h"

#include <cstdio>
#include <string>

#include "elastra/layout.h"

namespace elastra::launch {

namespace {

Layout LayoutOf(const nlohmann::json& j) {
  return Layout{j.value("dp", 0), j.value("pp", 0), j.value("tp", 0)};
}

}  // namespace

void PrintStatusTable(const nlohmann::json& st) {
  using nlohmann::json;
  const Layout layout = LayoutOf(st.value("layout", json::object()));
  const uint64_t generation = st.value("generation", uint64_t{0});
  // The size now (the committed generation's) and, when the coordinator keeps one, the size the
  // job returns to after failures and drains.
  std::string size = std::to_string(generation > 0 ? layout.world() : 0);
  const int target = st.value("target_workers", 0);
  const int spares = st.value("spares_target", 0);
  if (target > 0 && spares > 0) {
    size += " (target " + std::to_string(target) + ", spares " + std::to_string(spares) + ")";
  } else if (target > 0) {
    size += " (target " + std::to_string(target) + ")";
  }
  std::printf("job %s  state %s  generation %llu  layout %s  step %lld  workers %s\n",
              st.value("job", "").c_str(), st.value("state", "").c_str(),
              static_cast<unsigned long long>(generation), layout.ToString().c_str(),
              static_cast<long long>(st.value("step", int64_t{-1})), size.c_str());
  // Checkpoints to disk, when the job writes any: the newest committed, and a failure newer than
  // it (checkpoints fail now: a full disk, a write error), with the reason.
  const json ckpt = st.value("checkpoints", json::object());
  const int64_t committed = ckpt.value("committed_step", int64_t{-1});
  const int64_t failed = ckpt.value("last_error_step", int64_t{-1});
  if (committed >= 0) {
    std::printf("checkpoint: step %lld committed in %s\n", static_cast<long long>(committed),
                ckpt.value("committed_dir", "").c_str());
  }
  if (failed > committed) {
    std::printf("checkpoint FAILING: step %lld: %s\n", static_cast<long long>(failed),
                ckpt.value("last_error", "").c_str());
  }
  std::printf("%-10s %-9s %5s %8s %12s %8s  %s\n", "WORKER", "STATE", "RANK", "STEP", "HEARTBEAT",
              "PID", "HOST");
  for (const json& w : st.value("workers", json::array())) {
    const std::string hb =
        std::to_string(w.value("last_heartbeat_ms_ago", int64_t{-1})) + " ms ago";
    std::printf("%-10s %-9s %5d %8lld %12s %8lld  %s\n", w.value("id", "").c_str(),
                w.value("state", "").c_str(), w.value("rank", -1),
                static_cast<long long>(w.value("step", int64_t{-1})), hb.c_str(),
                static_cast<long long>(w.value("pid", int64_t{0})), w.value("host", "").c_str());
  }
  const json hosts = st.value("hosts", json::array());
  if (!hosts.empty()) {
    std::printf("%-16s %-24s %5s %4s %7s %-8s %12s\n", "HOST", "ADDRESS", "SLOTS", "GPUS",
                "WORKERS", "STATE", "HEARTBEAT");
    for (const json& h : hosts) {
      const int64_t ago = h.value("last_heartbeat_ms_ago", int64_t{-1});
      const std::string hb = ago < 0 ? "-" : std::to_string(ago) + " ms ago";
      std::printf("%-16s %-24s %5d %4d %7d %-8s %12s\n", h.value("name", "").c_str(),
                  h.value("address", "").c_str(), h.value("slots", 0), h.value("gpus", 0),
                  h.value("workers", 0), h.value("state", "").c_str(), hb.c_str());
    }
  }
  const json history = st.value("history", json::array());
  if (!history.empty()) {
    // GROUPS: the communicators the change built / kept from the generation before.
    std::printf("%-10s %-8s %7s %-16s %11s %11s\n", "GENERATION", "REASON", "WORKERS", "LAYOUT",
                "DOWNTIME", "GROUPS");
    for (const json& h : history) {
      const std::string groups = std::to_string(h.value("groups_rebuilt", 0)) + "/" +
                                 std::to_string(h.value("groups_kept", 0));
      std::printf("%-10llu %-8s %7zu %-16s %8.1f ms %11s\n",
                  static_cast<unsigned long long>(h.value("generation", uint64_t{0})),
                  h.value("reason", "").c_str(), h.value("workers", json::array()).size(),
                  LayoutOf(h.value("layout", json::object())).ToString().c_str(),
                  h.value("downtime_ms", 0.0), groups.c_str());
    }
  }
}

}  // namespace elastra::launch
