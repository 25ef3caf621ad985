// The reshard executor's memory: host and device shard buffers behind one interface (the
// executor is a template over it), the staging buffers, the row-by-row packing of rectangles,
// and the pool of old shards that serve as new ones. Private to state/ (reshard_executor.cc,
// reshard_transfer.cc).
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/host_memory.h"
#include "state/plan/reshard_plan.h"
#include "elastra/communicator.h"
#include "elastra/device_buffer.h"
#include "elastra/status.h"
#include "state/device_copy.h"

namespace elastra::reshard_internal {

constexpr size_t kPageBytes = 4096;
// Below this, a buffer is not worth a system call of its own.
constexpr size_t kMadviseMinBytes = 64 << 10;

// The whole pages of [p, p + n), or an empty range.
inline std::pair<uintptr_t, size_t> WholePages(void* p, size_t n) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (at + kPageBytes - 1) / kPageBytes * kPageBytes;
  const uintptr_t end = (at + n) / kPageBytes * kPageBytes;
  return {begin, end > begin ? end - begin : 0};
}

// Faults in every page of [p, p + n) at once (advice only: ignored where the kernel lacks it).
inline void PopulatePages(void* p, size_t n) {
#ifdef MADV_POPULATE_WRITE
  if (n < kMadviseMinBytes) return;
  auto [begin, bytes] = WholePages(p, n);
  if (bytes > 0) ::madvise(reinterpret_cast<void*>(begin), bytes, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)n;
#endif
}

