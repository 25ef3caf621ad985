// HostBytes: the byte buffer that holds a tensor's shard in host memory. A std::vector<uint8_t>
// whose resize(n) and HostBytes(n) leave the new bytes unset instead of zero-filling them: every
// new shard is written whole right after it is allocated (by a reshard, a checkpoint load, a
// commit's restore), and the zero-fill was a quarter of a reshard's CPU time. Ask for zeros where
// they are wanted: HostBytes(n, 0) or resize(n, 0).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace elastra {

// std::allocator, except that a value constructed with no arguments is default-initialized
// (for uint8_t: left unset) instead of value-initialized (zero).
template <class T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  using value_type = T;
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };

  DefaultInitAllocator() noexcept = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}

  template <class U>
  void construct(U* p) noexcept(noexcept(::new (static_cast<void*>(p)) U)) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using HostBytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

}  // namespace elastra
