// `elastra plan` end to end: the binary's output and exit codes.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr
};

Result RunPlan(const std::string& args) {
  Result r;
  const std::string cmd = std::string(ELASTRA_BINARY) + " plan " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string WriteModel(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

const char kModel[] = R"({"layers": 4, "hidden": 64, "heads": 8, "ffn_hidden": 256, "vocab": 500,
  "seq_len": 32, "global_batch": 16, "micro_batch": 1, "dtype": "fp32", "zero": 1,
  "device_memory_gib": 16})";

TEST(PlanCommand, TransferTotalsMatchTheLowerBound) {
  const std::string model = WriteModel("plan_model.json", kModel);
  for (const char* change : {"--from dp=2,pp=1,tp=2 --to dp=1,pp=2,tp=2",
                             "--from dp=1,pp=2,tp=2 --to dp=4,pp=1,tp=1",
                             "--from dp=8,pp=1,tp=1 --to dp=2,pp=1,tp=2"}) {
    Result r = RunPlan("--model " + model + " " + change + " --workers-per-host 4 --json");
    ASSERT_EQ(r.code, 0) << r.out;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_GT(j["bytes_moved"].get<int64_t>(), 0) << change;
    EXPECT_EQ(j["bytes_moved"], j["bytes_lower_bound"]) << change;
    EXPECT_GT(j["transfers"].get<int64_t>(), 0);
    EXPECT_LE(j["max_sent"].get<int64_t>(), j["bytes_moved"].get<int64_t>());
    EXPECT_GT(j["max_received"].get<int64_t>(), 0);
  }
  // Shrinking 8 -> 4 workers: four leave, and the text output names the totals.
  Result shrink = RunPlan("--model " + model + " --from dp=8,pp=1,tp=1 --to dp=4,pp=1,tp=1 --json");
  ASSERT_EQ(shrink.code, 0) << shrink.out;
  EXPECT_EQ(nlohmann::json::parse(shrink.out)["leaving"].size(), 4u);
  Result text = RunPlan("--model " + model + " --from dp=2,pp=1,tp=2 --to dp=1,pp=2,tp=2");
  ASSERT_EQ(text.code, 0);
  for (const char* key : {"bytes_moved", "bytes_lower_bound", "transfers", "max_sent",
                          "max_received"}) {
    EXPECT_NE(text.out.find(key), std::string::npos) << key;
  }
}

TEST(PlanCommand, LayoutChoicePrintsBestAndAlternatives) {
  const std::string model = WriteModel("plan_model2.json", kModel);
  Result r = RunPlan("--model " + model + " --workers 8 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_LE(j["best"]["workers"].get<int>(), 8);
  EXPECT_GT(j["best"]["step_time_s"].get<double>(), 0);
  ASSERT_FALSE(j["alternatives"].empty());
  EXPECT_GE(j["alternatives"][0]["step_time_s"].get<double>(),
            j["best"]["step_time_s"].get<double>());
  Result pinned = RunPlan("--model " + model + " --workers 8 --tp 2 --json");
  ASSERT_EQ(pinned.code, 0) << pinned.out;
  EXPECT_EQ(nlohmann::json::parse(pinned.out)["best"]["tp"], 2);
}

TEST(PlanCommand, BadInputExitsTwoWithAReason) {
  const std::string model = WriteModel("plan_model3.json", kModel);
  const std::string bad = WriteModel("plan_bad.json", R"({"layers": 4, "hiden": 3})");
  struct Case {
    std::string args;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"--workers 4", "--model"},
      {"--model /nonexistent.json --workers 4", "cannot read"},
      {"--model " + bad + " --workers 4", "unknown field 'hiden'"},
      {"--model " + model + " --workers x", "integer"},
      {"--model " + model + " --from dp=2,pp=1,tp=3 --to dp=1", "tp must divide"},
      {"--model " + model + " --from dp=2,pp=9,tp=1 --to dp=1", "pp exceeds"},
      {"--model " + model + " --from dp=3 --to dp=1", "global_batch"},
      {"--model " + model + " --from nonsense --to dp=1", "not a layout"},
      {"--model " + model + " --to dp=1", "--to needs --from"},
      {"--model " + model + " --workers 4 --only-dp", "--only-dp needs --from"},
      {"--model " + model + " --bogus", "unknown flag"},
  };
  for (const auto& c : cases) {
    Result r = RunPlan(c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << ": " << r.out;
  }
}

}  // namespace
