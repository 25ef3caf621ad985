#include "bench/scale/sim_job.h"

#include <algorithm>
#include <set>

#include "common/codec.h"
#include "common/logging.h"
#include "common/mesh_peers.h"

namespace elastra::scale {

using proto::MessageType;

namespace {

// CoordinatorStore's slice of a blocking get or wait (worker/coordinator_store.h).
constexpr int64_t kKvSliceMs = 200;
// ReconfigurationLoop::Join waits this long for the JoinReply, then the worker gives up.
constexpr SimTime kJoinTimeout = 10 * kSec;
// Commits a worker holds (CommitStore::kCommitsKept).
constexpr size_t kCommitsKept = 2;

// The generation in an envelope's header: after magic (4), version (2), type (2) and the job
// name (a u64 length and its bytes). 0 when the frame is too short.
uint64_t FrameGeneration(const std::string& frame) {
  auto u64 = [&](size_t at) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(frame[at + i])) << (8 * i);
    return v;
  };
  if (frame.size() < 16) return 0;
  const uint64_t job = u64(8);
  if (frame.size() < 16 + job + 8) return 0;
  return u64(16 + job);
}

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
      ++joined_;
      last_join_reply_ = loop_->now();
      const uint64_t token = ++x.hb_token;
      loop_->After(1 + loop_->Uniform(x.hb_interval), [this, w, token] { Heartbeat(w, token); });
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

// ---------------------------------------------------------------------------------------------
// Building a generation.

void SimJob::OnNewGeneration(int w, const Frame& frame) {
  Worker& x = workers_[w];
  const uint64_t generation = FrameGeneration(*frame);
  // Each recipient's NewGeneration is its own (its entry, its part of the state move): decoded
  // by each, as the real worker does.
  auto e = proto::DecodeEnvelope(*frame);
  StatusOr<proto::NewGeneration> ng =
      e.ok() ? proto::DecodePayload<proto::NewGeneration>(e->payload)
             : StatusOr<proto::NewGeneration>(e.status());
  if (!ng.ok()) {
    // The real worker refuses the message and the generation cannot form: a failure to report.
    if (build_failures_++ == 0) first_build_error_ = "NewGeneration: " + ng.status().ToString();
    return;
  }
  if (ng->leave) {
    // Hands its shards off (the staying workers hold them all: nothing to send) and exits 0.
    x.state = State::kLeft;
    ++x.hb_token;
    const int a = x.host;
    loop_->After(model_.reap_us, [this, a, id = x.id] {
      if (!agents_[a].alive) return;
      coordinator_->Send(agents_[a].client,
                         proto::MakeFrame(MessageType::kProcessExited,
                                          proto::ProcessExited{id, 0, 0}, job_, 0,
                                          "agent-" + agents_[a].name, 0));
    });
    return;
  }
  int rank = -1;
  bool has_state = false;
  for (const auto& m : ng->members) {
    if (m.worker_id == x.id) {
      rank = m.rank;
      has_state = m.has_state;
    }
  }
  auto it = builds_.find(generation);
  if (it == builds_.end()) {
    // Older builds are over (a generation number is never used twice).
    builds_.erase(builds_.begin(), builds_.lower_bound(generation > 2 ? generation - 2 : 0));
    Build& nb = builds_[generation];
    nb.generation = generation;
    nb.world = ng->layout.world();
    // A fresh NCCL world unless every member was a rank of the last one.
    nb.fresh_nccl = ng->reason == proto::GenerationReason::kStart ||
                    ng->reason == proto::GenerationReason::kResume || !ng->nccl.possible;
    const int stride = std::max(1, nb.world / std::max(1, model_.rendezvous_sample));
    for (int r = 0; r < nb.world; r += stride) nb.sample.push_back(r);
    last_sample_ = static_cast<int>(nb.sample.size());
    nb.members.assign(nb.world, -1);
    nb.ng = std::make_shared<const proto::NewGeneration>(std::move(ng).value());
    it = builds_.find(generation);
  }
  if (generation <= x.generation || generation < x.answered_target) return;  // stale
  Enter(w, it->second, rank, has_state);
}

