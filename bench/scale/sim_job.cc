#include "bench/scale/sim_job.h"

#include <algorithm>
#include <set>

#include "protocol/codec.h"
#include "common/logging.h"
#include "common/mesh_peers.h"

namespace elastra::scale {

using proto::MessageType;

namespace {

// ReconfigurationLoop::Join waits this long for the JoinReply, then the worker gives up.
constexpr SimTime kJoinTimeout = 10 * kSec;
// Commits a worker holds (CommitStore::kCommitsKept).
constexpr size_t kCommitsKept = 2;

std::string HostName(int host) { return "node" + std::to_string(host); }

void AddCommit(std::vector<int64_t>* commits, int64_t step) {
  if (!commits->empty() && commits->back() == step) return;
  commits->push_back(step);
  if (commits->size() > kCommitsKept) commits->erase(commits->begin());
}

}  // namespace

SimJob::SimJob(EventLoop* loop, SimCoordinator* coordinator, JobModel model, std::string job)
    : loop_(loop), coordinator_(coordinator), model_(model), job_(std::move(job)) {
  admin_ = coordinator_->Connect(proto::Role::kAdmin, [this](const Frame& f) { OnAdminFrame(f); });
  if (!model_.state.tensors.empty()) {
    state_ = model_.state;
    return;
  }
  // A replicated data-parallel state: every layout fits, and the planner's rank assignment does
  // its region math over these tensors on every planned change.
  state_.num_layers = 1;
  for (int i = 0; i < model_.tensors; ++i) {
    TensorSpec t;
    t.name = "layer" + std::to_string(i) + ".weight";
    t.shape = {4096, 4096};
    t.element_size = 2;
    state_.tensors.push_back(t);
  }
}

SimJob::~SimJob() = default;

// ---------------------------------------------------------------------------------------------
// Processes.

int SimJob::AddWorker(const std::string& id, int host) {
  const int index = static_cast<int>(workers_.size());
  Worker w;
  w.index = index;
  w.id = id;
  w.host = host;
  w.client = coordinator_->Connect(proto::Role::kWorker,
                                   [this, index](const Frame& f) { OnWorkerFrame(index, f); });
  workers_.push_back(std::move(w));
  return index;
}

void SimJob::Launch(int workers) {
  // One host more than the workers fill: its free slots are where the planned grow goes (the
  // coordinator refuses a resize beyond the slots the agents registered).
  const int hosts = (workers + model_.host_size - 1) / model_.host_size + 1;
  for (int h = 0; h < hosts; ++h) {
    const int a = static_cast<int>(agents_.size());
    Agent agent;
    agent.host = h;
    agent.name = HostName(h);
    agent.client =
        coordinator_->Connect(proto::Role::kAdmin, [this, a](const Frame& f) { OnAgentFrame(a, f); });
    agents_.push_back(agent);
    // Registers at start (a call), then again every agent_register_us (fire and forget).
    loop_->After(loop_->Uniform(100 * kMs), [this, a] {
      RegisterAgent(a, 1);
      loop_->After(model_.agent_register_us, [this, a] { AgentTick(a); });
    });
  }
  for (int i = 0; i < workers; ++i) {
    const int w = AddWorker("w" + std::to_string(i), i / model_.host_size);
    loop_->After(100 * kMs + loop_->Uniform(model_.join_spread_us), [this, w] { StartWorker(w); });
  }
}

void SimJob::RegisterAgent(int a, uint64_t request_id) {
  const Agent& agent = agents_[a];
  if (!agent.alive) return;
  proto::AgentRegister r{agent.name, model_.host_size,
                         "10.0." + std::to_string(a / 250) + "." + std::to_string(a % 250),
                         model_.host_size};
  coordinator_->Send(agent.client, proto::MakeFrame(MessageType::kAgentRegister, r, job_, 0,
                                                    "agent-" + agent.name, request_id));
}

void SimJob::WatchAgents() {
  if (model_.agent_heartbeat_us <= 0) return;
  for (int a = 0; a < static_cast<int>(agents_.size()); ++a) {
    if (agents_[a].heartbeating) continue;
    agents_[a].heartbeating = true;
    loop_->After(1 + loop_->Uniform(model_.agent_heartbeat_us), [this, a] { AgentHeartbeat(a); });
  }
}

void SimJob::AgentHeartbeat(int a) {
  const Agent& agent = agents_[a];
  if (!agent.alive) return;
  coordinator_->Send(agent.client, proto::MakeFrame(MessageType::kHeartbeat, proto::Heartbeat{},
                                                    job_, 0, "agent-" + agent.name, 0));
  loop_->After(model_.agent_heartbeat_us, [this, a] { AgentHeartbeat(a); });
}

void SimJob::AgentTick(int a) {
  if (!agents_[a].alive) return;
  RegisterAgent(a, 0);
  loop_->After(model_.agent_register_us, [this, a] { AgentTick(a); });
}

template <class T>
void SimJob::SendFrom(int w, proto::MessageType type, const T& payload, uint64_t request_id,
                      double weight) {
  const Worker& x = workers_[w];
  coordinator_->Send(x.client,
                     proto::MakeFrame(type, payload, job_, x.generation, x.id, request_id), weight);
}
// What sim_job_generation.cc sends (the template is defined here, beside MakeFrame's include).
template void SimJob::SendFrom(int, proto::MessageType, const proto::KvSetRequest&, uint64_t,
                               double);
template void SimJob::SendFrom(int, proto::MessageType, const proto::KvGetRequest&, uint64_t,
                               double);
template void SimJob::SendFrom(int, proto::MessageType, const proto::KvWaitRequest&, uint64_t,
                               double);
template void SimJob::SendFrom(int, proto::MessageType, const proto::KvSetAndGetRequest&,
                               uint64_t, double);
template void SimJob::SendFrom(int, proto::MessageType, const proto::GenerationReady&, uint64_t,
                               double);

void SimJob::StartWorker(int w) {
  Worker& x = workers_[w];
  if (x.state != State::kStarting) return;
  x.state = State::kJoining;
  proto::JoinRequest join;
  join.worker_id = x.id;
  join.host = HostName(x.host);
  join.device = x.index % model_.host_size;
  join.pid = 10000 + x.index;
  join.state = state_;
  join.device_memory_bytes = model_.device_memory_bytes;
  if (model_.peer_rendezvous) {
    // A record server on the worker's host (10.h.h.h), one port per local slot.
    join.rendezvous = PackEndpoint(htonl(0x0a000000u + static_cast<uint32_t>(x.host)),
                                   htons(static_cast<uint16_t>(30000 + x.index % model_.host_size)));
  }
  x.join_request = x.next_request++;
  SendFrom(w, MessageType::kJoin, join, x.join_request);
  loop_->After(kJoinTimeout, [this, w, request = x.join_request] {
    Worker& y = workers_[w];
    if (y.state != State::kJoining || y.join_request != request) return;
    ++join_failures_;  // "joining the job: timed out": the program exits
    Die(w, 1, 0, true);
  });
}

void SimJob::Die(int w, int exit_code, int signal, bool reported) {
  Worker& x = workers_[w];
  if (x.state == State::kDead || x.state == State::kLeft) return;
  x.state = State::kDead;
  ++x.hb_token;
  x.ops.clear();
  const Agent& agent = agents_[x.host];
  if (!reported || !agent.alive) return;
  const int a = agent.host;
  loop_->After(model_.reap_us, [this, a, id = x.id, exit_code, signal] {
    if (!agents_[a].alive) return;
    proto::ProcessExited exited{id, exit_code, signal};
    coordinator_->Send(agents_[a].client, proto::MakeFrame(MessageType::kProcessExited, exited,
                                                           job_, 0, "agent-" + agents_[a].name, 0));
  });
}

void SimJob::Heartbeat(int w, uint64_t token) {
  Worker& x = workers_[w];
  if (token != x.hb_token || x.state == State::kDead || x.state == State::kLeft) return;
  if (x.hb_step != x.step) {
    x.hb_frame = proto::MakeFrame(MessageType::kHeartbeat, proto::Heartbeat{x.step}, job_,
                                  x.generation, x.id, 0);
    x.hb_step = x.step;
  }
  coordinator_->Send(x.client, x.hb_frame);
  loop_->After(x.hb_interval, [this, w, token] { Heartbeat(w, token); });
}

void SimJob::OnWorkerFrame(int w, const Frame& frame) {
  Worker& x = workers_[w];
  if (x.state == State::kDead || x.state == State::kLeft) return;
  const MessageType type = FrameType(*frame);
  if (type == MessageType::kNewGeneration) {
    OnNewGeneration(w, frame);
    return;
  }
  auto e = proto::DecodeEnvelope(*frame);
  if (!e.ok()) return;
  switch (type) {
    case MessageType::kJoinReply: {
      if (x.state != State::kJoining || e->request_id != x.join_request) return;
      auto reply = proto::DecodePayload<proto::JoinReply>(e->payload);
      if (!reply.ok()) return;
      x.state = State::kStandby;
      x.hb_interval = reply->heartbeat_interval_ms * kMs;
      const uint64_t token = ++x.hb_token;
      loop_->After(1 + loop_->Uniform(x.hb_interval), [this, w, token] { Heartbeat(w, token); });
      if (x.parked) {
        ++parked_;
        loop_->After(model_.parked_status_us, [this, w, token] { PollStatus(w, token); });
        return;
      }
      ++joined_;
      last_join_reply_ = loop_->now();
      return;
    }
    case MessageType::kError: {
      auto error = proto::DecodePayload<proto::ErrorReply>(e->payload);
      if (!error.ok()) return;
      if (x.state == State::kJoining && e->request_id == x.join_request) {
        ++join_failures_;
        Die(w, 1, 0, true);
        return;
      }
      if (x.state != State::kBuilding || e->request_id != x.op_request) return;
      if (error->code == static_cast<int32_t>(StatusCode::kTimedOut)) {
        RunOp(w);  // CoordinatorStore asks again in its next slice
        return;
      }
      // The rendezvous failed (the store refused a key): the build fails, the worker reports it
      // and waits for the coordinator's decision.
      if (build_failures_++ == 0) first_build_error_ = error->message;
      proto::FailureReport report{x.building, error->code, error->message};
      x.ops.clear();
      x.building = 0;
      x.state = State::kWaiting;
      SendFrom(w, MessageType::kFailureReport, report, 0);
      return;
    }
    case MessageType::kKvReply:
    case MessageType::kKvValues:
      OnKvReply(w, *e);
      return;
    case MessageType::kPauseRequest: {
      auto pause = proto::DecodePayload<proto::PauseRequest>(e->payload);
      if (pause.ok()) x.pause_target = std::max(x.pause_target, pause->target_generation);
      return;
    }
    case MessageType::kRecoverRequest:
      OnRecover(w, *e);
      return;
    case MessageType::kShutdown:
      Die(w, 1, 0, true);  // declared lost: it must exit
      return;
    default:
      return;
  }
}

void SimJob::OnAgentFrame(int a, const Frame& frame) {
  if (!agents_[a].alive) return;
  auto e = proto::DecodeEnvelope(*frame);
  if (!e.ok() || e->type != MessageType::kSpawnRequest) return;
  auto spawn = proto::DecodePayload<proto::SpawnRequest>(e->payload);
  if (!spawn.ok()) return;
  for (const auto& id : spawn->worker_ids) {
    const int w = AddWorker(id, agents_[a].host);
    loop_->After(model_.spawn_us, [this, w] { StartWorker(w); });
  }
}

void SimJob::OnAdminFrame(const Frame& frame) {
  auto e = proto::DecodeEnvelope(*frame);
  if (!e.ok() || e->request_id != admin_request_) return;
  if (e->type == MessageType::kError) {
    auto error = proto::DecodePayload<proto::ErrorReply>(e->payload);
    resize_.over = true;
    resize_.phase = proto::ResizePhase::kFailed;
    resize_.message = error.ok() ? error->message : "error";
    resize_.answered = loop_->now();
    return;
  }
  if (e->type != MessageType::kResizeReply) return;
  auto reply = proto::DecodePayload<proto::ResizeReply>(e->payload);
  if (!reply.ok()) return;
  if (reply->phase == proto::ResizePhase::kAccepted) {
    resize_.accepted = true;
    return;
  }
  resize_.over = true;
  resize_.phase = reply->phase;
  resize_.workers = reply->workers;
  resize_.message = reply->message;
  resize_.answered = loop_->now();
}

// ---------------------------------------------------------------------------------------------
// Operations of the scenario.

void SimJob::Resize(int workers) {
  resize_ = ResizeOutcome{};
  resize_.sent = loop_->now();
  proto::ResizeRequest req;
  req.workers = workers;
  req.wait = true;
  coordinator_->Send(admin_, proto::MakeFrame(MessageType::kResize, req, job_, 0, "admin",
                                              ++admin_request_));
}

std::vector<std::string> SimJob::KillMembers(int count) {
  std::vector<int> running;
  for (const auto& x : workers_) {
    if (x.state == State::kRunning) running.push_back(x.index);
  }
  std::shuffle(running.begin(), running.end(), loop_->rng());
  std::vector<std::string> killed;
  for (int i = 0; i < count && i < static_cast<int>(running.size()); ++i) {
    killed.push_back(workers_[running[i]].id);
    Die(running[i], 0, 9, /*reported=*/true);
  }
  return killed;
}

std::string SimJob::KillHost() {
  std::map<int, std::vector<int>> by_host;
  for (const auto& x : workers_) {
    if (x.state != State::kDead && x.state != State::kLeft) by_host[x.host].push_back(x.index);
  }
  for (auto it = by_host.rbegin(); it != by_host.rend(); ++it) {
    const auto& ws = it->second;
    if (!agents_[it->first].alive || static_cast<int>(ws.size()) != model_.host_size) continue;
    if (!std::all_of(ws.begin(), ws.end(),
                     [&](int w) { return workers_[w].state == State::kRunning; })) {
      continue;
    }
    agents_[it->first].alive = false;
    for (int w : ws) Die(w, 0, 9, /*reported=*/false);
    return agents_[it->first].name;
  }
  return "";
}

std::vector<std::string> SimJob::AddSpares(int count) {
  // The host Launch registered beyond the workers: its agent's slots are free.
  const int host = static_cast<int>(agents_.size()) - 1;
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) {
    ids.push_back("spare" + std::to_string(spares_++));
    const int w = AddWorker(ids.back(), host);
    loop_->After(loop_->Uniform(100 * kMs), [this, w] { StartWorker(w); });
  }
  return ids;
}

