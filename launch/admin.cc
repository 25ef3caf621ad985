// elastra resize | status | keygen: the admin side, what an external scheduler calls.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <nlohmann/json.hpp>

#include "common/control_client.h"
#include "common/keys.h"
#include "launch/commands.h"

namespace elastra::launch {
namespace {

using proto::MessageType;
using std::chrono::milliseconds;

constexpr char kDefaultStateDir[] = ".elastra";

// Connects with the admin credentials from DIR/coordinator.json; prints why on failure.
std::unique_ptr<ControlClient> ConnectAdmin(const std::string& command,
                                            const std::string& state_dir) {
  auto info = ReadConnectionInfo(state_dir + "/coordinator.json");
  if (!info.ok()) {
    std::fprintf(stderr, "elastra %s: no job found in %s: %s\n", command.c_str(),
                 state_dir.c_str(), info.status().ToString().c_str());
    return nullptr;
  }
  ControlClientOptions o;
  o.address = info->address;
  o.server_public = info->server_public;
  o.client_keys = info->admin;
  o.job = info->job;
  o.sender = "admin-" + std::to_string(getpid());
  o.connect_timeout = milliseconds(5000);
  auto client = ControlClient::Connect(o);
  if (!client.ok()) {
    std::fprintf(stderr, "elastra %s: %s\n", command.c_str(), client.status().ToString().c_str());
    return nullptr;
  }
  return std::move(client).value();
}

nlohmann::json LayoutJson(const Layout& l) { return {{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}}; }

// The "done" reply of a resize read back from the job's status: no resize pending, and a
// generation newer than `before` with the requested workers (and layout) in the history.
// nullopt while that is not so, or when the status cannot be read.
std::optional<proto::ResizeReply> DoneFromStatus(ControlClient& client, uint64_t before,
                                                 const proto::ResizeRequest& req) {
  auto st = client.Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                            milliseconds(2000));
  if (!st.ok()) return std::nullopt;
  auto j = nlohmann::json::parse(st->json, nullptr, false);
  if (!j.is_object() || j.contains("pending_resize") || !j.contains("history")) return std::nullopt;
  if (!j["history"].is_array()) return std::nullopt;
  for (const auto& h : j["history"]) {
    // Entries list the generation's worker ids; a malformed entry is skipped, never thrown on.
    if (!h.is_object() || !h.contains("workers") || !h["workers"].is_array() ||
        !h.contains("layout") || !h["layout"].is_object() || !h["generation"].is_number()) {
      continue;
    }
    if (h["generation"].get<uint64_t>() <= before ||
        static_cast<int>(h["workers"].size()) != req.workers) {
      continue;
    }
    auto number = [](const nlohmann::json& o, const char* key) {
      return o.contains(key) && o[key].is_number() ? o[key].get<double>() : 0.0;
    };
    Layout l;
    l.dp = static_cast<int>(number(h["layout"], "dp"));
    l.pp = static_cast<int>(number(h["layout"], "pp"));
    l.tp = static_cast<int>(number(h["layout"], "tp"));
    if (req.has_layout && !(l == req.layout)) continue;
    proto::ResizeReply r;
    r.phase = "done";
    r.generation = h["generation"].get<uint64_t>();
    r.workers = req.workers;
    r.layout = l;
    r.downtime_ms = number(h, "downtime_ms");
    r.agreement_ms = number(h, "agreement_ms");
    r.rebuild_ms = number(h, "rebuild_ms");
    r.transfer_ms = number(h, "transfer_ms");
    r.message = "confirmed from the job's status (the coordinator restarted meanwhile)";
    return r;
  }
  return std::nullopt;
}

}  // namespace

int ResizeCommand(const Args& args) {
  FlagParser flags("resize", args);
  if (!flags.Parse({"state-dir", "workers", "layout", "timeout"}, {"wait"})) return 2;
  if (!flags.Has("workers")) {
    std::fprintf(stderr, "elastra resize: --workers N is required\n");
    return 2;
  }
  long long workers = 0, timeout_s = 600;
  if (!flags.GetInt("workers", 1, 1 << 20, &workers)) return 2;
  if (!flags.GetInt("timeout", 1, 86400, &timeout_s)) return 2;
  proto::ResizeRequest req;
  req.workers = static_cast<int32_t>(workers);
  req.wait = flags.Has("wait");
  if (flags.Has("layout")) {
    if (!ParseLayout(flags.Get("layout"), &req.layout)) {
      std::fprintf(stderr, "elastra resize: --layout must look like dp=2,pp=1,tp=2, got '%s'\n",
                   flags.Get("layout").c_str());
      return 2;
    }
    req.has_layout = true;
  }
  auto client = ConnectAdmin("resize", flags.Get("state-dir", kDefaultStateDir));
  if (client == nullptr) return 1;
  auto first = client->Call<proto::ResizeReply>(MessageType::kResize, req, milliseconds(10000));
  if (!first.ok()) {
    std::fprintf(stderr, "elastra resize: refused: %s\n", first.status().message().c_str());
    return 1;
  }
  proto::ResizeReply reply = *first;
  if (req.wait && reply.phase == "accepted") {
    const uint64_t id = client->last_request_id();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
    for (;;) {
      const auto left = std::chrono::duration_cast<milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::fprintf(stderr, "elastra resize: not done within %lld s\n", timeout_s);
        return 1;
      }
      auto second = client->AwaitReply(id, std::min(left, milliseconds(1000)));
      if (second.ok()) {
        auto decoded = proto::DecodePayload<proto::ResizeReply>(second->payload);
        if (!decoded.ok()) {
          std::fprintf(stderr, "elastra resize: %s\n", decoded.status().ToString().c_str());
          return 1;
        }
        reply = *decoded;
        break;
      }
      if (second.status().code() != StatusCode::kTimedOut) {
        std::fprintf(stderr, "elastra resize: %s\n", second.status().ToString().c_str());
        return 1;
      }
      // A coordinator restarted from its journal (docs/journal.md) finishes the resize but no
      // longer knows who waits for it: the job's status tells when it is done.
      if (auto done = DoneFromStatus(*client, reply.generation, req)) {
        // The real reply, when it is on its way, has the full timings.
        auto late = client->AwaitReply(id, milliseconds(300));
        auto decoded = late.ok() ? proto::DecodePayload<proto::ResizeReply>(late->payload)
                                 : StatusOr<proto::ResizeReply>(late.status());
        reply = decoded.ok() ? *decoded : *done;
        break;
      }
    }
  }
  nlohmann::json out;
  out["phase"] = reply.phase;
  out["generation"] = reply.generation;
  out["workers"] = reply.workers;
  out["layout"] = LayoutJson(reply.layout);
  if (reply.phase == "done") {
    out["downtime_ms"] = reply.downtime_ms;
    out["agreement_ms"] = reply.agreement_ms;
    out["rebuild_ms"] = reply.rebuild_ms;
    out["transfer_ms"] = reply.transfer_ms;
    out["total_ms"] = reply.total_ms;
  }
  if (!reply.message.empty()) out["message"] = reply.message;
  std::printf("%s\n", out.dump().c_str());
  return reply.phase == "failed" ? 1 : 0;
}

