// Executes one worker's part of a ReshardPlan over a Communicator's Send/Recv.
//
// The state is a plain map tensor name -> the worker's local shard bytes (the layout of
// sharding.h: the region's elements in row-major order). On entry it holds the shards of the
// old layout, on success those of the new one (tensors the worker no longer holds are erased).
// The worker's communicator rank must equal its worker id in the plan, and every worker of the
// plan must call ExecuteReshard with the same plan at the same time.
//
// Memory: tensors are processed in groups of consecutive tensors (at most group_bytes of new
// shards on any worker, or one tensor when its shard is larger); a group's new shards are
// allocated, filled, and the old shards of the group freed before the next group starts. Peak
// use is the worker's state, plus the new shards of one group, plus the staging buffers (the
// group's staged bytes when batched, two chunk buffers or the largest staged run otherwise). A
// buffer in `shards` for a tensor of which the old layout gives this worker nothing (a joining
// worker's whole tensor) is no source: its memory becomes the new shard when large enough, which
// spares faulting in fresh memory during the downtime. With reuse_memory (default), a shard whose
// new region lies inside its old one is formed inside the old buffer, and old shards no longer
// read serve later new shards. New shards and staging buffers of 4 MiB
// and more ask for transparent huge pages (huge_pages; fresh memory costs a fault per page, see
// docs/resharding.md).
// Schedule: per group, with a communicator that has Exchange(), every transfer posted at once
// (batched). Otherwise pairwise rounds (partner = rank XOR k); in each pair the lower rank sends
// first, the higher receives first, so blocking Send/Recv cannot deadlock. Or, with
// concurrent_peers, every (peer, direction) on its own thread. A transfer (or a run of adjacent
// ones) of at least direct_min_bytes that is one piece of the sender's or the receiver's shard is
// a message of its own, sent from or received into that shard directly (the other side packs or
// unpacks it if it is strided there); smaller or strided-on-both-sides transfers are packed into
// one staged stream per peer.
// Thread-compatible.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "elastra/communicator.h"
#include "elastra/device_buffer.h"
#include "elastra/host_bytes.h"
#include "elastra/status.h"
#include "state/plan/reshard_plan.h"

namespace elastra {

using ShardMap = std::map<std::string, HostBytes>;
using DeviceShardMap = std::map<std::string, DeviceBuffer>;

// Host staging memory kept from one reshard to the next. The batched schedule packs a group's
// strided rectangles into one arena; allocated anew by every reshard, that arena is fresh memory,
// faulted in page by page inside the downtime (on the test VM, where a fresh page also costs the
// hypervisor a fault, about a third of the CPU time of a change whose bytes are mostly staged). A
// worker keeps one for its life (worker/generation_builder.h) and passes it to every host reshard
// (ReshardExecutorOptions::arena); it holds the largest group's staged bytes seen so far, at most
// about twice group_bytes. Thread-compatible: one reshard at a time.
class ReshardArena {
 public:
  ReshardArena();
  ~ReshardArena();
  ReshardArena(const ReshardArena&) = delete;
  ReshardArena& operator=(const ReshardArena&) = delete;

  // Bytes held now.
  int64_t bytes() const;
  // Gives the memory back (the next reshard allocates again).
  void Release();