void SimJob::Park(int w) {
  // ReconfigurationLoop::Park: the communicators and the state go, the worker joins again under
  // its own id and, while parked, asks for the job's status about once a second.
  Worker& x = workers_[w];
  x.parked = true;
  x.generation = 0;
  x.rank = x.layout_rank = -1;
  x.layout = Layout{};
  x.commits.clear();
  ++x.hb_token;  // the lease comes again with the JoinReply
  x.state = State::kStarting;
  StartWorker(w);
}

void SimJob::PollStatus(int w, uint64_t token) {
  Worker& x = workers_[w];
  if (token != x.hb_token || !x.parked || x.state != State::kStandby) return;
  proto::StatusRequest brief;
  brief.brief = true;  // as ReconfigurationLoop::CheckJobWhileParked asks
  SendFrom(w, MessageType::kStatusRequest, brief, x.next_request++);
  loop_->After(model_.parked_status_us, [this, w, token] { PollStatus(w, token); });
}

// Building a generation (OnNewGeneration to Ready): sim_job_generation.cc.

// ---------------------------------------------------------------------------------------------
// Training, pausing, failing.

SimTime SimJob::AgreementUs(int world) const {
  // The per-step pause agreement, an 8-byte allreduce on the Gloo control world: recursive
  // doubling at every size, floor(log2 N) rounds, two more when N is not a power of two
  // (docs/collectives.md).
  int rounds = 0;
  while ((1 << rounds) < world) ++rounds;
  if ((world & (world - 1)) != 0) rounds += 1;  // floor(log2 N) rounds plus fold and unfold
  return static_cast<SimTime>(rounds) * model_.hop_us;
}