// Host shards: HostBytes buffers (never zero-filled), memcpy, nothing to wait for.
struct HostMemory {
  using Buffer = HostBytes;
  bool huge_pages = true;
  // Staging buffers are never zero-filled.
  struct Scratch {
    struct Free {
      void operator()(uint8_t* p) const { std::free(p); }
    };
    std::unique_ptr<uint8_t, Free> bytes;
    uint8_t* data() { return bytes.get(); }
  };
  // New shards may be formed inside the old shard's own buffer (copies may overlap: memmove).
  static constexpr bool kInPlace = true;
  static uint8_t* Data(Buffer& b) { return b.data(); }
  static size_t Capacity(const Buffer& b) { return b.capacity(); }
  // A new shard, its bytes unset (the plan writes every one): large ones on huge pages
  // (common/host_memory.h), and every page of it put in place by one
  // madvise(MADV_POPULATE_WRITE) before it is written, where the kernel has it: a page fault per
  // 4 KiB page costs about half as much again (see docs/resharding.md).
  StatusOr<Buffer> Allocate(size_t n) {
    Buffer b;
    b.reserve(n);  // allocates without touching a page
    if (huge_pages) AdviseHugePages(b.data(), n);
    PopulatePages(b.data(), n);
    b.resize(n);
    return b;
  }
  // `b` cut to its first n bytes in place. Its capacity stays: giving the pages past n back to
  // the kernel (madvise MADV_DONTNEED) took 13 % of the process's CPU time in one change of
  // bench_reshard, so the shard keeps the memory it had before the change until it is replaced.
  static void Shrink(Buffer& b, size_t n) { b.resize(n); }
  // Within one buffer, overlapping.
  static void MoveWithin(void* dst, const void* src, size_t n) { std::memmove(dst, src, n); }
  // `old` as an n-byte buffer when its memory suffices (contents undefined), else nullopt.
  static std::optional<Buffer> Reuse(Buffer& old, size_t n) {
    if (old.capacity() < n) return std::nullopt;
    Shrink(old, n);
    return std::move(old);
  }
  // Staging buffers: large ones on huge pages too.
  StatusOr<Scratch> AllocateScratch(size_t n) {
    const bool huge = huge_pages && n >= kHugePageMinBytes;
    const size_t size =
        huge ? (n + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes : std::max<size_t>(n, 1);
    void* p = huge ? std::aligned_alloc(kHugePageBytes, size) : std::malloc(size);
    if (p == nullptr) return ResourceExhaustedError("reshard: no memory for a staging buffer");
    if (huge) AdviseHugePages(p, size);
    return Scratch{std::unique_ptr<uint8_t, Scratch::Free>(static_cast<uint8_t*>(p))};
  }
  Status Copy(void* dst, const void* src, size_t n) {
    std::memcpy(dst, src, n);
    return OkStatus();
  }
  Status Wait() { return OkStatus(); }
};

// Device shards: DeviceBuffers on one device, copies queued on the copier's stream. Wait() comes
// before every Send/Recv (the communicator's stream does not order itself after the copier's) and
// before the new shards are handed over.
struct DeviceMemory {
  using Buffer = DeviceBuffer;
  using Scratch = DeviceBuffer;
  DeviceCopier* copier;
  static constexpr bool kInPlace = false;  // device copies must not overlap
  static uint8_t* Data(Buffer& b) { return static_cast<uint8_t*>(b.data()); }
  static size_t Capacity(const Buffer& b) { return b.size(); }
  static void Shrink(Buffer&, size_t) {}
  static void MoveWithin(void*, const void*, size_t) {}
  StatusOr<Buffer> Allocate(size_t n) { return DeviceBuffer::Allocate(copier->device(), n); }
  static std::optional<Buffer> Reuse(Buffer& old, size_t n) {
    if (old.size() != n) return std::nullopt;
    return std::move(old);
  }
  StatusOr<Scratch> AllocateScratch(size_t n) { return Allocate(n); }
  Status Copy(void* dst, const void* src, size_t n) { return copier->Copy(dst, src, n); }
  Status Wait() { return copier->Wait(); }
};

// Whether the rows of `r` follow each other in the local buffer of `region`: a rectangle as wide
// as the region's box is one contiguous run there.
inline bool WholeRows(const Rect& r, const Region& region) {
  return r.col_end - r.col_begin == region.box.col_end - region.box.col_begin;
}

// Copies rectangle `r` from the buffer of region `from` into the buffer of region `to`, row by
// row, or in one copy where the rectangle is whole rows in both buffers.
template <class Memory>
Status CopyRect(Memory& memory, const Rect& r, int64_t esize, const uint8_t* src,
                const Region& from, uint8_t* dst, const Region& to) {
  const int64_t row_bytes = (r.col_end - r.col_begin) * esize;
  const bool whole = WholeRows(r, from) && WholeRows(r, to);
  const int64_t rows_per_copy = whole ? r.row_end - r.row_begin : 1;
  for (int64_t row = r.row_begin; row < r.row_end; row += rows_per_copy) {
    ELASTRA_RETURN_IF_ERROR(memory.Copy(dst + to.LocalOffset(row, r.col_begin) * esize,
                                        src + from.LocalOffset(row, r.col_begin) * esize,
                                        rows_per_copy * row_bytes));
  }
  return OkStatus();
}

// Appends the runs of rectangle `r` (`bytes` in all) in the buffer at `base` of local region
// `region` to `segments`, in row order: one run a row, or one for the rectangle where it is whole
// rows there; a run that follows the last segment in memory extends it. What a vectored exchange
// sends from or receives into, the stream that RectStream packs, without the copy.
inline void AppendRectSegments(const Rect& r, int64_t bytes, uint8_t* base, const Region& region,
                               std::vector<IoSegment>* segments) {
  const int64_t esize = bytes / r.volume();
  const bool whole = WholeRows(r, region);
  const int64_t run_bytes = whole ? bytes : (r.col_end - r.col_begin) * esize;
  const int64_t step = whole ? r.row_end - r.row_begin : 1;
  for (int64_t row = r.row_begin; row < r.row_end; row += step) {
    uint8_t* at = base + region.LocalOffset(row, r.col_begin) * esize;
    if (!segments->empty() &&
        static_cast<uint8_t*>(segments->back().data) + segments->back().bytes == at) {
      segments->back().bytes += static_cast<size_t>(run_bytes);
    } else {
      segments->push_back({at, static_cast<size_t>(run_bytes)});
    }
  }
}

// Walks the bytes of a list of rectangles row by row, in plan order, as one stream: packs them
// from (or unpacks them into) local shard buffers. A rectangle that is whole rows of its local
// region is one run of bytes there, copied at once.
template <class Memory>
class RectStream {
 public:
  struct Item {
    const Transfer* transfer;
    uint8_t* base;   // the local shard buffer
    Region region;   // the local region of that buffer
  };

