// What the chaos soak reads of its job: the members in a status JSON, and whether a process ended.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace elastra::testing {

struct Member {
  std::string id;
  int rank = -1;
  pid_t pid = -1;
};

// The workers in state "member" of an `elastra status --json`, by rank.
std::vector<Member> Members(const nlohmann::json& status);

// A process that is gone or a zombie (its parent, the launcher, has not reaped it yet).
bool ProcessEnded(pid_t pid);

}  // namespace elastra::testing
