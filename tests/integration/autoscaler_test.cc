// The example scheduler (examples/autoscaler): its policy stepped with made-up observations, and
// the program itself driving a real `elastra run --http` job through two resizes over HTTP (a
// grow while the throughput per worker holds, a shrink when the capacity file asks for it),
// checked from the job's event stream; the job still matches its reference.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <thread>

#include "examples/autoscaler/policy.h"
#include "tests/http/http_test_client.h"
#include "tests/integration/http_job_harness.h"

namespace elastra::testing {
namespace {

using autoscaler::Observation;
using autoscaler::Policy;
using autoscaler::PolicyOptions;
using nlohmann::json;
using std::chrono::seconds;

TEST(AutoscalerPolicy, GrowsWhileThroughputPerWorkerHoldsThenGoesBackToTheLastGoodSize) {
  Policy p(PolicyOptions{1, 8, 1, 0.2});
  EXPECT_EQ(p.Decide({2, 200}).workers, 3);  // 100 per worker: the best so far
  EXPECT_EQ(p.Decide({3, 285}).workers, 4);  // 95: within 20 %
  EXPECT_EQ(p.Decide({4, 300}).workers, 3);  // 75: out of it; back to 3
  EXPECT_EQ(p.Decide({3, 285}).workers, 3);  // and no higher from then on
  EXPECT_DOUBLE_EQ(p.best_per_worker(), 100);
}

TEST(AutoscalerPolicy, CapacityNeededShrinksWithinTheBounds) {
  Policy p(PolicyOptions{2, 8, 2, 0.5});
  EXPECT_EQ(p.Decide({4, 400, 3}).workers, 3);
  EXPECT_EQ(p.Decide({3, 300, 1}).workers, 2) << "never below --min";
  EXPECT_EQ(p.Decide({2, 200, 3}).workers, 3) << "a grow stops at the ceiling";
  EXPECT_EQ(p.Decide({8, 800}).workers, 8) << "at --max";
}

size_t Count(const std::vector<SseEvent>& events, const std::string& type) {
  size_t n = 0;
  for (const auto& e : events) n += e.type == type ? 1 : 0;
  return n;
}

bool FormedWith(const std::vector<SseEvent>& events, size_t workers) {
  for (const auto& e : events) {
    if (e.type == "generation" && json::parse(e.data)["workers"].size() == workers) return true;
  }
  return false;
}

TEST(Autoscaler, DrivesAJobThroughTwoResizesOverHttp) {
  const std::vector<std::string> args = {"--steps",        std::to_string(kUntilStopped),
                                         "--step-time-ms", "20",
                                         "--global-batch", "48",
                                         "--hidden",       "24",
                                         "--commit-every", "5"};
  HttpJob started = StartHttpJob(2, args, /*step=*/5);
  Job& job = started.job;
  HttpApi& api = started.api;  // not a structured binding: clang 14 (ASan) cannot capture one
  ASSERT_FALSE(HasFailure());
  const std::string capacity = job.dir() + "/capacity";
  const std::string out = job.dir() + "/autoscaler.out";

  // --max 3 and a tolerance the fixed global batch keeps to (per worker, 3 workers do 2/3 of what
  // 2 did): it grows to 3 and holds there until capacity is needed; --max-resizes 2 ends it.
  CommandResult scaler;
  std::thread run([&] {
    scaler = RunShell(std::string(AUTOSCALER_BINARY) + " --url " + api.url + " --token-file " +
                      job.state_dir() + "/admin.token --min 1 --max 3 --tolerance 0.9" +
                      " --settle-points 2 --poll-ms 200 --max-resizes 2 --capacity-file " +
                      capacity + " > " + out + " 2>&1");
  });
  httplib::Client http(api.url);
  http.set_read_timeout(180, 0);
  auto grown =
      ReadSseEvents(http, api.read_token, "", [](const auto& got) { return FormedWith(got, 3); });
  ASSERT_TRUE(FormedWith(grown, 3)) << LauncherLog(job);
  { std::ofstream(capacity) << "2\n"; }
  run.join();
  EXPECT_EQ(scaler.exit_code, 0) << RunShell("cat " + out).out;

  auto events = ReadSseEvents(http, api.read_token, "", [](const auto& got) {
    return Count(got, "resize_end") >= 2 && Count(got, "generation") >= 3;
  });
  std::vector<std::pair<std::string, size_t>> outline;  // resizes and generations, in order
  for (const auto& e : events) {
    const json d = json::parse(e.data);
    if (e.type == "resize_accepted") outline.emplace_back(e.type, d["workers"].get<size_t>());
    if (e.type == "generation") outline.emplace_back(e.type, d["workers"].size());
  }
  const std::vector<std::pair<std::string, size_t>> want = {{"generation", 2},
                                                            {"resize_accepted", 3},
                                                            {"generation", 3},
                                                            {"resize_accepted", 2},
                                                            {"generation", 2}};
  EXPECT_EQ(outline, want) << RunShell("cat " + out).out;
  const std::string said = RunShell("cat " + out).out;
  EXPECT_NE(said.find("\"decision\":3"), std::string::npos) << said;
  EXPECT_NE(said.find("capacity needed: at most 2"), std::string::npos) << said;
  EXPECT_EQ(job.Status()["layout"]["dp"], 2);

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

}  // namespace
}  // namespace elastra::testing
