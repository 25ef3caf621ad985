#include "launch/cli.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>

namespace elastra::launch {
namespace {

// Help whose usage lines are written out rather than generated from the flags.
class UsageFormatter : public CLI::Formatter {
 public:
  explicit UsageFormatter(std::vector<std::string> lines) : lines_(std::move(lines)) {}

  std::string make_usage(const CLI::App* /*app*/, std::string /*name*/) const override {
    std::string out;
    for (size_t i = 0; i < lines_.size(); ++i) {
      out += (i == 0 ? "Usage: " : "       ") + lines_[i] + "\n";
    }
    return out;
  }

 private:
  std::vector<std::string> lines_;
};

// The commands the parse chose, from the application down: {elastra, ckpt, verify}.
std::vector<const CLI::App*> ChosenPath(const CLI::App& app) {
  std::vector<const CLI::App*> path = {&app};
  for (;;) {
    std::vector<CLI::App*> chosen = path.back()->get_subcommands();
    if (chosen.empty()) return path;
    path.push_back(chosen.front());
  }
}

std::string CommandName(const std::vector<const CLI::App*>& path) {
  std::string name;
  for (const CLI::App* app : path) name += (name.empty() ? "" : " ") + app->get_name();
  return name;
}

// Why the parse failed, in our words where CLI11's would not name the argument.
std::string Explain(const std::vector<const CLI::App*>& path, const CLI::ParseError& e) {
  // An argument no command took, left with the command it was given to.
  for (const CLI::App* app : path) {
    if (app->remaining_size() == 0) continue;
    // remaining() also lists where a "--" was seen, which remaining_size() does not count.
    const std::vector<std::string> extra = app->remaining();
    auto it = std::find_if(extra.begin(), extra.end(), [](const auto& a) { return a != "--"; });
    const std::string& arg = it != extra.end() ? *it : extra.front();
    if (arg.size() > 1 && arg[0] == '-') return "unknown flag " + arg;
    if (app == path.back() && app->get_require_subcommand_min() > 0) {
      return "unknown command '" + arg + "'";
    }
    return "unexpected argument '" + arg + "'";
  }
  const CLI::App* last = path.back();
  if (e.get_name() == "RequiredError" && last->get_require_subcommand_min() > 0) {
    std::string names;
    for (const CLI::App* sub : last->get_subcommands({})) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    return "a command is required: " + names;
  }
  return e.what();
}

}  // namespace

int ParseIntFlag(const std::string& name, const std::string& text, int lo, int hi) {
  long long v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec == std::errc::invalid_argument || ptr != end) {
    throw FlagError(name + " must be an integer, got '" + text + "'");
  }
  if (ec == std::errc::result_out_of_range || v < lo || v > hi) {
    throw FlagError(name + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                    ", got " + text);
  }
  return static_cast<int>(v);
}

CLI::Option* AddIntFlag(CLI::App* app, const std::string& name, int* out, int lo, int hi,
                        const std::string& type, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          name, [=](const std::string& text) { *out = ParseIntFlag(name, text, lo, hi); }, help)
      ->type_name(type)
      ->default_function([out] { return std::to_string(*out); });
}

CLI::Option* AddIntFlag(CLI::App* app, const std::string& name, std::optional<int>* out, int lo,
                        int hi, const std::string& type, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          name, [=](const std::string& text) { *out = ParseIntFlag(name, text, lo, hi); }, help)
      ->type_name(type);
}

CLI::Option* AddLayoutFlag(CLI::App* app, const std::string& name, std::optional<Layout>* out,
                           const std::string& help) {
  return app
      ->add_option_function<std::string>(
          name,
          [=](const std::string& text) {
            Layout layout;
            if (!ParseLayout(text, &layout)) {
              throw FlagError(name + " '" + text + "' is not a layout like dp=2,pp=1,tp=2");
            }
            *out = layout;
          },
          help)
      ->type_name("dp=D,pp=P,tp=T");
}

CLI::Option* AddGpusFlag(CLI::App* app, GpusFlag* out) {
  return app
      ->add_option_function<std::string>(
          "--gpus",
          [out](const std::string& text) {
            if (text == "auto") {
              out->all = true;
              out->count.reset();
            } else {
              out->count = ParseIntFlag("--gpus", text, 1, 4096);
              out->all = false;
            }
          },
          "Give each worker a GPU (ELASTRA_DEVICE) among N, or every CUDA device with auto")
      ->type_name("N|auto");
}

void SetUsage(CLI::App* app, std::vector<std::string> lines) {
  app->formatter(std::make_shared<UsageFormatter>(std::move(lines)));
}

int UsageError(const std::string& command, const std::string& why) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", command.c_str(), why.c_str(),
               command.c_str());
  return 2;
}

int ParseAndRun(CLI::App& app, const Args& args, const int& exit_code) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e);  // --help: the chosen command's help on stdout
    }
    if (args.empty()) {
      std::cerr << app.help();
      return 2;
    }
    const std::vector<const CLI::App*> path = ChosenPath(app);
    return UsageError(CommandName(path), Explain(path, e));
  }
  return exit_code;
}

}  // namespace elastra::launch
