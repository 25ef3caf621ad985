// The 3-D scenario of bench_scale (docs/scale.md, "A 3-D job losing a worker, then a host"): a
// job at tp = 8, pp = 8 whose state and memory budget fit no layout with fewer model-parallel
// ranks, its n workers on hosts of 8 (a host is one tensor-parallel group) and one host of spares
// that joins after the first generation. Its agents heartbeat from the first generation on, so
// that the coordinator may start a replacement on their hosts. Its events, each measured as
// scenario.h's are:
//   join, first_generation  the join storm and the first generation (dp = n / 64);
//   worker_lost             one member dies (its agent reports the exit): a spare takes its rank;
//   host_lost               a host of members goes silent with its agent: the 7 spares left cannot
//                           fill its tensor-parallel group, so dp drops by one and the broken
//                           replica's survivors become standbys (they park: each asks for the
//                           job's status once a second);
//   regrow                  from host_lost's commit, until the coordinator has brought dp back:
//                           it starts a replacement on the free slot the dead worker left
//                           (ResizeManager::MaybeRegrow), which with the standbys makes a whole
//                           replica again.
// Each change's layout must keep tp = 8 and pp = 8 (the event fails otherwise); its groups built
// and kept are read from the coordinator's status history, and its decision_s is the time to the
// call that sent its first NewGeneration.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/scale/scenario.h"
#include "elastra/sharding.h"

namespace elastra::scale {

inline constexpr int kThreeDTp = 8;
inline constexpr int kThreeDPp = 8;

// A 70B GPT's state as 8 layer blocks of 4 tensors, each [8, 273,437,500] elements of 14 bytes
// (bf16 weights, fp32 master weights, Adam's two moments), split over tensor parallelism by its
// 8 rows: 980 GB in all, 15.3 GB a rank at tp = 8, pp = 8. Its 8 rows and 8 layers bound tp and
// pp to 8; the memory budget does the rest.
StateSpec ThreeDState();
// What every worker declares (JoinRequest::device_memory_bytes): 24 GiB, which holds a rank's
// 15.3 GB at pp x tp = 64 and not the 30.6 GB of any layout with fewer model-parallel ranks.
int64_t ThreeDMemoryBytes();

// The events, in order.
const std::vector<std::string>& ThreeDEventNames();

// Runs the 3-D scenario with `n` workers (a multiple of 64) and `spares` spares (on one host;
// at most its 8 slots). `p.job`'s state and memory are replaced by the 3-D job's.
ScaleRun RunScale3D(int n, const ScaleParams& p, int spares = 8);

// Whether every change of `run` (first generation, worker_lost, host_lost, regrow) that
// completed kept tp = 8 and pp = 8.
bool KeepsModelParallelism(const ScaleRun& run);

}  // namespace elastra::scale
