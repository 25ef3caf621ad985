// elastra: the command-line entry point. See README.md for every subcommand's output.
#include <cstdio>
#include <cstring>
#include <string>

#include "launch/commands.h"

namespace {

void PrintUsage() {
  std::fprintf(stderr,
               "usage: elastra <command> [flags]\n"
               "  run         --nproc N [--state-dir DIR] [--max-workers M] [--gpus N|auto]\n"
               "              -- PROGRAM ARGS...\n"
               "  coordinator --state-dir DIR --workers N [--bind tcp://HOST:PORT] | --state-dir DIR "
               "--restart\n"
               "  resize      --state-dir DIR --workers N [--layout dp=D,pp=P,tp=T] [--wait]\n"
               "  status      --state-dir DIR [--json]\n"
               "  keygen      [--out FILE]\n"
               "  ckpt        list|verify|inspect DIR\n"
               "  plan        --model FILE (--workers N | --from LAYOUT --to LAYOUT) [--json]\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  std::string command = argv[1];
  elastra::launch::Args args(argv + 2, argv + argc);
  if (command == "run") return elastra::launch::RunCommand(args);
  if (command == "coordinator") return elastra::launch::CoordinatorCommand(args);
  if (command == "resize") return elastra::launch::ResizeCommand(args);
  if (command == "status") return elastra::launch::StatusCommand(args);
  if (command == "keygen") return elastra::launch::KeygenCommand(args);
  if (command == "ckpt") return elastra::launch::CkptCommand(args);
  if (command == "plan") return elastra::launch::PlanCommand(args);
  std::fprintf(stderr, "elastra: unknown command '%s'\n", command.c_str());
  PrintUsage();
  return 2;
}
