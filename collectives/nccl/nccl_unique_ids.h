// The NCCL unique ids a communicator's init starts from (CreateNcclCommunicator): made by rank 0
// and passed through the store, or shared over the control world (NcclOptions::id_world), one per
// 256 ranks where the libnccl has ncclCommInitRankScalable. Private to the NCCL backend.
#pragma once

#include <nccl.h>

#include <vector>

#include "collectives/nccl/nccl_call.h"
#include "collectives/nccl/nccl_communicator.h"

namespace elastra::nccl_internal {

// The ids every rank of `options` inits with, the same on every rank by `deadline`: one, unless
// the ids go over id_world, the world has more than 256 ranks and InitRankScalable() exists
// (then one per 256 ranks, in order). kInvalidArgument for an id_world of another rank or size,
// kCorrupt for a malformed id at the store, the store's or id_world's error otherwise.
StatusOr<std::vector<ncclUniqueId>> UniqueIdsOf(const NcclOptions& options,
                                               Clock::time_point deadline);

using InitScalableFn = ncclResult_t (*)(ncclComm_t*, int, int, int, ncclUniqueId*, ncclConfig_t*);
// ncclCommInitRankScalable (NCCL 2.23 and later), looked up at run time: the libnccl.so.2 a job
// runs with may be older than the header it was built with. nullptr when it is missing.
InitScalableFn InitRankScalable();

}  // namespace elastra::nccl_internal
