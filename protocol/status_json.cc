#include "protocol/status_json.h"

#include <nlohmann/json.hpp>

namespace elastra::proto {
namespace {

nlohmann::json LayoutJson(const Layout& l) { return {{"dp", l.dp}, {"pp", l.pp}, {"tp", l.tp}}; }

}  // namespace

std::string StatusJson(const JobStatus& s) {
  using nlohmann::json;
  json j;
  j["job"] = s.job;
  j["state"] = ToString(s.state);
  if (!s.waiting_reason.empty()) j["waiting_reason"] = s.waiting_reason;
  j["generation"] = s.generation;
  j["layout"] = LayoutJson(s.layout);
  j["step"] = s.step;
  json workers = json::array();
  for (const WorkerStatus& w : s.workers) {
    workers.push_back({{"id", w.id},
                       {"host", w.host},
                       {"pid", w.pid},
                       {"device", w.device},
                       {"state", ToString(w.state)},
                       {"rank", w.rank},
                       {"step", w.step},
                       {"last_heartbeat_ms_ago", w.last_heartbeat_ms_ago}});
  }
  j["workers"] = workers;
  json history = json::array();
  for (const GenerationRecord& h : s.history) {
    history.push_back({{"generation", h.generation},
                       {"reason", ToString(h.reason)},
                       {"workers", h.workers},
                       {"layout", LayoutJson(h.layout)},
                       {"downtime_ms", h.downtime_ms},
                       {"agreement_ms", h.agreement_ms},
                       {"rebuild_ms", h.rebuild_ms},
                       {"transfer_ms", h.transfer_ms},
                       {"bytes_moved", h.bytes_moved},
                       {"groups_rebuilt", h.groups_rebuilt},
                       {"groups_kept", h.groups_kept}});
  }
  j["history"] = history;
  json agents = json::array();
  for (const AgentStatus& a : s.agents) {
    agents.push_back({{"id", a.id}, {"host", a.host}, {"max_workers", a.max_workers}});
  }
  j["agents"] = agents;
  json hosts = json::array();
  for (const HostStatus& h : s.hosts) {
    hosts.push_back({{"name", h.name},
                     {"address", h.address},
                     {"slots", h.slots},
                     {"gpus", h.gpus},
                     {"workers", h.workers},
                     {"state", ToString(h.state)},
                     {"last_heartbeat_ms_ago", h.last_heartbeat_ms_ago}});
  }
  j["hosts"] = hosts;
  j["target_workers"] = s.target_workers;
  j["spares_target"] = s.spares_target;
  j["counters"] = {{"malformed_frames", s.malformed_frames},
                   {"stale_messages", s.stale_messages}};
  j["checkpoints"] = {{"committed_step", s.checkpoint_step},
                      {"committed_dir", s.checkpoint_dir},
                      {"last_error_step", s.checkpoint_error_step},
                      {"last_error", s.checkpoint_error}};
  if (s.resize_pending) {
    j["pending_resize"] = {{"workers", s.resize_workers},
                           {"waiting_for_workers", s.resize_waiting_for_workers}};
  }
  json metrics = json::object();
  for (const TrainingMetric& m : s.training.metrics) {
    metrics[m.name] = {{"value", m.value}, {"step", m.step}};
  }
  json series = json::array();
  for (const TrainingPoint& p : s.training.series) {
    json point = {
        {"step", p.step}, {"seconds", p.seconds}, {"samples_per_second", p.samples_per_second}};
    for (const TrainingMetric& m : p.metrics) point[m.name] = m.value;
    series.push_back(std::move(point));
  }
  j["training"] = {{"samples", s.training.samples},
                   {"samples_per_second", s.training.samples_per_second},
                   {"goodput", s.training.goodput},
                   {"running_seconds", s.training.running_seconds},
                   {"wall_seconds", s.training.wall_seconds},
                   {"metrics", metrics},
                   {"series", series}};
  // Names come from the wire (a worker's id, a host's name): bytes that are not UTF-8 are
  // replaced instead of making dump() throw.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string ResizeReplyJson(const ResizeReply& reply, const std::string& host) {
  nlohmann::json out = nlohmann::json::object();
  if (!host.empty()) out["host"] = host;
  out["phase"] = ToString(reply.phase);
  out["generation"] = reply.generation;
  out["workers"] = reply.workers;
  out["layout"] = LayoutJson(reply.layout);
  if (reply.phase == ResizePhase::kDone) {
    out["downtime_ms"] = reply.downtime_ms;
    out["agreement_ms"] = reply.agreement_ms;
    out["rebuild_ms"] = reply.rebuild_ms;
    out["transfer_ms"] = reply.transfer_ms;
    out["total_ms"] = reply.total_ms;
  }
  if (!reply.message.empty()) out["message"] = reply.message;
  return out.dump();
}

}  // namespace elastra::proto
