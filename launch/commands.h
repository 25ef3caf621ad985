// The `elastra` command's subcommands. Each returns the process exit code: 0 success, 1 the
// operation failed or was refused, 2 bad usage.
#pragma once

#include <string>
#include <vector>

namespace elastra::launch {

using Args = std::vector<std::string>;

int RunCommand(const Args& args);          // elastra run
int CoordinatorCommand(const Args& args);  // elastra coordinator
int ResizeCommand(const Args& args);       // elastra resize
int StatusCommand(const Args& args);       // elastra status
int KeygenCommand(const Args& args);       // elastra keygen
int PlanCommand(const Args& args);         // elastra plan (launch/plan_command.cc)
int CkptCommand(const Args& args);         // elastra ckpt list|verify|inspect DIR

// Small flag parser shared by the subcommands: --name value, --name=value, and boolean --flag.
class FlagParser {
 public:
  FlagParser(std::string command, const Args& args) : command_(std::move(command)), args_(args) {}
  // Walks the arguments; `value_flags` take a value, `bool_flags` do not. Stops at "--" and
  // leaves the rest in rest(). Returns false (after printing why) on an unknown flag.
  bool Parse(const std::vector<std::string>& value_flags,
             const std::vector<std::string>& bool_flags);
  bool Has(const std::string& name) const;
  std::string Get(const std::string& name, const std::string& fallback = "") const;
  // Parses an integer flag in [lo, hi]; prints a clear error and returns false when malformed.
  bool GetInt(const std::string& name, long long lo, long long hi, long long* out) const;
  const Args& rest() const { return rest_; }

 private:
  std::string command_;
  Args args_;
  Args rest_;
  std::vector<std::pair<std::string, std::string>> values_;
};

}  // namespace elastra::launch
