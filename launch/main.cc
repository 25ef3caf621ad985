// elastra: the command-line entry point. docs/cli.md and docs/launching.md have every
// subcommand's output.
#include "launch/cli.h"
#include "launch/commands.h"

int main(int argc, char** argv) {
  namespace launch = elastra::launch;
  CLI::App app(
      "Elastra: elastic distributed training. A job keeps running while its workers come "
      "and go.",
      "elastra");
  app.require_subcommand(1);
  // A flag given twice takes its last value, as most commands do (set before the subcommands,
  // which copy it).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  int exit_code = 0;
  launch::AddRunCommand(&app, &exit_code);
  launch::AddCoordinatorCommand(&app, &exit_code);
  launch::AddAgentCommand(&app, &exit_code);
  launch::AddResizeCommand(&app, &exit_code);
  launch::AddDrainCommand(&app, &exit_code);
  launch::AddStatusCommand(&app, &exit_code);
  launch::AddPlanCommand(&app, &exit_code);
  launch::AddCkptCommand(&app, &exit_code);
  launch::AddKeygenCommand(&app, &exit_code);
  app.footer(
      "Run 'elastra COMMAND --help' for a command's flags; docs/launching.md and docs/cli.md "
      "have the user guide.");
  return launch::ParseAndRun(app, launch::Args(argv + 1, argv + argc), exit_code);
}
