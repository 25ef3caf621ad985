// SimJob's workers building a generation: a NewGeneration's entry, the rendezvous on the
// coordinator's key-value store, and the step from ready to training (sim_job.h).
#include "bench/scale/sim_job.h"

#include <algorithm>

#include "protocol/codec.h"
#include "common/mesh_peers.h"

namespace elastra::scale {

using proto::MessageType;

namespace {

// CoordinatorStore's slice of a blocking get or wait (worker/coordinator_store.h).
constexpr int64_t kKvSliceMs = 200;

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

}  // namespace

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
  if (ng->leave && ng->standby) {
    // Hands its shards off (nothing to send: the staying workers hold them) and parks.
    if (generation > x.generation && generation >= x.answered_target) Park(w);
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
  x.parked = false;  // a member again
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
  if (auto it = builds_.find(generation); it != builds_.end()) {
    x.layout = it->second.ng->layout;
    x.layout_rank = x.rank;
  }
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

}  // namespace elastra::scale
