// IdMap<T>: values keyed by a string id, for tables the coordinator looks up on every message (its
// workers). The values live in blocks of kBlock and never move (a pointer to one stays valid until
// its id is erased); the ids are found through a flat open-addressing table of slot numbers with
// the low 32 bits of each id's hash beside them, 8 bytes a probe (256 KB at 16,384 ids, held in
// a core's L2 cache). A lookup hashes the id, reads one probe line and, where the hashes agree,
// the value: two cache misses where std::unordered_map takes three or four at 16,384 entries
// (its bucket, the node before, the node; docs/scale.md). Erasing uses
// backward-shift deletion, so no tombstones pile up. Each value has a slot, a dense number below
// the most values held at once, fixed while it lives and reused after it is erased: other tables
// keyed by the same ids can be flat arrays by slot (AtSlot finds the value again). T must have a
// std::string member `id`, set by Emplace and unchanged after. `Hasher` hashes a std::string_view
// (a test passes one that collides). Thread-compatible.
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

  static constexpr uint32_t kNoSlot = UINT32_MAX;

  // The value of `id`, nullptr when there is none.
  T* Find(std::string_view id) { return const_cast<T*>(std::as_const(*this).Find(id)); }
  const T* Find(std::string_view id) const {
    const uint32_t slot = FindSlot(id, Hash(id));
    return slot == kNoSlot ? nullptr : &At(slot);
  }

  // The value in `slot`, nullptr when none lives there.
  T* AtSlot(uint32_t slot) { return const_cast<T*>(std::as_const(*this).AtSlot(slot)); }
  const T* AtSlot(uint32_t slot) const {
    return slot < live_.size() && live_[slot] ? &At(slot) : nullptr;
  }

  // Inserts `value` under value.id, or replaces the value there (in place: pointers to it and its
  // slot stay). Returns the stored value and whether it was inserted; its slot in `*slot` when
  // given.
  std::pair<T*, bool> Emplace(T value, uint32_t* slot_out = nullptr) {
    const uint64_t h = Hash(value.id);  // once, for the lookup and the placement
    if (const uint32_t found = FindSlot(value.id, h); found != kNoSlot) {
      T& old = At(found);
      old = std::move(value);
      if (slot_out != nullptr) *slot_out = found;
      return {&old, false};
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
    if (slot_out != nullptr) *slot_out = slot;
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
      if (p.hash == static_cast<uint32_t>(h) && At(p.slot).id == id) break;
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

  // For a caller that looks up several ids in a row (a batch of messages, each naming its
  // sender), so that their cache misses overlap instead of following one another: PrefetchProbe
  // starts loading the probe line where the search for `id` begins; PrefetchValue, called once
  // that line has had time to arrive (a lookup or two later), reads it and starts loading the
  // value whose hash matches, and returns that value's slot (kNoSlot when none matches). It
  // compares no ids: the slot is a guess, right unless two ids' hashes agree. Neither changes
  // anything.
  void PrefetchProbe(std::string_view id) const {
    if (size_ != 0) __builtin_prefetch(&probes_[Hash(id) & mask_]);
  }
  uint32_t PrefetchValue(std::string_view id) const {
    const uint32_t slot = GuessSlot(id);
    if (slot == kNoSlot) return kNoSlot;
    const char* value = reinterpret_cast<const char*>(&At(slot));
    for (size_t line = 0; line < sizeof(T) && line < 2 * kLine; line += kLine) {
      __builtin_prefetch(value + line);
    }
    return slot;
  }
  // The slot PrefetchValue guessed for `id`, from the probe line it read: a guess, as there.
  uint32_t GuessSlot(std::string_view id) const {
    if (size_ == 0) return kNoSlot;
    const uint64_t h = Hash(id);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const Probe& p = probes_[s];
      if (p.slot == kEmpty) return kNoSlot;
      if (p.hash == static_cast<uint32_t>(h)) return p.slot;
    }
  }

  // `fn(const T&)` for each value, in no particular order. O(values ever held at once).
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t slot = 0; slot < used_; ++slot) {
      if (live_[slot]) fn(At(static_cast<uint32_t>(slot)));
    }
  }

 private:
  static constexpr uint32_t kEmpty = kNoSlot;
  static constexpr size_t kLine = 64;  // a cache line
  static constexpr size_t kBlockBits = 10;
  static constexpr size_t kBlock = size_t{1} << kBlockBits;
  struct Probe {
    // The id's hash's low 32 bits: the probe's first position under any mask (a table stays
    // far below 2^32 probes), and a filter before the id is compared.
    uint32_t hash = 0;
    uint32_t slot = kEmpty;
  };

  static uint64_t Hash(std::string_view id) { return static_cast<uint64_t>(Hasher{}(id)); }
  // The slot of `id`, whose hash is `h`; kNoSlot when there is none.
  uint32_t FindSlot(std::string_view id, uint64_t h) const {
    if (size_ == 0) return kNoSlot;
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
      const Probe& p = probes_[s];
      if (p.slot == kEmpty) return kNoSlot;
      if (p.hash == static_cast<uint32_t>(h) && At(p.slot).id == id) return p.slot;
    }
  }
  T& At(uint32_t slot) { return blocks_[slot >> kBlockBits][slot & (kBlock - 1)]; }
  const T& At(uint32_t slot) const { return blocks_[slot >> kBlockBits][slot & (kBlock - 1)]; }

  void Place(uint64_t h, uint32_t slot) {
    size_t s = h & mask_;
    while (probes_[s].slot != kEmpty) s = (s + 1) & mask_;
    probes_[s] = Probe{static_cast<uint32_t>(h), slot};
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
