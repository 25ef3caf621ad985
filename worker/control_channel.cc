#include "worker/control_channel.h"

#include <algorithm>
#include <string>
#include <utility>

#include "protocol/keys.h"
#include "common/logging.h"
#include "common/mesh_peers.h"

namespace elastra {

using proto::MessageType;

void PushInbox::Stash(proto::Envelope e, uint64_t generation, bool parked) {
  switch (e.type) {
    case MessageType::kPauseRequest: {
      auto req = proto::DecodePayload<proto::PauseRequest>(e.payload);
      if (req.ok() && req->target_generation > generation) RaisePauseTarget(req->target_generation);
      return;
    }
    case MessageType::kRecoverRequest: {
      auto req = proto::DecodePayload<proto::RecoverRequest>(e.payload);
      if (req.ok() && req->target_generation > generation) recover_pending_ = true;
      queue_.push_back(std::move(e));
      return;
    }
    case MessageType::kShutdown: {
      if (parked) {  // a parked worker reads it as the end of the job (AwaitGeneration)
        queue_.push_back(std::move(e));
        return;
      }
      // Declared lost, the job failed, or (code 0) this worker's part ended: it must not go on.
      auto req = proto::DecodePayload<proto::Shutdown>(e.payload);
      shutdown_reason_ = req.ok() ? req->reason : std::string("(unreadable reason)");
      shutdown_ = AbortedError("the coordinator stopped this worker: " + shutdown_reason_);
      shutdown_clean_ = req.ok() && req->exit_code == 0;
      return;
    }
    default:
      queue_.push_back(std::move(e));
  }
}

proto::Envelope PushInbox::Pop() {
  proto::Envelope e = std::move(queue_.front());
  queue_.pop_front();
  return e;
}

void PushInbox::RaisePauseTarget(uint64_t target) {
  pause_target_ = std::max(pause_target_, target);
}

void PushInbox::ClearPending() {
  pause_target_ = 0;
  recover_pending_ = false;
}

ControlChannel::ControlChannel(
    std::function<std::vector<proto::GroupHealth>()> break_collectives)
    : break_collectives_(std::move(break_collectives)) {}

Status ControlChannel::Connect(const WorkerOptions& options) {
  ControlClientOptions co;
  co.address = options.coordinator;
  co.server_public = options.server_public_key;
  co.client_keys = KeyPair{options.public_key, options.secret_key};
  co.job = options.job;
  co.sender = options.worker_id;
  co.heartbeat_interval = options.heartbeat_interval;
  ELASTRA_ASSIGN_OR_RETURN(client_, ControlClient::Connect(co));
  store_ = std::make_unique<CoordinatorStore>(client_.get());
  if (!record_server_) {
    auto server = RecordServer::Start(options.bind_host);
    if (server.ok()) {
      record_server_ = std::move(server).value();
    } else {
      LOG(WARNING) << "no record server (" << server.status()
                   << "): the world's rendezvous records go through the coordinator";
    }
  }
  // A RecoverRequest must break a collective blocked on a dead peer right away, so it is acted
  // on from the I/O thread the moment it lands.
  client_->SetPushObserver([this](const proto::Envelope& e) { OnPush(e); });
  return OkStatus();
}

void ControlChannel::Close() {
  if (client_) client_->Close();
}

void ControlChannel::OnPush(const proto::Envelope& e) {
  if (e.type != MessageType::kRecoverRequest) return;
  auto req = proto::DecodePayload<proto::RecoverRequest>(e.payload);
  if (!req.ok() || req->target_generation <= generation_.load()) return;
  uint64_t seen = recover_seen_.load();
  while (seen < req->target_generation &&
         !recover_seen_.compare_exchange_weak(seen, req->target_generation)) {
  }
  std::vector<proto::GroupHealth> groups = break_collectives_();
  // Answer at once from here: the training thread may be stuck in a call that the abort
  // could not break (it then returns at its own timeout), and the coordinator must not take a
  // live survivor for dead meanwhile. The commits it holds are what the answer needs.
  proto::PausedReport report;
  {
    std::lock_guard<std::mutex> lock(published_mu_);
    report = proto::PausedReport{req->target_generation, published_step_, published_commits_,
                                 true, published_layout_, published_rank_};
  }
  report.groups = std::move(groups);
  uint64_t answered = answered_by_io_.load();
  while (answered < req->target_generation &&
         !answered_by_io_.compare_exchange_weak(answered, req->target_generation)) {
  }
  client_->Send(MessageType::kPaused, proto::EncodePayload(report), e.generation).IgnoreError();
}

void ControlChannel::Publish(int64_t step, std::vector<int64_t> commit_steps,
                             const Layout& commits_layout, int commits_rank) {
  std::lock_guard<std::mutex> lock(published_mu_);
  published_commits_ = std::move(commit_steps);
  published_step_ = step;
  published_layout_ = commits_layout;
  published_rank_ = commits_rank;
}

std::shared_ptr<KeyValueStore> ControlChannel::StoreFor(const proto::NewGeneration& gen,
                                                        int rank) {
  // Not a shared_ptr of ours: an aliasing one to the store this channel owns.
  std::shared_ptr<KeyValueStore> coordinator(std::shared_ptr<void>(), store_.get());
  const int world = gen.layout.world();
  if (record_server_ == nullptr || gen.build_peers.empty() || rank < 0 || rank >= world) {
    return coordinator;
  }
  const std::vector<int> peers = BuildPeers(rank, world);
  if (gen.build_peers.size() != peers.size() * kRendezvousEndpointBytes) {
    LOG(WARNING) << "generation " << gen.generation << ": " << gen.build_peers.size()
                 << " bytes of build peers for " << peers.size()
                 << " peers; the world's records go through the coordinator";
    return coordinator;
  }
  std::map<int, std::string> endpoints;
  for (size_t i = 0; i < peers.size(); ++i) {
    endpoints[peers[i]] =
        gen.build_peers.substr(i * kRendezvousEndpointBytes, kRendezvousEndpointBytes);
  }
  auto peer_store = std::make_shared<PeerRecordStore>(store_.get(), record_server_.get(),
                                                      gen.kv_prefix + "world/", rank,
                                                      std::move(endpoints));
  peer_store->SetCancel([this, g = gen.generation] { return recover_seen_.load() > g; });
  return peer_store;
}

void ControlChannel::CancelOnRecovery(uint64_t g) {
  store_->SetCancel([this, g] { return recover_seen_.load() > g; });
}

void ControlChannel::DrainPushes(bool parked) {
  while (auto e = client_->PollPush(std::chrono::milliseconds(0))) {
    inbox_.Stash(std::move(*e), generation_.load(), parked);
  }
}

bool ControlChannel::Poll(std::chrono::milliseconds wait, bool parked) {
  auto e = client_->PollPush(wait);
  if (!e) return false;
  inbox_.Stash(std::move(*e), generation_.load(), parked);
  return true;
}

}  // namespace elastra
