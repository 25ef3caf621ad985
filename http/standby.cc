#include "http/standby.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "http/listener.h"
#include "http/routes.h"
#include "http/server.h"

namespace elastra::http {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The leader key's value as the answers carry it: a JSON object as it is, anything else as
// {"address": value}.
json LeaderJson(const std::string& value) {
  json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) return j;
  return json{{"address", value}};
}

}  // namespace

std::string DescribeLeader(const std::string& value) {
  const json j = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return value;
  const auto text = [&j](const char* key) {
    auto it = j.find(key);
    if (it == j.end()) return std::string();
    return it->is_string() ? it->get<std::string>() : it->dump();
  };
  std::string head = text("http");
  std::string rest;
  const auto add = [&rest](const std::string& part) {
    if (!part.empty()) rest += (rest.empty() ? "" : ", ") + part;
  };
  if (head.empty()) {
    head = text("control");
  } else if (!text("control").empty()) {
    add("control " + text("control"));
  }
  if (!text("host").empty()) add("host " + text("host"));
  if (!text("pid").empty()) add("pid " + text("pid"));
  if (head.empty()) return rest.empty() ? value : rest;
  return rest.empty() ? head : head + " (" + rest + ")";
}

class StandbyServer::Impl {
 public:
  explicit Impl(StandbyOptions options) : options_(std::move(options)) {}

  Status Start() {
    ELASTRA_ASSIGN_OR_RETURN(const auto listen, ParseHttpListen(options_.listen));
    listener_.Configure({.threads = options_.threads,
                         .read_timeout = options_.read_timeout,
                         .keep_alive_seconds = 1,
                         .max_body_bytes = 64 * 1024});
    const auto serve = [this](const httplib::Request& req, httplib::Response& res) {
      Serve(req, res);
    };
    server_.Get(".*", serve);
    server_.Post(".*", serve);
    server_.Put(".*", serve);
    server_.Delete(".*", serve);
    server_.Patch(".*", serve);
    // What no handler took: an unknown method gets the refusal too, a malformed request a JSON
    // error as the API's.
    server_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 404 || res.status == 405) return Serve(req, res);
      res.set_content(ErrorBody(res.status == 413 ? "request body too large" : "bad request"),
                      "application/json");
    });
    return listener_.Start(listen.first, listen.second);
  }

  void Stop() {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    listener_.Stop();
  }

  const std::string& url() const { return listener_.url(); }

 private:
  void Serve(const httplib::Request& req, httplib::Response& res) {
    json leader = nullptr;
    std::string why;
    StatusOr<std::string> value = options_.leader();
    if (value.ok()) {
      leader = LeaderJson(*value);
      why = "standby: job " + options_.job + " is led by " + DescribeLeader(*value);
    } else if (value.status().code() == StatusCode::kNotFound) {
      why = "standby: job " + options_.job + " has no leader now (an election is under way)";
    } else {
      why =
          "standby: job " + options_.job + ": cannot read its leader: " + value.status().message();
    }
    const bool health = (req.method == "GET" || req.method == "HEAD") && req.path == "/healthz";
    json body;
    if (health) {
      body = {{"ok", true},
              {"status", "ok"},
              {"role", "standby"},
              {"job", options_.job},
              {"leader", leader}};
      if (leader.is_null()) body["error"] = why;
      res.status = 200;
    } else {
      body = {{"error", why}, {"leader", leader}};
      res.status = 503;
      res.set_header("Retry-After", "1");
    }
    res.set_header("Cache-Control", "no-store");
    res.set_content(Dump(body), "application/json");
  }

  const StandbyOptions options_;
  httplib::Server server_;
  Listener listener_{&server_};  // after server_: it stops before server_ goes
  std::mutex stop_mu_;
  bool stopped_ = false;
};

StatusOr<std::unique_ptr<StandbyServer>> StandbyServer::Start(StandbyOptions options) {
  if (options.job.empty()) return InvalidArgumentError("a standby's HTTP needs the job's name");
  if (!options.leader) return InvalidArgumentError("a standby's HTTP needs the leader's reader");
  auto impl = std::make_unique<Impl>(std::move(options));
  ELASTRA_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<StandbyServer>(new StandbyServer(std::move(impl)));
}

StandbyServer::StandbyServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StandbyServer::~StandbyServer() { Stop(); }

void StandbyServer::Stop() { impl_->Stop(); }

const std::string& StandbyServer::url() const { return impl_->url(); }

}  // namespace elastra::http
