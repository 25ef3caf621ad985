// FuzzCorpus.version: fails when tests/fuzz/corpus was written for other encodings than the
// code's (its VERSION differs from CorpusVersion()), or when a target has no seed.
//
//   fuzz_corpus_version CORPUS_DIR TARGET...
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/fuzz/corpus_version.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR TARGET...\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  constexpr char kRegenerate[] =
      "write the seeds again with `make fuzz-corpus` (build/tests/fuzz/fuzz_make_corpus "
      "tests/fuzz/corpus) and commit tests/fuzz/corpus";
  std::ifstream in(dir / "VERSION");
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string code = elastra::fuzz::CorpusVersion();
  int failed = 0;
  if (written != code) {
    std::fprintf(
        stderr, "%s/VERSION: the seeds were written for\n%sbut the code's encodings are\n%s%s\n",
        dir.c_str(), fs::exists(dir / "VERSION") ? written.c_str() : "(no VERSION: older ones)\n",
        code.c_str(), kRegenerate);
    failed = 1;
  }
  for (int i = 2; i < argc; ++i) {
    bool seeded = false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir / argv[i], ec)) {
      seeded |= e.path().filename().string().rfind("seed-", 0) == 0;
    }
    if (!seeded) {
      std::fprintf(stderr, "%s/%s has no seed: %s\n", dir.c_str(), argv[i], kRegenerate);
      failed = 1;
    }
  }
  if (failed == 0) {
    std::printf("%s: seeds of %d targets, written for the code's %s", dir.c_str(), argc - 2,
                code.c_str());
  }
  return failed;
}
