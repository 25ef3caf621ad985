// The command line of `elastra`, on CLI11: one CLI::App with a subcommand per command (each added
// by its Add*Command, launch/commands.h), the typed flags several commands share, and
// ParseAndRun, which runs the chosen command and turns every parse failure into one line that
// names what was wrong, and exit code 2.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "elastra/layout.h"
#include "launch/commands.h"

namespace elastra::launch {

// The most workers one job may have on the command line (--workers, --max-workers): within what
// the coordinator's control plane is measured at (docs/scale.md: 16,384 simulated workers) with
// room above it; a layout's own bound (kMaxWorld) is higher. The per-machine flags (--nproc,
// --slots) keep their own bound of 4096 processes on one host.
inline constexpr int kMaxJobWorkers = 1 << 16;

// A flag value that our own conversion refused. The message is the whole sentence and names the
// flag ("--workers must be between 1 and 4096, got 0").
class FlagError : public CLI::ParseError {
 public:
  explicit FlagError(std::string message)
      : CLI::ParseError("FlagError", std::move(message), CLI::ExitCodes::ValidationError) {}
};

// Parses `text`, the value of flag `name`, as an integer in [lo, hi]; throws FlagError saying
// "NAME must be an integer, got 'x'" or "NAME must be between LO and HI, got X" otherwise.
int ParseIntFlag(const std::string& name, const std::string& text, int lo, int hi);

// An integer flag in [lo, hi] (`type` names its value in the help, e.g. "N"). A bad value ends
// the parse with ParseIntFlag's message. With an `int*`, capture_default_str() on the result
// shows its current value as the default in the help.
CLI::Option* AddIntFlag(CLI::App* app, const std::string& name, int* out, int lo, int hi,
                        const std::string& type, const std::string& help);
CLI::Option* AddIntFlag(CLI::App* app, const std::string& name, std::optional<int>* out, int lo,
                        int hi, const std::string& type, const std::string& help);

// A layout flag (dp=D,pp=P,tp=T; a degree left out is 1). A bad value ends the parse with
// "NAME 'x' is not a layout like dp=2,pp=1,tp=2".
CLI::Option* AddLayoutFlag(CLI::App* app, const std::string& name, std::optional<Layout>* out,
                           const std::string& help);

// --gpus N|auto, as `elastra run` and `elastra agent` take it.
struct GpusFlag {
  std::optional<int> count;  // --gpus N
  bool all = false;          // --gpus auto: every CUDA device the process sees
  bool given() const { return count.has_value() || all; }
};
// Adds --gpus to `app`. A value that is neither "auto" nor an integer in 1..4096 ends the parse
// with ParseIntFlag's message.
CLI::Option* AddGpusFlag(CLI::App* app, GpusFlag* out);

// Replaces CLI11's generated "Usage: elastra run [OPTIONS] [PROGRAM...]" in `app`'s help with
// these lines, the forms docs/cli.md documents.
void SetUsage(CLI::App* app, std::vector<std::string> lines);

// Prints "elastra COMMAND: why" and a pointer to --help on stderr; returns 2. For the usage
// rules a command checks itself (flags that only go together, a missing program).
int UsageError(const std::string& command, const std::string& why);

// Parses `args` (without the program name) and runs the chosen command. Returns its exit code;
// 0 after printing help for --help; 2 after printing why for an unknown flag or command, a
// missing required flag or argument, or a bad value.
int ParseAndRun(CLI::App& app, const Args& args, const int& exit_code);

}  // namespace elastra::launch
