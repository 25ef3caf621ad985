#include "tests/soak/members.h"

#include <algorithm>
#include <cstdint>
#include <fstream>

namespace elastra::testing {

std::vector<Member> Members(const nlohmann::json& status) {
  std::vector<Member> m;
  for (const auto& w : status.value("workers", nlohmann::json::array())) {
    if (w.value("state", std::string()) != "member") continue;
    m.push_back({w.value("id", std::string()), w.value("rank", -1),
                 static_cast<pid_t>(w.value("pid", int64_t{-1}))});
  }
  std::sort(m.begin(), m.end(), [](const Member& a, const Member& b) { return a.rank < b.rank; });
  return m;
}

bool ProcessEnded(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return true;
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] == 'Z';
}

}  // namespace elastra::testing