  RectStream(std::vector<Item> items, Memory* memory)
      : items_(std::move(items)), memory_(memory) {
    for (const auto& it : items_) total_ += it.transfer->bytes;
  }
  int64_t total() const { return total_; }

  // Moves the next `n` bytes of the stream between `buffer` and the shards; `pack` copies from
  // the shards into the buffer.
  Status Transfer(uint8_t* buffer, int64_t n, bool pack) {
    while (n > 0) {
      const Item& it = items_[item_];
      const Rect& r = it.transfer->rect;
      const int64_t esize = it.transfer->bytes / r.volume();
      // A run: one row, or the whole rectangle where its rows follow each other locally.
      const bool whole = WholeRows(r, it.region);
      const int64_t run_bytes = whole ? it.transfer->bytes : (r.col_end - r.col_begin) * esize;
      const int64_t runs = whole ? 1 : r.row_end - r.row_begin;
      const int64_t row = r.row_begin + row_;
      const int64_t take = std::min(n, run_bytes - offset_);
      uint8_t* local = it.base + it.region.LocalOffset(row, r.col_begin) * esize + offset_;
      ELASTRA_RETURN_IF_ERROR(pack ? memory_->Copy(buffer, local, take)
                                   : memory_->Copy(local, buffer, take));
      buffer += take;
      n -= take;
      offset_ += take;
      if (offset_ == run_bytes) {
        offset_ = 0;
        if (++row_ == runs) {
          row_ = 0;
          ++item_;
        }
      }
    }
    return OkStatus();
  }

 private:
  std::vector<Item> items_;
  Memory* memory_;
  int64_t total_ = 0;
  size_t item_ = 0;
  int64_t row_ = 0;     // the run in the current rectangle
  int64_t offset_ = 0;  // bytes of that run already moved
};

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Bytes and messages moved in one direction.
struct Counters {
  int64_t bytes = 0;
  int64_t messages = 0;
};

// A staging buffer: allocated on first use, no larger than needed, grown when a larger chunk
// comes; the serial schedule keeps its two from one group to the next.
template <class Memory>
struct Staging {
  typename Memory::Scratch scratch;
  int64_t size = 0;
  StatusOr<uint8_t*> Get(Memory& memory, int64_t n) {
    if (n > size) {
      ELASTRA_ASSIGN_OR_RETURN(scratch, memory.AllocateScratch(static_cast<size_t>(n)));
      size = n;
    }
    return static_cast<uint8_t*>(scratch.data());
  }
};

// Old shards no longer read, kept to serve new shards (reshard_executor.cc: faulting in fresh
// memory costs far more than the copies into it).
template <class Memory>
class SparePool {
 public:
  void Add(typename Memory::Buffer buffer) { spare_.push_back(std::move(buffer)); }

  // The spare buffer that fits `n` bytes most tightly, as an n-byte buffer (contents undefined),
  // or nullopt. A larger one is taken only when it wastes at most a quarter of n.
  std::optional<typename Memory::Buffer> Take(size_t n) {
    size_t best = spare_.size();
    for (size_t i = 0; i < spare_.size(); ++i) {
      const size_t cap = Memory::Capacity(spare_[i]);
      if (cap < n || cap > n + n / 4) continue;
      if (best == spare_.size() || cap < Memory::Capacity(spare_[best])) best = i;
    }
    if (best == spare_.size()) return std::nullopt;
    auto reused = Memory::Reuse(spare_[best], n);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(best));
    return reused;
  }

  void Clear() { spare_.clear(); }

 private:
  std::vector<typename Memory::Buffer> spare_;
};

}  // namespace elastra::reshard_internal
