// Host memory for large buffers: see host_memory.h.
#include "common/host_memory.h"

#include <sys/mman.h>

namespace elastra {

void AdviseHugePages(void* p, size_t n) {
  if (n < kHugePageMinBytes) return;
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  const uintptr_t begin = (at + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uintptr_t end = (at + n) / kHugePageBytes * kHugePageBytes;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

HostBytes NewHostBuffer(size_t n, bool huge) {
  HostBytes b;
  b.reserve(n);  // allocates without touching a page
  if (huge) AdviseHugePages(b.data(), n);
  b.resize(n);
  return b;
}

}  // namespace elastra
