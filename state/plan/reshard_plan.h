// Reshard plan: which bytes of the training state move where when the job changes from one
// placed layout to another (see docs/resharding.md).
//
// For every rank of the new layout and every tensor it holds, the plan lists the rectangles it
// needs and the worker each comes from: the same worker when it already holds them (a local
// copy), else a replica on the same host, else the replicas spread so that no sender carries
// more than its share. Workers are numbered 0..N-1 (the executor uses them as communicator
// ranks). Pure computation: thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "elastra/layout.h"
#include "elastra/sharding.h"
#include "elastra/status.h"

namespace elastra {

// A layout with the worker at each global rank.
struct Placement {
  Layout layout;
  std::vector<int> worker_of_rank;  // size layout.world(); distinct worker ids

  // -1 when `worker` holds no rank.
  int RankOfWorker(int worker) const;
};

// One rectangle of one tensor moving from worker `src` to worker `dst` (src == dst: local copy).
struct Transfer {
  int tensor = 0;  // index into StateSpec::tensors
  int src = 0;
  int dst = 0;
  Rect rect;
  int64_t bytes = 0;
};

struct ReshardPlan {
  StateSpec state;
  Placement from;
  Placement to;
  std::vector<int> host_of_worker;  // size = number of workers

  std::vector<Transfer> copies;     // src == dst, in tensor order
  std::vector<Transfer> transfers;  // src != dst, in tensor order

  int64_t bytes_moved = 0;        // sum of transfers' bytes
  int64_t bytes_lower_bound = 0;  // bytes the new ranks need that their worker does not hold
  int64_t bytes_local = 0;        // sum of copies' bytes
  int64_t bytes_same_host = 0;    // part of bytes_moved whose sender shares the receiver's host
  int64_t max_sent = 0;           // most bytes sent by one worker
  int64_t max_received = 0;       // most bytes received by one worker
  int64_t num_transfers() const { return static_cast<int64_t>(transfers.size()); }
};

struct ReshardPlanOptions {
  // Replica spreading: a rectangle larger than this many bytes is split over the replicas that
  // hold it (by rows, or by columns for a single row) so each sender carries an even share.
  int64_t split_bytes = 256 << 10;
  // False: `copies` stays empty (bytes_local still counts them). The coordinator addresses the
  // transfers only; each worker lists its own copies (LocalCopies).
  bool copies = true;
};

// Builds the plan. kInvalidArgument when a placement does not match its layout, names a worker
// outside host_of_worker or twice, or a tensor does not fit a layout (ValidateTensor).
StatusOr<ReshardPlan> BuildReshardPlan(const StateSpec& state, const Placement& from,
                                       const Placement& to, const std::vector<int>& host_of_worker,
                                       const ReshardPlanOptions& options = {});

// The bytes worker `worker` would keep (already hold) if it moved from `from_coords` in `from`
// (null: it holds nothing) to `to_coords` in `to`. Used to score rank assignments.
int64_t KeptBytes(const StateSpec& state, const Layout& from, const Coordinates* from_coords,
                  const Layout& to, const Coordinates& to_coords);

}  // namespace elastra