void SimJob::StartTraining(Build& b) {
  training_.running = true;
  training_.generation = b.generation;
  training_.members = b.members;
  training_.step = b.ng->restore_step;
  const uint64_t token = ++training_.token;
  loop_->After(model_.step_us, [this, token] { StepEnd(token); });
}

void SimJob::StepEnd(uint64_t token) {
  if (token != training_.token || !training_.running) return;
  const int world = static_cast<int>(training_.members.size());
  // A member that died breaks the step's collectives: the ranks next to it on the ring see the
  // connection fail (at once for a killed process, after the collective timeout for a host that
  // vanished) and report; the others stay blocked until the coordinator's RecoverRequest.
  std::set<int> report;
  bool broken = false;
  for (int r = 0; r < world; ++r) {
    const int w = training_.members[r];
    if (w >= 0 && workers_[w].state == State::kRunning) continue;
    broken = true;
    const bool silent = w >= 0 && !agents_[workers_[w].host].alive;
    for (int d : {-1, 1}) {
      const int n = training_.members[(r + d + world) % world];
      if (n >= 0 && workers_[n].state == State::kRunning) {
        report.insert(n);
        loop_->After(silent ? model_.collective_timeout_us : 2 * model_.hop_us,
                     [this, n, g = training_.generation] {
                       Worker& y = workers_[n];
                       if (y.state != State::kRunning || y.generation != g) return;
                       y.state = State::kWaiting;
                       SendFrom(n, MessageType::kFailureReport,
                                proto::FailureReport{g, static_cast<int32_t>(StatusCode::kPeerLost),
                                                     "connection reset by peer"},
                                0);
                     });
      }
    }
  }
  if (broken) {
    training_.running = false;
    return;
  }
  ++training_.step;
  uint64_t target = 0;
  for (int w : training_.members) {
    Worker& x = workers_[w];
    x.step = training_.step;
    if (x.step % model_.commit_every == 0) AddCommit(&x.commits, x.step);
    target = std::max(target, x.pause_target);
  }
  if (target > training_.generation) {
    training_.running = false;
    const SimTime agreed = AgreementUs(world) + model_.commit_us;
    for (int w : training_.members) {
      loop_->After(agreed + loop_->Uniform(2 * kMs), [this, w, target] { Pause(w, target); });
    }
    return;
  }
  loop_->After(model_.step_us, [this, token] { StepEnd(token); });
}

