// ResizeManager's hot spares (see resize_manager.h; docs/recovery.md, "Spares"): keeping
// spares() standby workers beyond the layout, how many of them a grow leaves standing, and
// stopping those a lowered spares() no longer keeps. The admission of resizes, drains and regrows
// is in resize_manager.cc.
#include <algorithm>

#include "common/logging.h"
#include "coordinator/resize_manager.h"

namespace elastra::coordinator {

size_t ResizeManager::SparesKept(size_t want, size_t staying, size_t standby,
                                 size_t startable) const {
  const size_t spares = std::min(static_cast<size_t>(std::max(this->spares(), 0)), standby);
  if (spares == 0 || want <= staying) return 0;
  // The standby workers beyond the spares go first; what they leave lacking starts in free slots
  // where it can, and only the rest is taken from the spares.
  const size_t others = standby - spares;
  const size_t lacking = want > staying + others ? want - staying - others : 0;
  if (lacking <= startable) return spares;
  return spares - std::min(spares, lacking - startable);
}

void ResizeManager::MaybeReplenishSpares() {
  if (spares_to_stop_ > 0) StopSparesBeyond();
  const int spares = this->spares();
  if (spares <= 0) {
    generations_->TakeReplacementHosts();  // no replacement to place: the hints go
    return;
  }
  // Called on every tick: O(1) while enough standby workers stand or are on their way (a
  // standby on a host that is draining is counted here and not below; the drain removes it).
  const int on_their_way = hosts_->Outstanding();
  if (static_cast<int>(membership_->StandbyCount()) + on_their_way >= spares) return;
  if (restoring_ || pending_ || generations_->phase() != Phase::kIdle || generations_->job_over() ||
      generations_->generation() == 0 || !FinishedMember().empty()) {
    return;
  }
  const int standing = static_cast<int>(hosts_->UsableStandby().size());
  const int missing = spares - standing - on_their_way;
  if (missing <= 0) return;
  // First where the lost workers were (the slot a lost member held keeps its tensor-parallel
  // group on one host at the next change), else where the groups the used standbys joined live,
  // else the fullest host with a free slot.
  const int asked = host_manager_->Spawn(missing, Placement::kFullestFirst,
                                         /*watched_only=*/false, /*except=*/"",
                                         generations_->TakeReplacementHosts());
  if (asked > 0) {
    LOG(INFO) << "keeping " << spares << " spare(s): " << standing << " standing, " << on_their_way
              << " on their way; asked for " << asked << " more";
  } else {
    LOG_EVERY_MS(WARNING, 60000) << "keeping " << spares << " spare(s): " << standing
                                 << " standing and no free slot on an up host for the other "
                                 << missing;
  }
}

int ResizeManager::StopSparesBeyond() {
  if (generations_->job_over()) {
    spares_to_stop_ = 0;
    return 0;
  }
  // A change in flight or pending may take standby workers: the count waits for it to end.
  if (restoring_ || pending_ || generations_->phase() != Phase::kIdle) return 0;
  const std::vector<std::string> standby = hosts_->UsableStandby();
  const int beyond = static_cast<int>(standby.size()) - spares();
  const int n = std::min(spares_to_stop_, beyond);
  spares_to_stop_ = 0;
  if (n <= 0) return 0;
  const proto::Shutdown shutdown{
      0, "the job keeps " + std::to_string(spares()) + " spare(s); this standby is not needed"};
  for (int i = 0; i < n; ++i) {
    const std::string& id = standby[standby.size() - 1 - static_cast<size_t>(i)];
    const WorkerInfo* w = membership_->Find(id);
    if (w == nullptr) continue;
    outbox_->Send(w->identity, proto::MessageType::kShutdown, shutdown, 0);
    membership_->SetState(id, WorkerState::kLeaving);
  }
  LOG(INFO) << "the job keeps " << spares() << " spare(s): stopping " << n << " of "
            << standby.size() << " standby worker(s)";
  return n;
}

}  // namespace elastra::coordinator