 private:
  friend struct ReshardArenaAccess;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct ReshardExecutorOptions {
  // Largest single message; also the size of each of the two staging buffers.
  size_t chunk_bytes = 4 << 20;
  // New-shard bytes one worker allocates for a group at most (see the memory note above).
  int64_t group_bytes = 64 << 20;
  // A transfer at least this large that is one piece of the sender's or the receiver's shard goes
  // as its own message, straight from or into that shard. Below it, staging copies cost less than
  // the messages (each is a rendezvous of its own in Gloo).
  int64_t direct_min_bytes = 256 << 10;
  // Every peer at once: one thread per peer and direction, each with its own staging buffer
  // (memory: 2 x chunk_bytes per peer with traffic). Needs a communicator whose Send and Recv
  // may run on several threads at once (the Gloo backend's may); on a failure the executor calls
  // comm.Abort() so the other threads fail fast. Off: one thread, pairwise rounds (partner =
  // rank XOR k), the lower rank of a pair sending first.
  bool concurrent_peers = false;
  // When the communicator has Exchange() (Gloo, NCCL, MPI): per group, every peer's transfers
  // posted at once in one exchange (each peer's packed rectangles as one message, plus the direct
  // runs), which beats both schedules above. Memory: the group's packed bytes instead of chunk
  // buffers.
  bool batched = true;
  // Batched, with host shards and a communicator that has ExchangeV() (Gloo): each peer's
  // transfers go as one stream gathered from the rows of the old shards and scattered into the
  // rows of the new ones, with no staging copy on either side (bytes_staged stays 0). Off: the
  // strided rectangles are packed into the staging arena and unpacked from it.
  bool vectored = true;
  // Host shards and staging buffers of 4 MiB and more ask for transparent huge pages
  // (madvise(MADV_HUGEPAGE)): far fewer page faults on fresh memory during the downtime. Off: 4 KiB
  // pages (where the kernel's direct compaction for huge pages stalls more than it saves).
  bool huge_pages = true;
  // New shards in memory the worker holds already instead of fresh memory, which costs a page
  // fault per page (far more than the copy into it): a tensor whose new region lies inside its
  // old one on this worker is formed inside the old shard's buffer (host shards; it keeps the
  // old buffer's capacity), and old shards no longer read serve later groups' new shards (when
  // they waste at most a quarter of the new shard's bytes). Off: every new shard is allocated.
  bool reuse_memory = true;
  // Host reshards: the batched schedule's staging arena, kept by the caller from one reshard to
  // the next (see ReshardArena). nullptr: this reshard allocates its own and frees it.
  ReshardArena* arena = nullptr;
  // Per Send/Recv.
  std::chrono::milliseconds timeout{60000};
};

struct ReshardExecutorStats {
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t bytes_copied = 0;  // local copies
  int64_t bytes_staged = 0;  // sent or received through the staging buffers (packed)
  int64_t bytes_allocated = 0;  // new shards in fresh memory
  int64_t bytes_reused = 0;     // new shards in the memory of old shards no longer read
  int64_t bytes_in_place = 0;   // new shards formed inside their own old shard
  int64_t messages_sent = 0;
  int64_t peak_new_shard_bytes = 0;  // largest group of new shards alive at once
  double seconds_plan = 0;           // checking the old shards, working out groups and messages
  double seconds_allocate = 0;       // allocating the new shards and freeing the old
  double seconds_local = 0;          // local copies
  double seconds_transfer = 0;       // sends and receives, packing included
};

// Runs this worker's part of `plan`. kInvalidArgument (before any communication) when the
// communicator is smaller than the plan's workers or a shard the plan reads is missing or has
// the wrong size; the communicator's error (kTimedOut, kPeerLost, kAborted) when a transfer fails,
// in which case `shards` is left partly converted and must be restored from a commit.
Status ExecuteReshard(const ReshardPlan& plan, Communicator& comm, ShardMap* shards,
                      const ReshardExecutorOptions& options = {},
                      ReshardExecutorStats* stats = nullptr);

// The same on shards in device memory, all on CUDA device `device`: new shards and staging
// buffers are device buffers, packing and local copies run on the device, and the transfers go
// over `comm` with device pointers, so `comm` must take them (an NCCL communicator: batched, each
// group of tensors is one ncclGroupStart/End; NCCL matches messages by order, which both sides
// derive from the plan alike).
// kInvalidArgument for concurrent_peers (one NCCL communicator is not used from several threads)
// or a shard on another device; kUnavailable without CUDA; kResourceExhausted when the device
// has no room for the new shards; otherwise as ExecuteReshard.
Status ExecuteDeviceReshard(const ReshardPlan& plan, Communicator& comm, int device,
                            DeviceShardMap* shards, const ReshardExecutorOptions& options = {},
                            ReshardExecutorStats* stats = nullptr);

}  // namespace elastra
