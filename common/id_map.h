// IdMap<T>: values keyed by a string id, for tables the coordinator looks up on every message (its
// workers). The values live in blocks of kBlock and never move (a pointer to one stays valid until
// its id is erased); the ids are found through a flat open-addressing table of slot numbers with
// each id's hash beside them. A lookup hashes the id, reads one probe line and, where the hashes
// agree, the value: two cache misses where std::unordered_map takes three or four
// at 16,384 entries (its bucket, the node before, the node; docs/scale.md). Erasing uses
// backward-shift deletion, so no tombstones pile up. T must have a std::string member `id`, set
// by Emplace and unchanged after. `Hasher` hashes a std::string_view (a test passes one that
// collides). Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace elastra {

template <typename T, typename Hasher = std::hash<std::string_view>>
class IdMap {
 public:
  IdMap() = default;
  IdMap(const IdMap&) = delete;
  IdMap& operator=(const IdMap&) = delete;

  // The value of `id`, nullptr when there is none.
  T* Find(std::string_view id) { return const_cast<T*>(std::as_const(*this).Find(id)); }
  const T* Find(std::string_view id) const { return Find(id, Hash(id)); }

  // Inserts `value` under value.id, or replaces the value there (in place: pointers to it stay
  // valid). Returns the stored value and whether it was inserted.
  std::pair<T*, bool> Emplace(T value) {
    const uint64_t h = Hash(value.id);  // once, for the lookup and the placement
    if (const T* found = Find(value.id, h)) {
      T* old = const_cast<T*>(found);
      *old = std::move(value);
      return {old, false};
    }
    if (2 * (size_ + 1) > probes_.size()) Grow();
    uint32_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = static_cast<uint32_t>(used_++);
      if ((slot >> kBlockBits) >= blocks_.size()) blocks_.push_back(std::make_unique<T[]>(kBlock));
    }
    T& v = At(slot);
    v = std::move(value);
    Place(h, slot);
    if (slot >= live_.size()) live_.resize(slot + 1, false);
    live_[slot] = true;
    ++size_;
    return {&v, true};
  }

  // Removes `id`'s value (its pointer becomes invalid). False when there was none.
  bool Erase(std::string_view id) {
    if (size_ == 0) return false;
    const uint64_t h = Hash(id);
    size_t s = h & mask_;
    for (;; s = (s + 1) & mask_) {
      const Probe& p = probes_[s];
      if (p.slot == kEmpty) return false;
      if (p.hash == h && At(p.slot).id == id) break;
    }
    const uint32_t slot = probes_[s].slot;
    At(slot) = T();  // frees what the value held
    live_[slot] = false;
    free_.push_back(slot);
    --size_;
    // Backward shift: the entries after `s` in its run move up while that keeps them reachable.
    size_t hole = s;
    for (size_t next = (hole + 1) & mask_; probes_[next].slot != kEmpty;
         next = (next + 1) & mask_) {
      const size_t home = probes_[next].hash & mask_;
      // `next` may fill the hole when its home is not within (hole, next] (cyclically).
      const bool stays = hole <= next ? (home > hole && home <= next) : (home > hole || home <= next);
      if (stays) continue;
      probes_[hole] = probes_[next];
      hole = next;
    }
    probes_[hole] = Probe{};
    return true;
  }

  size_t size() const { return size_; }

  // `fn(const T&)` for each value, in no particular order. O(values ever held at once).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t slot = 0; slot < used_; ++slot) {
      if (live_[slot]) fn(At(static_cast<uint32_t>(slot)));
    }
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static constexpr size_t kBlockBits = 10;
  static constexpr size_t kBlock = size_t{1} << kBlockBits;
  struct Probe {
    uint64_t hash = 0;  // the id's: its low bits are the probe's first position under any mask
    uint32_t slot = kEmpty;
  };

  static uint64_t Hash(std::string_view id) { return static_cast<uint64_t>(Hasher{}(id)); }
  // Find with the id's hash already computed.
  const T* Find(std::string_view id, uint64_t h) const {
    if (size_ == 0) return nullptr;
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const Probe& p = probes_[s];
      if (p.slot == kEmpty) return nullptr;
      if (p.hash == h) {
        const T& v = At(p.slot);
        if (v.id == id) return &v;
      }
    }
  }
  T& At(uint32_t slot) { return blocks_[slot >> kBlockBits][slot & (kBlock - 1)]; }
  const T& At(uint32_t slot) const { return blocks_[slot >> kBlockBits][slot & (kBlock - 1)]; }

  void Place(uint64_t h, uint32_t slot) {
    size_t s = h & mask_;
    while (probes_[s].slot != kEmpty) s = (s + 1) & mask_;
    probes_[s] = Probe{h, slot};
  }
  void Grow() {
    std::vector<Probe> old = std::move(probes_);
    const size_t capacity = old.empty() ? 64 : 2 * old.size();
    probes_.assign(capacity, Probe{});
    mask_ = capacity - 1;
    for (const Probe& p : old) {
      if (p.slot != kEmpty) Place(p.hash, p.slot);
    }
  }

  std::vector<std::unique_ptr<T[]>> blocks_;  // the values, kBlock a block; slots never move
  size_t used_ = 0;                           // slots handed out (erased ones are in free_)
  std::vector<uint32_t> free_;
  std::vector<bool> live_;     // by slot: whether it holds a value (ForEach)
  std::vector<Probe> probes_;  // a power of two, at most half full
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace elastra
