#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "launch/commands.h"

namespace elastra::launch {

bool FlagParser::Parse(const std::vector<std::string>& value_flags,
                       const std::vector<std::string>& bool_flags) {
  auto is = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < args_.size(); ++i) {
    const std::string& a = args_[i];
    if (a == "--") {
      rest_.assign(args_.begin() + static_cast<long>(i) + 1, args_.end());
      return true;
    }
    if (a.rfind("--", 0) != 0) {
      std::fprintf(stderr, "elastra %s: unexpected argument '%s'\n", command_.c_str(), a.c_str());
      return false;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (is(bool_flags, name) && !inline_value) {
      values_.emplace_back(name, "true");
    } else if (is(value_flags, name)) {
      if (!inline_value) {
        if (i + 1 >= args_.size()) {
          std::fprintf(stderr, "elastra %s: --%s needs a value\n", command_.c_str(), name.c_str());
          return false;
        }
        value = args_[++i];
      }
      values_.emplace_back(name, value);
    } else {
      std::fprintf(stderr, "elastra %s: unknown flag --%s\n", command_.c_str(), name.c_str());
      return false;
    }
  }
  return true;
}

bool FlagParser::Has(const std::string& name) const {
  for (const auto& [n, v] : values_) {
    if (n == name) return true;
  }
  return false;
}

std::string FlagParser::Get(const std::string& name, const std::string& fallback) const {
  std::string out = fallback;
  for (const auto& [n, v] : values_) {
    if (n == name) out = v;
  }
  return out;
}

bool FlagParser::GetInt(const std::string& name, long long lo, long long hi,
                        long long* out) const {
  if (!Has(name)) return true;
  std::string v = Get(name);
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end == v.c_str() || *end != '\0' || errno == ERANGE) {
    std::fprintf(stderr, "elastra %s: --%s must be an integer, got '%s'\n", command_.c_str(),
                 name.c_str(), v.c_str());
    return false;
  }
  if (x < lo || x > hi) {
    std::fprintf(stderr, "elastra %s: --%s must be between %lld and %lld, got %lld\n",
                 command_.c_str(), name.c_str(), lo, hi, x);
    return false;
  }
  *out = x;
  return true;
}

}  // namespace elastra::launch
