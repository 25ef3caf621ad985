// elastra ckpt list|verify|inspect DIR: look at checkpoints without a running job.
//   list DIR      the committed checkpoints under a root, newest first: step, layout, size
//   verify DIR    reads every byte of every committed checkpoint under a root (or of one
//                 checkpoint directory) and checks every checksum; exit 1 on any fault
//   inspect DIR   the manifest and tensor index of one checkpoint (a root: its newest)
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/env.h"
#include "checkpoint/format.h"
#include "checkpoint/reader.h"
#include "elastra/data_type.h"
#include "launch/cli.h"
#include "launch/commands.h"

namespace elastra::launch {
namespace {

using checkpoint::CheckpointInfo;
using checkpoint::CheckpointReader;

std::string BaseName(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// True when DIR is one checkpoint directory rather than a root holding several.
bool IsCheckpointDir(Env* env, const std::string& dir) {
  int64_t step;
  uint64_t generation;
  return env->FileExists(JoinPath(dir, checkpoint::kManifestName)) ||
         checkpoint::ParseCheckpointDirName(BaseName(dir), &step, &generation);
}

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

const char* DtypeName(int32_t dtype) {
  return IsKnownDataType(dtype) ? DataTypeName(static_cast<DataType>(dtype)) : "unknown";
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

int List(Env* env, const std::string& root) {
  std::vector<std::string> faults;
  auto list = checkpoint::ListCheckpoints(env, root, &faults);
  if (!list.ok()) {
    std::fprintf(stderr, "elastra ckpt list: %s\n", list.status().ToString().c_str());
    return 1;
  }
  for (const std::string& f : faults) {
    std::fprintf(stderr, "elastra ckpt list: not a usable checkpoint: %s\n", f.c_str());
  }
  if (list->empty()) {
    std::printf("no committed checkpoints under %s\n", root.c_str());
    return 0;
  }
  std::printf("%-12s %-6s %-16s %-6s %-8s %-10s %s\n", "STEP", "GEN", "LAYOUT", "FILES",
              "TENSORS", "SIZE", "DIR");
  for (const CheckpointInfo& c : *list) {
    std::printf("%-12lld %-6llu %-16s %-6zu %-8zu %-10s %s\n", static_cast<long long>(c.step),
                static_cast<unsigned long long>(c.generation), c.layout.ToString().c_str(),
                c.files, c.tensors, HumanBytes(c.bytes).c_str(), c.dir.c_str());
  }
  return 0;
}

// Verifies one checkpoint directory, every byte of every file; prints one line per fault (the
// file, the bytes and why) or one OK line. Returns true when it is sound.
bool VerifyOne(Env* env, const std::string& dir) {
  auto reader = CheckpointReader::Open(env, dir);
  if (!reader.ok()) {
    std::printf("FAULT %s: %s\n", dir.c_str(), reader.status().ToString().c_str());
    return false;
  }
  uint64_t bytes = 0;
  std::vector<checkpoint::Fault> faults;
  Status s = (*reader)->VerifyAll(&bytes, &faults);
  for (const checkpoint::Fault& f : faults) {
    std::printf("FAULT %s: %s\n", dir.c_str(), f.ToString().c_str());
  }
  if (!s.ok()) {
    if (faults.empty()) std::printf("FAULT %s: %s\n", dir.c_str(), s.ToString().c_str());
    return false;
  }
  const checkpoint::Manifest& m = (*reader)->manifest();
  std::printf("OK    %s: step %lld, %zu files, %s checked%s\n", dir.c_str(),
              static_cast<long long>(m.step), m.files.size(), HumanBytes(bytes).c_str(),
              (*reader)->padding_checked()
                  ? ""
                  : " (format 1: the bytes between the regions are not checked)");
  return true;
}

int Verify(Env* env, const std::string& dir) {
  if (IsCheckpointDir(env, dir)) return VerifyOne(env, dir) ? 0 : 1;
  std::vector<std::string> faults;
  auto list = checkpoint::ListCheckpoints(env, dir, &faults);
  if (!list.ok()) {
    std::fprintf(stderr, "elastra ckpt verify: %s\n", list.status().ToString().c_str());
    return 1;
  }
  for (const std::string& f : faults) std::printf("FAULT %s\n", f.c_str());
  if (list->empty() && faults.empty()) {
    std::fprintf(stderr, "elastra ckpt verify: no committed checkpoints under %s\n", dir.c_str());
    return 1;
  }
  bool ok = faults.empty();
  for (const CheckpointInfo& c : *list) ok = VerifyOne(env, c.dir) && ok;
  return ok ? 0 : 1;
}

int Inspect(Env* env, const std::string& root) {
  std::string dir = root;
  if (!IsCheckpointDir(env, dir)) {
    auto list = checkpoint::ListCheckpoints(env, dir);
    if (!list.ok() || list->empty()) {
      std::fprintf(stderr, "elastra ckpt inspect: no committed checkpoint under %s%s\n",
                   dir.c_str(), list.ok() ? "" : (": " + list.status().ToString()).c_str());
      return 1;
    }
    dir = list->front().dir;
  }
  auto reader = CheckpointReader::Open(env, dir);
  if (!reader.ok()) {
    std::fprintf(stderr, "elastra ckpt inspect: %s\n", reader.status().ToString().c_str());
    return 1;
  }
  const checkpoint::Manifest& m = (*reader)->manifest();
  std::printf("checkpoint %s\n  format version %u, job '%s', step %lld, generation %llu, %s\n",
              dir.c_str(), m.version, m.job.c_str(), static_cast<long long>(m.step),
              static_cast<unsigned long long>(m.generation), m.layout.ToString().c_str());
  std::printf("scalars:\n");
  for (const auto& [name, value] : m.scalars) {
    std::printf("  %-32s %lld\n", name.c_str(), static_cast<long long>(value));
  }
  std::printf("files:\n");
  for (const checkpoint::FileEntry& f : m.files) {
    std::printf("  %-20s rank %-5d %llu bytes\n", f.name.c_str(), f.rank,
                static_cast<unsigned long long>(f.size));
  }
  std::printf("tensors:\n");
  for (const checkpoint::TensorEntry& t : m.tensors) {
    std::printf("  %s %s %s sharding=%s\n", t.name.c_str(), DtypeName(t.dtype),
                ShapeText(t.shape).c_str(), t.rule.ToString().c_str());
    for (const checkpoint::RegionEntry& r : t.regions) {
      std::printf("    region %-24s %s @%llu +%llu bytes, %zu chunks of %llu\n",
                  r.box.ToString().c_str(), m.files[r.file].name.c_str(),
                  static_cast<unsigned long long>(r.offset),
                  static_cast<unsigned long long>(r.bytes), r.chunk_checksums.size(),
                  static_cast<unsigned long long>(r.chunk_bytes));
    }
  }
  return 0;
}

}  // namespace

void AddCkptCommand(CLI::App* app, int* exit_code) {
  CLI::App* ckpt = app->add_subcommand("ckpt", "Look at checkpoints without a running job");
  ckpt->require_subcommand(1);
  struct Action {
    const char* name;
    const char* help;
    const char* dir_help;
    int (*run)(Env*, const std::string&);
  };
  for (const Action& a :
       {Action{"list", "The committed checkpoints under a root, newest first: step, layout, size",
               "A checkpoint root", List},
        Action{"verify", "Check every checksum; exit 1 naming the file on any fault",
               "A checkpoint root (every committed checkpoint) or one checkpoint", Verify},
        Action{"inspect", "The manifest and tensor index of one checkpoint",
               "One checkpoint, or a root (its newest)", Inspect}}) {
    CLI::App* sub = ckpt->add_subcommand(a.name, a.help);
    auto dir = std::make_shared<std::string>();
    sub->add_option("DIR", *dir, a.dir_help)->required();
    sub->callback([run = a.run, dir, exit_code] { *exit_code = run(Env::Default(), *dir); });
  }
  // After the subcommands, which would otherwise copy it.
  SetUsage(ckpt, {"elastra ckpt list DIR | verify DIR | inspect DIR"});
}

int CkptCommand(const Args& args) {
  CLI::App app("", "elastra");
  int exit_code = 0;
  AddCkptCommand(&app, &exit_code);
  Args command = {"ckpt"};
  command.insert(command.end(), args.begin(), args.end());
  return ParseAndRun(app, command, exit_code);
}

}  // namespace elastra::launch
