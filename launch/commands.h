// The `elastra` command's subcommands. Each Add*Command adds one subcommand to the application:
// its flags, its help, and a callback that runs it and leaves the process exit code in *exit_code
// (0 success, 1 the operation failed or was refused, 2 bad usage). launch/main.cc puts them
// together; launch/cli.h has the parsing they share.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace elastra::launch {

using Args = std::vector<std::string>;

void AddRunCommand(CLI::App* app, int* exit_code);          // elastra run (launch/run.cc)
void AddCoordinatorCommand(CLI::App* app, int* exit_code);  // elastra coordinator (run.cc)
void AddAgentCommand(CLI::App* app, int* exit_code);        // elastra agent (launch/agent.cc)
void AddResizeCommand(CLI::App* app, int* exit_code);       // elastra resize (launch/admin.cc)
void AddDrainCommand(CLI::App* app, int* exit_code);        // elastra drain (admin.cc)
void AddStatusCommand(CLI::App* app, int* exit_code);       // elastra status (admin.cc)
void AddKeygenCommand(CLI::App* app, int* exit_code);       // elastra keygen (admin.cc)
void AddPlanCommand(CLI::App* app, int* exit_code);         // elastra plan (plan_command.cc)
void AddCkptCommand(CLI::App* app, int* exit_code);         // elastra ckpt (ckpt_command.cc)

// `elastra ckpt ARGS...` in this process, parsed as the command line would be; its exit code.
int CkptCommand(const Args& args);

}  // namespace elastra::launch
