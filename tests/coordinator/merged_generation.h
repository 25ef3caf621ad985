// NewGeneration is addressed to each recipient: its own entries and those of the workers it
// trades state with. Tests of the coordinator's rank assignment put the tables back together from
// every recipient's message (each member gets its own entry).
#pragma once

#include <map>
#include <vector>

#include "protocol/messages.h"

namespace elastra::coordinator {

inline proto::NewGeneration Merged(const std::vector<proto::NewGeneration>& gens) {
  proto::NewGeneration out = gens.empty() ? proto::NewGeneration{} : gens.front();
  std::map<int, proto::Member> members, prev;
  for (const auto& g : gens) {
    for (const auto& m : g.members) members[m.rank] = m;
    for (const auto& m : g.prev_members) prev[m.rank] = m;
  }
  out.members.clear();
  out.prev_members.clear();
  for (auto& [rank, m] : members) out.members.push_back(m);
  for (auto& [rank, m] : prev) out.prev_members.push_back(m);
  return out;
}

}  // namespace elastra::coordinator
