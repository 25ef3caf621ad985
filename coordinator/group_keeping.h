// Group keeping: which of a new generation's dp, pp and tp communicators can be the committed
// generation's, kept by their members instead of built again (docs/recovery.md, "Rebuild only
// what changed"). A pure function of the two generations' layouts and members and the health
// each member reported of its groups at the pause (proto::GroupHealth). Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "elastra/layout.h"
#include "protocol/messages.h"

namespace elastra::coordinator {

struct KeptGroups {
  std::vector<uint8_t> keep;  // by new rank: NewGeneration::keep_groups (bits 1 << GroupKind)
  // The new generation's communicators: the world (always built) and each dp, pp and tp group
  // of more than one rank that is not the world, built or kept (a group of one rank connects
  // nothing: it is built, and not counted).
  int32_t rebuilt = 0;
  int32_t kept = 0;
};

// What worker `id` (old rank `old_rank`) reported of its group of kind `kind`; nullptr when it
// reported none.
using GroupHealthOf =
    std::function<const proto::GroupHealth*(const std::string& id, size_t old_rank, uint8_t kind)>;

// A group of the new layout is kept when it has the same workers in the same order as a group of
// the same kind in `old_layout` (the committed generation `old_generation`), neither is its
// layout's whole world, and every member reported that group intact, built in `old_generation`,
// with as many collectives completed as the others and every point-to-point message sent to a
// member received by it. `enabled` false: every group is built (ELASTRA_KEEP_GROUPS=0, the
// benchmark's reference). O(new world + reported point-to-point peers).
KeptGroups PlanKeptGroups(const Layout& old_layout, const std::vector<std::string>& old_members,
                          uint64_t old_generation, const Layout& new_layout,
                          const std::vector<std::string>& new_members,
                          const GroupHealthOf& health, bool enabled);

// How many communicators a generation of `layout` has that connect ranks: the world and each
// group of more than one rank that is not it.
int32_t CommunicatorsOf(const Layout& layout);

}  // namespace elastra::coordinator
