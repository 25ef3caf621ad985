// Host memory for large buffers that are written once right after they are allocated (new
// shards, staging buffers, loaded checkpoint regions, commit images). Fresh memory is faulted in
// page by page as it is first written, which costs several times the copy into it (on some
// virtual machines once more as the kernel first copies into it, see docs/design-notes.md);
// transparent huge pages cut the faults 512-fold. Thread-safe (pure functions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "elastra/host_bytes.h"

namespace elastra {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
// Buffers smaller than this keep 4 KiB pages: a huge page for a small buffer wastes memory.
inline constexpr size_t kHugePageMinBytes = 2 * kHugePageBytes;

// Asks the kernel for transparent huge pages (madvise(MADV_HUGEPAGE)) on the 2 MiB pages that
// [p, p + n) covers whole. Advice only: where the kernel refuses, 4 KiB pages. Nothing for
// buffers under kHugePageMinBytes.
void AdviseHugePages(void* p, size_t n);

// An n-byte buffer, its bytes unset (the caller writes them all), whose memory asked for huge
// pages before its first write (when `huge` and n is at least kHugePageMinBytes).
HostBytes NewHostBuffer(size_t n, bool huge = true);

}  // namespace elastra
