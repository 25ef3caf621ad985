// examples::MatchLogs, the check every job test makes of a run's log against its reference.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "examples/log_check.h"

namespace elastra::examples {
namespace {

struct Line {
  int64_t step;
  double loss;
};

// A log of `lines`, 8 samples a step, in a file of the test's own.
std::string WriteLog(const std::string& name, const std::vector<Line>& lines) {
  std::string path = ::testing::TempDir() + "log_check_test_" + name + ".jsonl";
  std::ofstream out(path);
  for (const Line& l : lines) {
    out << "{\"step\":" << l.step << ",\"loss\":" << l.loss << ",\"dp\":2,\"sample_begin\":"
        << 8 * l.step << ",\"sample_end\":" << 8 * (l.step + 1) << "}\n";
  }
  return path;
}

TEST(MatchLogs, AcceptsARunThatFollowsTheReference) {
  const std::string ref = WriteLog("ref", {{0, 2.0}, {1, 1.5}, {2, 1.25}});
  // Step 1 logged twice (undone by a rollback, applied again): the last record counts.
  const std::string run = WriteLog("run", {{0, 2.0}, {1, 9.0}, {1, 1.50001}, {2, 1.25}});
  LogMatch m = MatchLogs(run, ref, 3, 1e-4);
  EXPECT_TRUE(m.status.ok()) << m.status;
  EXPECT_EQ(m.comparison.steps, 3);
  EXPECT_EQ(m.run.applied.size(), 3u);
  EXPECT_EQ(m.run.reapplied, 1);
  EXPECT_GT(m.comparison.max_rel_loss_diff, 0);
}

TEST(MatchLogs, SaysWhatIsWrong) {
  const std::string ref = WriteLog("ref2", {{0, 2.0}, {1, 1.5}, {2, 1.25}});
  LogMatch missing = MatchLogs(WriteLog("missing", {{0, 2.0}, {2, 1.25}}), ref, 3, 1e-4);
  EXPECT_EQ(missing.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(missing.status.message().find("step 1 was never applied"), std::string::npos)
      << missing.status;
  EXPECT_EQ(missing.run.applied.size(), 2u);  // the run's log comes back for more checks

  LogMatch loss = MatchLogs(WriteLog("loss", {{0, 2.0}, {1, 1.6}, {2, 1.25}}), ref, 3, 1e-4);
  EXPECT_EQ(loss.status.code(), StatusCode::kCorrupt);
  EXPECT_NE(loss.status.message().find("loss difference"), std::string::npos) << loss.status;

  LogMatch extra = MatchLogs(ref, ref, 2, 1e-4);  // a step past the last one
  EXPECT_EQ(extra.status.code(), StatusCode::kCorrupt);

  EXPECT_EQ(MatchLogs(ref + ".absent", ref, 3, 1e-4).status.code(), StatusCode::kNotFound);
  EXPECT_EQ(MatchLogs(ref, ref + ".absent", 3, 1e-4).status.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace elastra::examples
