#include "collectives/nccl/nccl_unique_ids.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "common/logging.h"

namespace elastra::nccl_internal {
namespace {

// Ranks per unique id of an init over id_world: every rank of an init reaches a bootstrap root,
// and one root per 256 ranks keeps that off one thread (ncclCommInitRankScalable).
constexpr int kRanksPerUniqueId = 256;

std::string ToHex(const void* data, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(kDigits[p[i] >> 4]);
    out.push_back(kDigits[p[i] & 15]);
  }
  return out;
}

bool FromHex(const std::string& hex, void* data, size_t n) {
  if (hex.size() != 2 * n) return false;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

std::chrono::milliseconds Left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// Rank 0 makes the id and sets it at prefix + "nccl_id"; the others read it.
StatusOr<ncclUniqueId> UniqueIdAtStore(const NcclOptions& options, Clock::time_point deadline) {
  const std::string key = options.prefix + "nccl_id";
  ncclUniqueId id;
  if (options.rank == 0) {
    ELASTRA_NCCL_RETURN(ncclGetUniqueId(&id), nullptr);
    ELASTRA_RETURN_IF_ERROR(options.store->Set(key, ToHex(&id, sizeof(id))));
    return id;
  }
  auto hex = options.store->Get(key, Left(deadline));
  if (!hex.ok()) return hex.status().WithContext("NCCL unique id '" + key + "'");
  if (!FromHex(*hex, &id, sizeof(id))) {
    return CorruptError("NCCL unique id at '" + key + "' is malformed");
  }
  return id;
}

// `count` ids over id_world, id k made by rank k * kRanksPerUniqueId and summed into every
// rank's copy by one allreduce (a slot has one maker, the others add zeros): O(count) bytes, one
// collective. A slot's first byte says its maker could make it, so that the others fail at once,
// not at the deadline, when it could not.
StatusOr<std::vector<ncclUniqueId>> UniqueIdsOverWorld(const NcclOptions& options, int count,
                                                      Clock::time_point deadline) {
  Communicator& over = *options.id_world;
  if (over.size() != options.size || over.rank() != options.rank) {
    return InvalidArgumentError("NcclOptions.id_world has rank " + std::to_string(over.rank()) +
                                " of " + std::to_string(over.size()) + ", not " +
                                std::to_string(options.rank) + " of " +
                                std::to_string(options.size));
  }
  constexpr size_t kSlot = 1 + sizeof(ncclUniqueId);
  std::vector<uint8_t> slots(static_cast<size_t>(count) * kSlot, 0);
  Status made;
  if (options.rank % kRanksPerUniqueId == 0) {
    uint8_t* slot = slots.data() + static_cast<size_t>(options.rank / kRanksPerUniqueId) * kSlot;
    ncclUniqueId id;
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      slot[0] = 1;
      std::memcpy(slot + 1, &id, sizeof(id));
    } else {
      made = InternalError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(r));
    }
  }
  ELASTRA_RETURN_IF_ERROR(
      over.Allreduce(slots.data(), slots.size(), DataType::kUint8, ReduceOp::kSum, Left(deadline))
          .WithContext("sharing the NCCL unique ids"));
  if (!made.ok()) return made;
  std::vector<ncclUniqueId> ids(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    const uint8_t* slot = slots.data() + static_cast<size_t>(k) * kSlot;
    if (slot[0] != 1) {
      return UnavailableError("rank " + std::to_string(k * kRanksPerUniqueId) +
                              " could not make an NCCL unique id");
    }
    std::memcpy(&ids[static_cast<size_t>(k)], slot + 1, sizeof(ncclUniqueId));
  }
  return ids;
}

}  // namespace

StatusOr<std::vector<ncclUniqueId>> UniqueIdsOf(const NcclOptions& options,
                                               Clock::time_point deadline) {
  if (options.id_world == nullptr) {
    ELASTRA_ASSIGN_OR_RETURN(ncclUniqueId id, UniqueIdAtStore(options, deadline));
    return std::vector<ncclUniqueId>{id};
  }
  const int blocks = (options.size + kRanksPerUniqueId - 1) / kRanksPerUniqueId;
  return UniqueIdsOverWorld(options, InitRankScalable() != nullptr ? blocks : 1, deadline);
}

InitScalableFn InitRankScalable() {
  static const InitScalableFn init = [] {
    void* sym = dlsym(RTLD_DEFAULT, "ncclCommInitRankScalable");
    if (sym == nullptr) {
      // A libnccl loaded outside the global scope.
      if (void* lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD)) {
        sym = dlsym(lib, "ncclCommInitRankScalable");
        dlclose(lib);  // drops only the reference RTLD_NOLOAD took
      }
    }
    if (sym == nullptr) LOG(INFO) << "ncclCommInitRankScalable missing: one unique id per init";
    return reinterpret_cast<InitScalableFn>(sym);
  }();
  return init;
}

}  // namespace elastra::nccl_internal
