// IdIndex: the position of each worker id in a list of ids, for lists of one change's workers
// (the coordinator's Reconfiguration, a state move's workers: up to every worker of the job). A
// flat open-addressing table of positions into the list, not a node per id: building it for
// 16,384 ids is one allocation, dropping it one free, and a lookup hashes the id and compares it
// with the list's string at the slot (docs/scale.md). The list is not copied: it must outlive the
// index, and its indexed entries must not change (entries appended after Build are not indexed).
// Ids must be distinct. Thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace elastra {

class IdIndex {
 public:
  static constexpr size_t kNone = static_cast<size_t>(-1);

  // Indexes `ids`: Find(ids[i]) == i when the ids are distinct. False when an id is there more
  // than once (Find then finds its first place). `ids` must outlive the index.
  bool Build(const std::vector<std::string>* ids) {
    ids_ = ids;
    size_ = ids->size();
    size_t capacity = 16;
    while (capacity < 2 * ids->size()) capacity *= 2;
    mask_ = capacity - 1;
    slots_.assign(capacity, kEmpty);
    bool distinct = true;
    for (size_t i = 0; i < ids->size(); ++i) {
      const std::string& id = (*ids)[i];
      size_t s = Hash(id) & mask_;
      while (slots_[s] != kEmpty) {
        distinct = distinct && (*ids)[slots_[s]] != id;
        s = (s + 1) & mask_;
      }
      slots_[s] = static_cast<uint32_t>(i);
    }
    return distinct;
  }
  // Indexes nothing; frees the table.
  void Clear() {
    ids_ = nullptr;
    size_ = 0;
    slots_.clear();
    slots_.shrink_to_fit();
    mask_ = 0;
  }

  // The position of `id` in the indexed list; kNone when it is not there.
  size_t Find(std::string_view id) const {
    if (ids_ == nullptr) return kNone;
    size_t s = Hash(id) & mask_;
    while (slots_[s] != kEmpty) {
      if ((*ids_)[slots_[s]] == id) return slots_[s];
      s = (s + 1) & mask_;
    }
    return kNone;
  }
  // The same, trying position `hint` first (one string compare instead of the table's two cache
  // misses): for callers that usually know where an id is. Any hint is safe (ids are distinct).
  size_t Find(std::string_view id, size_t hint) const {
    if (ids_ != nullptr && hint < size_ && (*ids_)[hint] == id) return hint;
    return Find(id);
  }
  size_t size() const { return size_; }  // ids indexed

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  static size_t Hash(std::string_view id) { return std::hash<std::string_view>{}(id); }

  const std::vector<std::string>* ids_ = nullptr;
  size_t size_ = 0;
  std::vector<uint32_t> slots_;  // a position in *ids_, or kEmpty; a power of two, at most half full
  size_t mask_ = 0;
};

}  // namespace elastra
