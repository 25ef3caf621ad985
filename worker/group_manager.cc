#include "worker/group_manager.h"

#include <chrono>
#include <utility>

#include "common/logging.h"

namespace elastra {

std::vector<proto::GroupHealth> GroupManager::Interrupt() {
  std::lock_guard<std::mutex> lock(mu_);
  InterruptLocked();
  return groups_.Health();
}

std::vector<proto::GroupHealth> GroupManager::Health() {
  std::lock_guard<std::mutex> lock(mu_);
  return groups_.Health();
}

void GroupManager::InterruptLocked() {
  groups_.Interrupt();
  previous_.RequestAbort();
  if (handoff_ != nullptr) handoff_->Abort();
}

void GroupManager::SetHandoff(Communicator* handoff) {
  std::lock_guard<std::mutex> lock(mu_);
  handoff_ = handoff;
}

Communicator& GroupManager::world() {
  CHECK(groups_.world != nullptr) << "no communicator: call Start() first";
  return *groups_.world;
}

// The worker's own communicator (Gloo, host buffers): step agreement, checks, scalars, state
// moves. The training world itself with the Gloo backend.
Communicator& GroupManager::control() {
  CHECK(groups_.control != nullptr) << "no communicator: call Start() first";
  return *groups_.control;
}

void GroupManager::Retire(GroupSet old) {
  WaitRetired();
  retired_ = std::async(std::launch::async, [old = std::move(old)]() mutable { old = GroupSet{}; });
}

void GroupManager::WaitRetired() {
  if (retired_.valid()) retired_.get();
}

void GroupManager::Release() {
  WaitRetired();
  GroupSet old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(groups_);
    groups_ = GroupSet{};
  }
  for (auto* c : {old.dp.get(), old.pp.get(), old.tp.get(), old.world.get()}) {
    if (c != nullptr && c->backend() == Backend::kNccl) c->Abort();
  }
}

void GroupManager::WarmUp(GroupOptions options) {
  if (warming_.valid()) return;  // one at a time; the next Rebuild takes it
  warming_ = std::async(std::launch::async, [options = std::move(options)] {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<WarmGroups> warm = WarmUpGroups(options);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    if (warm.ok()) {
      LOG(INFO) << "standby warmed up in " << ms << " ms (gloo device"
                << (warm->nccl != nullptr ? ", one-rank nccl communicator" : "") << ")";
    } else {
      LOG(WARNING) << "standby warm-up failed (the next build makes it): " << warm.status();
    }
    return warm;
  });
}

Status GroupManager::Rebuild(GroupOptions options, const Layout& layout, int rank,
                             uint8_t keep) {
  // A standby's warm-up: its gloo device is found by the build; its one-rank NCCL communicator
  // (the context and kernels are loaded) goes once the new ones exist.
  std::unique_ptr<Communicator> warm_nccl;
  if (warming_.valid()) {
    StatusOr<WarmGroups> warm = warming_.get();
    if (warm.ok()) {
      warm_device_ = std::move(warm->gloo_device);
      warm_nccl = std::move(warm->nccl);
    }
  }
  const bool nccl = options.backend == Backend::kNccl;
  GroupSet old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    old = std::move(groups_);  // the old generation's communicators: everyone has left them
    groups_ = GroupSet{};
    // Only an NCCL world is worth keeping: the next one may be made from it.
    if (nccl) {
      previous_.world = old.world;
      previous_.generation = old.generation;
    }
  }
  // The groups the coordinator keeps leave the old set: they are not retired.
  for (uint8_t kind : {proto::kDpGroup, proto::kPpGroup, proto::kTpGroup}) {
    std::shared_ptr<GroupGate>& gate = old.gates[kind];
    if ((keep & (1u << kind)) == 0) continue;
    if (gate == nullptr) {
      LOG(WARNING) << "generation " << options.generation << " keeps group kind "
                   << static_cast<int>(kind) << ", which this worker does not hold; building it";
      continue;
    }
    for (auto* c : {&old.dp, &old.pp, &old.tp}) {
      if (c->get() == gate.get()) c->reset();
    }
    options.keep[kind] = std::move(gate);
  }
  // NCCL communicators go without NCCL's finalize (nothing is in flight after the pause, and a
  // departed peer would make it wait): aborted, except for the world kept above.
  for (auto* c : {old.dp.get(), old.pp.get(), old.tp.get(), old.world.get()}) {
    if (c != nullptr && c != previous_.world.get() && c->backend() == Backend::kNccl) {
      c->Abort();
    }
  }
  if (nccl) old = GroupSet{};  // Gloo: retired once the new groups exist (below)
  options.previous = &previous_;
  auto groups = BuildGroups(options, layout, rank);
  // Destroying a gloo context waits for its device loop to tick once per pair (up to 10 ms
  // each in this gloo), 25-50 ms for a 4-rank world on the 2-core bench VM: that used to sit
  // between the pause and the new world's connect on every worker. Nobody uses the old
  // communicators any more, so they go on another thread once the new ones exist.
  Retire(std::move(old));
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The kept world is now part of the new generation, or released.
    if (previous_.world != nullptr &&
        (!groups.ok() || previous_.world.get() != groups->world.get())) {
      previous_.world->Abort();
    }
    previous_ = GroupSet{};
  }
  warm_nccl.reset();
  warm_device_.reset();  // the new groups hold the device now
  if (!groups.ok()) return groups.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    groups_ = std::move(groups).value();
  }
  return OkStatus();
}

}  // namespace elastra