int StatusCommand(const Args& args) {
  FlagParser flags("status", args);
  if (!flags.Parse({"state-dir"}, {"json"})) return 2;
  auto client = ConnectAdmin("status", flags.Get("state-dir", kDefaultStateDir));
  if (client == nullptr) return 1;
  auto reply = client->Call<proto::StatusReply>(MessageType::kStatusRequest, proto::StatusRequest{},
                                                milliseconds(5000));
  if (!reply.ok()) {
    std::fprintf(stderr, "elastra status: %s\n", reply.status().ToString().c_str());
    return 1;
  }
  if (flags.Has("json")) {
    std::printf("%s\n", reply->json.c_str());
    return 0;
  }
  auto j = nlohmann::json::parse(reply->json, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "elastra status: the coordinator sent unreadable JSON\n");
    return 1;
  }
  auto layout = j.value("layout", nlohmann::json::object());
  std::printf("job %s  state %s  generation %llu  layout dp=%d,pp=%d,tp=%d  step %lld\n",
              j.value("job", std::string("?")).c_str(), j.value("state", std::string("?")).c_str(),
              static_cast<unsigned long long>(j.value("generation", 0ULL)),
              layout.value("dp", 0), layout.value("pp", 0), layout.value("tp", 0),
              static_cast<long long>(j.value("step", 0LL)));
  std::printf("%-10s %-9s %5s %8s %12s %8s  %s\n", "WORKER", "STATE", "RANK", "STEP",
              "HEARTBEAT", "PID", "HOST");
  for (const auto& w : j.value("workers", nlohmann::json::array())) {
    std::string hb = std::to_string(w.value("last_heartbeat_ms_ago", 0LL)) + " ms ago";
    std::printf("%-10s %-9s %5d %8lld %12s %8lld  %s\n", w.value("id", std::string()).c_str(),
                w.value("state", std::string()).c_str(), w.value("rank", -1),
                static_cast<long long>(w.value("step", 0LL)), hb.c_str(),
                static_cast<long long>(w.value("pid", 0LL)),
                w.value("host", std::string()).c_str());
  }
  auto history = j.value("history", nlohmann::json::array());
  if (!history.empty()) {
    std::printf("%-10s %-8s %7s %-16s %11s\n", "GENERATION", "REASON", "WORKERS", "LAYOUT",
                "DOWNTIME");
    for (const auto& h : history) {
      auto l = h.value("layout", nlohmann::json::object());
      char lay[64];
      std::snprintf(lay, sizeof(lay), "dp=%d,pp=%d,tp=%d", l.value("dp", 0), l.value("pp", 0),
                    l.value("tp", 0));
      auto members = h.value("workers", nlohmann::json::array());
      int count = members.is_array() ? static_cast<int>(members.size()) : members.get<int>();
      std::printf("%-10llu %-8s %7d %-16s %8.1f ms\n",
                  static_cast<unsigned long long>(h.value("generation", 0ULL)),
                  h.value("reason", std::string()).c_str(), count, lay,
                  h.value("downtime_ms", 0.0));
    }
  }
  return 0;
}

int KeygenCommand(const Args& args) {
  FlagParser flags("keygen", args);
  if (!flags.Parse({"out"}, {})) return 2;
  auto keys = GenerateKeyPair();
  if (!keys.ok()) {
    std::fprintf(stderr, "elastra keygen: %s\n", keys.status().ToString().c_str());
    return 1;
  }
  if (flags.Has("out")) {
    Status s = WriteKeyFile(flags.Get("out"), *keys);
    if (!s.ok()) {
      std::fprintf(stderr, "elastra keygen: %s\n", s.ToString().c_str());
      return 1;
    }
    std::printf("{\"public\":\"%s\",\"file\":\"%s\"}\n", keys->public_key.c_str(),
                flags.Get("out").c_str());
    return 0;
  }
  std::printf("{\"public\":\"%s\",\"secret\":\"%s\"}\n", keys->public_key.c_str(),
              keys->secret_key.c_str());
  return 0;
}

}  // namespace elastra::launch