void SimJob::Enter(int w, Build& b, int rank, bool has_state) {
  Worker& x = workers_[w];
  if (rank < 0 || rank >= b.world) return;  // not a member (the real worker refuses it)
  x.state = State::kBuilding;
  x.building = b.generation;
  x.rank = rank;
  x.received_at = loop_->now();
  // A worker that held the state rolls back to the commit of restore_step; one that did not
  // receives the state (and the step) from the others.
  x.step = b.ng->restore_step;
  if (has_state) {
    std::erase_if(x.commits, [&](int64_t s) { return s > b.ng->restore_step; });
  } else {
    x.commits.clear();
    b.transfer = true;
  }
  ++b.received;
  b.members[x.rank] = w;
  x.sampled = std::binary_search(b.sample.begin(), b.sample.end(), x.rank);
  if (x.sampled) {
    x.ops = RendezvousOps(b, x.rank);
    x.op = 0;
    if (x.ops.empty()) {
      SampleDone(w, b);  // nothing of its rendezvous reaches the coordinator
      return;
    }
    RunOp(w);
  } else if (model_.every_rank_sets && !PeersServe(b)) {
    // Its own keys (its address record), for real; what it would read is the sampled ranks' part.
    ++b.setters;
    x.ops = RendezvousOps(b, x.rank);
    std::erase_if(x.ops, [](const KvOp& op) {
      return op.type != MessageType::kKvSet && op.type != MessageType::kKvSetAndGet;
    });
    for (auto& op : x.ops) {
      op.weight = 1;
      op.get_keys.clear();
    }
    x.op = 0;
    RunOp(w);
  } else {
    b.waiting.push_back(w);
  }
  MaybeFinishRendezvous(b);
}

std::vector<SimJob::KvOp> SimJob::RendezvousOps(const Build& b, int rank) const {
  // CreateGlooCommunicator(prefix "g<G>/world/") -> MeshContext::Build: one KvSetAndGet that sets
  // this rank's address record, "g<G>/world/a/<rank>/<part>" for each of its AddressRecordParts,
  // and reads, of each build peer's record, the part holding its pair with this rank.
  // The sampled ranks read only what sampled ranks set: for each build peer of this rank's place
  // in the sample, the part at that place of the sampled peer's record, padded with its own parts
  // to its true number of reads.
  // With NewGeneration::build_peers (PeerRecordStore) none of that reaches the coordinator: the
  // rank sets its record in its own server and reads its peers' parts from theirs.
  const int world = b.world;
  const double s = static_cast<double>(b.sample.size());
  const double n = world;
  const double per_rank = model_.every_rank_sets ? 1 : n / s;
  const std::string prefix = b.ng->kv_prefix + "world/";
  std::vector<KvOp> ops;
  if (PeersServe(b)) return ops;
  KvOp op{MessageType::kKvSetAndGet, "", 0, "", per_rank};
  const std::vector<int> peers = BuildPeers(rank, world);
  const int parts = AddressRecordParts(rank, world);
  for (int part = 0; part < parts; ++part) {
    const int first = part * kAddressRecordPairs;
    op.set_keys.push_back(AddressRecordKey(prefix, rank, part));
    op.set_bytes.push_back(AddressRecordBytes(
        std::min(kAddressRecordPairs, static_cast<int>(peers.size()) - first)));
  }
  const auto at = std::lower_bound(b.sample.begin(), b.sample.end(), rank);
  if (at != b.sample.end() && *at == rank) {
    const int i = static_cast<int>(at - b.sample.begin());
    const int sample = static_cast<int>(b.sample.size());
    for (int j : BuildPeers(i, sample)) {
      const int q = b.sample[j];
      const int part = std::min(AddressRecordSlotOf(j, i, sample).part,
                                AddressRecordParts(q, world) - 1);
      op.get_keys.push_back(AddressRecordKey(prefix, q, part));
    }
  }
  for (int k = 0; op.get_keys.size() < peers.size() && parts > 0; ++k) {
    op.get_keys.push_back(AddressRecordKey(prefix, rank, k % parts));
  }
  ops.push_back(std::move(op));
  return ops;
}

bool SimJob::PeersServe(const Build& b) const { return !b.ng->build_peers.empty(); }

void SimJob::RunOp(int w) {
  Worker& x = workers_[w];
  const KvOp& op = x.ops[x.op];
  x.op_request = x.next_request++;
  switch (op.type) {
    case MessageType::kKvSet: {
      proto::KvSetRequest req{op.key, op.value_bytes > 0 ? std::string(op.value_bytes, '\x01')
                                                         : op.value};
      SendFrom(w, op.type, req, x.op_request, op.weight);
      break;
    }
    case MessageType::kKvGet:
      SendFrom(w, op.type, proto::KvGetRequest{op.key, kKvSliceMs}, x.op_request, op.weight);
      break;
    case MessageType::kKvWait:
      SendFrom(w, op.type, proto::KvWaitRequest{{op.key}, kKvSliceMs}, x.op_request, op.weight);
      break;
    case MessageType::kKvSetAndGet: {
      proto::KvSetAndGetRequest req;
      req.set_keys = op.set_keys;
      for (size_t i = 0; i < op.set_keys.size(); ++i) {
        req.set_values.emplace_back(i < op.set_bytes.size() ? op.set_bytes[i] : op.value_bytes,
                                    '\x01');
      }
      req.get_keys = op.get_keys;
      req.timeout_ms = kKvSliceMs;
      SendFrom(w, op.type, req, x.op_request, op.weight);
      break;
    }
    default:
      break;
  }
}