std::vector<proto::GroupHealth> SimJob::GroupsOf(const Worker& x) const {
  // A worker stops at a step's end (the simulation's failures too: StepEnd), when no call is in
  // flight: every group it holds is intact. Its counts are the steps its generations ran, the
  // same for every member of a group, and each pipeline message sent was received. A group is
  // reported as the generation's it runs, kept or built: what PlanKeptGroups asks of a group it
  // keeps again. (The worker's GroupGate reports the generation that built it, so that a group
  // kept once is built at the next change: docs/scale.md, "Findings".)
  std::vector<proto::GroupHealth> groups;
  if (x.layout_rank < 0 || x.generation == 0) return groups;
  const Layout& l = x.layout;
  const Coordinates c = CoordinatesOf(l, x.layout_rank);
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    const int size = kind == proto::kDpGroup ? l.dp : kind == proto::kPpGroup ? l.pp : l.tp;
    if (size <= 1 || size == l.world()) continue;  // no group, or the world itself
    proto::GroupHealth h;
    h.kind = kind;
    h.generation = x.generation;
    h.intact = true;
    if (kind == proto::kTpGroup) h.calls = x.step * kTpCallsPerStep;
    if (kind == proto::kDpGroup) h.calls = x.step * kDpCallsPerStep;
    if (kind == proto::kPpGroup) {
      for (int peer : {c.pp_rank - 1, c.pp_rank + 1}) {
        if (peer < 0 || peer >= size) continue;
        h.peers.push_back(peer);
        h.sent.push_back(x.step * kPipelineMessagesPerStep);
        h.received.push_back(x.step * kPipelineMessagesPerStep);
      }
    }
    groups.push_back(std::move(h));
  }
  return groups;
}

