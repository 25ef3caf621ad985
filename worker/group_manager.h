// GroupManager: the communicators of the generation this worker runs (a GroupSet), the NCCL world
// kept from the previous generation while the next one is built from it, the hand-off
// communicator while a leaving worker's shards move over one, and the old generation's Gloo
// communicators being destroyed on another thread (docs/design-notes.md, "Communicator rebuild").
//
// Thread-safety: Interrupt() may be called from any thread; the worker's I/O thread calls it the
// moment a RecoverRequest lands, to break a collective blocked on a dead peer. mu_ guards groups_,
// previous_ and handoff_ against it. Everything else belongs to the training thread, and the
// communicators it hands out are valid until its next Rebuild() or Release().
#pragma once

#include <future>
#include <mutex>

#include "elastra/communicator.h"
#include "elastra/layout.h"
#include "elastra/status.h"
#include "worker/group_building.h"

namespace elastra {

class GroupManager {
 public:
  GroupManager() = default;
  ~GroupManager() = default;  // the future of std::async waits for a retirement in flight
  GroupManager(const GroupManager&) = delete;
  GroupManager& operator=(const GroupManager&) = delete;

  // Breaks every call in flight on this worker's communicators, without waiting on the device.
  // An NCCL world is only interrupted, so that the next generation may shrink it; a group with
  // no call inside is only stopped, so that the next generation may keep it (GroupSet::Interrupt);
  // one kept from the generation before is released (a build that uses it is doomed). Returns
  // the groups' health as they stopped (what the PausedReport says). Any thread.
  std::vector<proto::GroupHealth> Interrupt();
  // The current groups' health (GroupSet::Health). Any thread.
  std::vector<proto::GroupHealth> Health();

  // Replaces the current communicators by the next generation's, built by BuildGroups from
  // `options` (layout `layout`, this worker's rank `rank`). The groups of the kinds in `keep`
  // (bits 1 << proto::GroupKind, NewGeneration::keep_groups) are the current ones, kept
  // (options.keep is set here). With the NCCL backend the current world is kept for the build to
  // make the new one from (options.previous is set here) and the other NCCL communicators are
  // aborted; Gloo ones are destroyed on another thread once the new ones exist. The build's
  // error, and then the worker holds no communicators.
  Status Rebuild(GroupOptions options, const Layout& layout, int rank, uint8_t keep = 0);

  // For a worker that holds no rank (a standby): makes what its next build would make first
  // (WarmUpGroups: the gloo device; with NCCL on a device, the CUDA context and a one-rank NCCL
  // communicator) on another thread. The next Rebuild waits for it and then lets the one-rank
  // communicator go; the gloo device stays with the new groups. A failed warm-up is logged and
  // changes nothing (the build makes them).
  void WarmUp(GroupOptions options);

  // Drops the communicators when this worker leaves the layout mid-job (a shrink takes it out)
  // or shuts down. NCCL ones are aborted first: a finalize could wait on peers that are already
  // building the next generation without this worker.
  void Release();

  // Makes Interrupt() break `handoff` too while it is in use; nullptr when it is not any more.
  void SetHandoff(Communicator* handoff);

  // The current generation's communicators (see GroupSet). world() and control() CHECK that the
  // worker holds some (Start() built them).
  Communicator& world();
  Communicator& control();
  Communicator& dp() { return *groups_.dp; }
  Communicator& pp() { return *groups_.pp; }
  Communicator& tp() { return *groups_.tp; }

 private:
  // Call with mu_ held.
  void InterruptLocked();
  // Destroys `old`, a generation's communicators nobody uses any more, on another thread (one
  // retirement at a time: a second waits for the first).
  void Retire(GroupSet old);
  void WaitRetired();

  std::mutex mu_;  // guards groups_, previous_ and handoff_ against the I/O thread's Interrupt()
  GroupSet groups_;
  GroupSet previous_;  // while a generation is built: the NCCL world it may be made from
  Communicator* handoff_ = nullptr;  // the hand-off communicator while one is in use
  std::future<void> retired_;        // the previous generation's communicators being destroyed
  std::future<StatusOr<WarmGroups>> warming_;  // WarmUp() in flight
  std::shared_ptr<void> warm_device_;          // the gloo device WarmUp() made, while standby
};

}  // namespace elastra