void SimJob::OnKvReply(int w, const proto::Envelope& e) {
  Worker& x = workers_[w];
  if (x.state != State::kBuilding || e.request_id != x.op_request) return;
  if (++x.op < x.ops.size()) {
    RunOp(w);
    return;
  }
  x.ops.clear();
  auto it = builds_.find(x.building);
  if (it == builds_.end()) return;
  if (x.sampled) {
    SampleDone(w, it->second);
  } else {
    SetterDone(w, it->second);
  }
}

void SimJob::SetterDone(int w, Build& b) {
  ++b.setters_done;
  b.waiting.push_back(w);
  MaybeFinishRendezvous(b);
}

void SimJob::SampleDone(int w, Build& b) {
  ++b.samples_done;
  b.waiting.push_back(w);
  MaybeFinishRendezvous(b);
}

void SimJob::MaybeFinishRendezvous(Build& b) {
  const int world = b.world;
  if (b.done || b.samples_done < static_cast<int>(b.sample.size()) || b.received < world ||
      b.setters_done < b.setters) {
    return;
  }
  b.done = true;
  // What the sampled ranks did not send: nothing, since every rank's rendezvous is one
  // KvSetAndGet (and the NCCL id's set or get), sampled or not. With the peers serving the
  // records, each rank's reads of its build peers' parts are one round trip to them, all at
  // once, once every rank has its NewGeneration (received == world). Then its build pairs
  // connect.
  const SimTime chain = PeersServe(b) ? 2 * model_.hop_us : 0;
  const SimTime connect =
      model_.connect_us_per_peer * static_cast<SimTime>(BuildPeers(0, world).size());
  // A fresh NCCL world's unique id goes from rank 0 to the others by a broadcast over the control
  // world (NcclOptions::id_world): ceil(log2 N) hops, nothing at the coordinator.
  int id_hops = 0;
  while ((1 << id_hops) < world) ++id_hops;
  const SimTime nccl_us = !model_.nccl  ? 0
                          : b.fresh_nccl ? model_.nccl_init_us + id_hops * model_.hop_us
                                         : model_.nccl_shrink_us;
  const SimTime transfer = b.transfer ? model_.transfer_us : 0;
  for (int w : b.waiting) {
    const Worker& x = workers_[w];
    if (x.state != State::kBuilding || x.building != b.generation) continue;
    const SimTime rebuild = loop_->now() - x.received_at + chain + connect + nccl_us;
    loop_->After(chain + connect + nccl_us + transfer + loop_->Uniform(kMs),
                 [this, w, g = b.generation, rebuild, transfer] {
                   Ready(w, g, static_cast<double>(rebuild) / kMs,
                         static_cast<double>(transfer) / kMs);
                 });
  }
  b.waiting.clear();
}

void SimJob::Ready(int w, uint64_t generation, double rebuild_ms, double transfer_ms) {
  Worker& x = workers_[w];
  if (x.state != State::kBuilding || x.building != generation) return;  // aborted meanwhile
  x.generation = generation;
  x.building = 0;
  x.state = State::kRunning;
  x.pause_target = 0;  // a new generation runs: nothing is pending
  x.commits = {x.step};  // every member commits the state it continues from
  proto::GenerationReady ready{generation, rebuild_ms, transfer_ms, 0};
  SendFrom(w, MessageType::kGenerationReady, ready, 0);
  auto it = builds_.find(generation);
  if (it == builds_.end()) return;
  Build& b = it->second;
  // The first step's collectives need every member.
  if (++b.ready == b.world) StartTraining(b);
}

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

void SimJob::Pause(int w, uint64_t target) {
  Worker& x = workers_[w];
  if (x.state != State::kRunning) return;
  AddCommit(&x.commits, x.step);
  x.answered_target = std::max(x.answered_target, target);
  x.state = State::kWaiting;
  SendFrom(w, MessageType::kPaused, proto::PausedReport{target, x.step, x.commits, false}, 0);
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
  SendFrom(w, MessageType::kPaused,
           proto::PausedReport{req->target_generation, x.step, x.commits, true}, 0);
}

}  // namespace elastra::scale