void SimJob::Pause(int w, uint64_t target) {
  Worker& x = workers_[w];
  if (x.state != State::kRunning) return;
  AddCommit(&x.commits, x.step);
  x.answered_target = std::max(x.answered_target, target);
  x.state = State::kWaiting;
  proto::PausedReport report{target, x.step, x.commits, false};
  report.groups = GroupsOf(x);
  SendFrom(w, MessageType::kPaused, report, 0);
}

void SimJob::OnRecover(int w, const proto::Envelope& e) {
  Worker& x = workers_[w];
  auto req = proto::DecodePayload<proto::RecoverRequest>(e.payload);
  if (!req.ok() || req->target_generation <= x.generation) return;
  if (req->target_generation <= x.answered_target && x.state == State::kWaiting) return;
  // The I/O thread interrupts the communicators (every collective of the generation breaks) and
  // answers at once; a build in progress is abandoned (its rendezvous cancelled).
  if (training_.running && training_.generation == x.generation) training_.running = false;
  x.ops.clear();
  x.building = 0;
  x.answered_target = std::max(x.answered_target, req->target_generation);
  x.state = State::kWaiting;
  proto::PausedReport report{req->target_generation, x.step, x.commits, true};
  report.groups = GroupsOf(x);
  SendFrom(w, MessageType::kPaused, report, 0);
}

}  // namespace elastra::scale
