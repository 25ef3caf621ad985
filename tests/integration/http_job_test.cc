// The HTTP API on a real job: `elastra run --http 127.0.0.1:0` with train_mlp workers, resized over
// HTTP (with "wait": the done object `elastra resize --wait` prints; without: 202 and an id whose
// state GET /v1/resizes/ID reports), a second change refused 409 while one is in flight, and the
// job still matching `train_mlp --reference`; then `elastra resize`, `status` and `drain` with
// --url and --token-file.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/http/http_test_client.h"
#include "tests/integration/http_job_harness.h"

namespace elastra::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

TEST(HttpJob, ResizeOverHttpWithWaitReturnsTheDoneObject) {
  const std::vector<std::string> args = {"--steps",        std::to_string(kUntilStopped),
                                         "--step-time-ms", "15",
                                         "--global-batch", "48",
                                         "--hidden",       "24",
                                         "--commit-every", "5"};
  HttpJob started = StartHttpJob(2, args, /*step=*/10);
  Job& job = started.job;
  HttpApi& api = started.api;  // not a structured binding: clang 14 (ASan) cannot capture one
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(api.url.rfind("http://127.0.0.1:", 0), 0u) << api.url;
  httplib::Client http(api.url);
  http.set_read_timeout(120, 0);
  const httplib::Headers as_admin = Bearer(api.admin_token);
  const httplib::Headers as_reader = Bearer(api.read_token);

  auto job_before = http.Get("/v1/job", as_reader);
  ASSERT_TRUE(job_before);
  ASSERT_EQ(job_before->status, 200);
  const json before = json::parse(job_before->body);
  EXPECT_EQ(before["state"], "running");
  EXPECT_EQ(before["layout"]["dp"], 2);

  // With wait: the done object, as `elastra resize --wait` prints it, plus the id.
  auto grow = http.Post("/v1/resize", as_admin, R"({"workers":3,"wait":true})", "application/json");
  ASSERT_TRUE(grow);
  ASSERT_EQ(grow->status, 200) << grow->body;
  const json g = json::parse(grow->body);
  EXPECT_EQ(g["phase"], "done");
  EXPECT_EQ(g["workers"], 3);
  EXPECT_EQ(g["layout"], (json{{"dp", 3}, {"pp", 1}, {"tp", 1}}));
  EXPECT_GT(g["generation"].get<int>(), before["generation"].get<int>());
  EXPECT_GT(g["downtime_ms"].get<double>(), 0.0);
  EXPECT_GE(g["total_ms"].get<double>(), g["downtime_ms"].get<double>());
  ASSERT_TRUE(g["id"].is_string());
  auto again = http.Get(("/v1/resizes/" + g["id"].get<std::string>()).c_str(), as_reader);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(json::parse(again->body), g);

  // Without wait: 202 and an id; the change starts a worker, and a second one meanwhile is 409.
  auto up = http.Post("/v1/resize", as_admin, R"({"workers":4})", "application/json");
  ASSERT_TRUE(up);
  ASSERT_EQ(up->status, 202) << up->body;
  const json u = json::parse(up->body);
  EXPECT_EQ(u["phase"], "accepted");
  auto busy = http.Post("/v1/resize", as_admin, R"({"workers":2})", "application/json");
  ASSERT_TRUE(busy);
  EXPECT_EQ(busy->status, 409) << busy->body;
  EXPECT_NE(json::parse(busy->body).value("error", "").find("in progress"), std::string::npos)
      << busy->body;
  const std::string up_path = "/v1/resizes/" + u["id"].get<std::string>();
  json state;
  const auto deadline = std::chrono::steady_clock::now() + seconds(90);
  do {
    auto r = http.Get(up_path.c_str(), as_reader);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    state = json::parse(r->body);
    if (state["phase"] != "accepted") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a poll, not a guess
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_EQ(state["phase"], "done") << state;
  EXPECT_EQ(state["workers"], 4);

  auto metrics = http.Get("/metrics", as_reader);
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("elastra_current_workers 4\n"), std::string::npos) << metrics->body;
  EXPECT_NE(
      metrics->body.find("elastra_reconfiguration_downtime_seconds_count{reason=\"resize\"} 2"),
      std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("elastra_worker_heartbeat_age_seconds{worker="), std::string::npos);

  // The CLI over HTTP: no ZeroMQ keys, only the URL and a token file.
  auto refused = RunShell(ElastraBinary() + " resize --url " + api.url + " --token-file " +
                          job.state_dir() + "/read.token --workers 2 2>&1");
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.out.find("elastra resize: refused: "), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("(HTTP 403)"), std::string::npos) << refused.out;
  auto shrink = RunShell(ElastraBinary() + " resize --url " + api.url + " --token-file " +
                         job.state_dir() + "/admin.token --workers 3 --wait 2>/dev/null");
  ASSERT_EQ(shrink.exit_code, 0) << shrink.out;
  const json s = json::parse(shrink.out);
  EXPECT_EQ(s["phase"], "done");
  EXPECT_EQ(s["workers"], 3);
  EXPECT_FALSE(s.contains("id")) << "the same object as the ZeroMQ path prints";
  auto status = RunShell(ElastraBinary() + " status --url " + api.url + " --token-file " +
                         job.state_dir() + "/read.token 2>/dev/null");
  ASSERT_EQ(status.exit_code, 0) << status.out;
  EXPECT_NE(status.out.find("layout dp=3,pp=1,tp=1"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("GENERATION"), std::string::npos) << status.out;
  auto status_json = RunShell(ElastraBinary() + " status --json --url " + api.url +
                              " --token-file " + job.state_dir() + "/read.token 2>/dev/null");
  ASSERT_EQ(status_json.exit_code, 0) << status_json.out;
  EXPECT_EQ(json::parse(status_json.out)["layout"]["dp"], 3);
  auto no_host = RunShell(ElastraBinary() + " drain --url " + api.url + " --token-file " +
                          job.state_dir() + "/admin.token --host nowhere 2>&1");
  EXPECT_EQ(no_host.exit_code, 1) << no_host.out;
  EXPECT_NE(no_host.out.find("elastra drain: refused: no host 'nowhere'"), std::string::npos)
      << no_host.out;
  EXPECT_NE(no_host.out.find("(HTTP 404)"), std::string::npos) << no_host.out;
  auto no_token = RunShell(ElastraBinary() + " status --url " + api.url + " 2>&1");
  EXPECT_EQ(no_token.exit_code, 2) << no_token.out;

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

// The training loop's numbers on a real job: train_mlp reports its loss and samples, which ride
// the heartbeats to /v1/job ("training") and /metrics, and `promtool check metrics` (Debian's
// prometheus) accepts the whole exposition.
TEST(HttpJob, TrainingMetricsReachTheApiAndPromtoolAcceptsMetrics) {
  const std::vector<std::string> args = {"--steps",        std::to_string(kUntilStopped),
                                         "--step-time-ms", "15",
                                         "--global-batch", "48",
                                         "--hidden",       "24",
                                         "--commit-every", "5"};
  const std::string ckpt = "/tmp/elastra_http_ckpt_" + std::to_string(::getpid());
  std::filesystem::remove_all(ckpt);
  std::vector<std::string> with_checkpoints = args;
  with_checkpoints.insert(with_checkpoints.end(),
                          {"--checkpoint-dir", ckpt, "--checkpoint-every", "10"});
  HttpJob started = StartHttpJob(2, with_checkpoints, /*step=*/5);
  Job& job = started.job;
  HttpApi& api = started.api;  // not a structured binding: clang 14 (ASan) cannot capture one
  ASSERT_FALSE(HasFailure());
  httplib::Client http(api.url);
  http.set_read_timeout(60, 0);
  const httplib::Headers as_reader = Bearer(api.read_token);
  // A committed checkpoint brings its save time and bytes to /metrics.
  std::string committed;
  const auto committed_by = std::chrono::steady_clock::now() + seconds(90);
  do {
    auto r = http.Get("/metrics", as_reader);
    ASSERT_TRUE(r);
    if (r->body.find("\nelastra_last_checkpoint_step -1\n") == std::string::npos) {
      committed = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a poll
  } while (std::chrono::steady_clock::now() < committed_by);
  ASSERT_FALSE(committed.empty()) << "no checkpoint committed\n" << LauncherLog(job);
  const size_t at = committed.find("\nelastra_checkpoint_save_seconds ");
  ASSERT_NE(at, std::string::npos) << committed;
  const double save_seconds = std::stod(committed.substr(at + 33));
  EXPECT_GT(save_seconds, 0) << committed;
  EXPECT_EQ(committed.find("\nelastra_checkpoint_bytes -1\n"), std::string::npos) << committed;
  json training;
  const auto deadline = std::chrono::steady_clock::now() + seconds(90);
  do {
    auto r = http.Get("/v1/job", as_reader);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    training = json::parse(r->body)["training"];
    if (training["series"].size() >= 3 && training["metrics"].contains("loss")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a poll
  } while (std::chrono::steady_clock::now() < deadline);
  ASSERT_GE(training["series"].size(), 3u) << training;
  const double loss = training["metrics"]["loss"]["value"].get<double>();
  EXPECT_GT(loss, 0);
  EXPECT_GT(training["samples"].get<int64_t>(), 0);
  EXPECT_GT(training["samples_per_second"].get<double>(), 0);
  EXPECT_GT(training["goodput"].get<double>(), 0);
  EXPECT_LE(training["goodput"].get<double>(), 1);
  for (const json& p : training["series"]) {
    EXPECT_TRUE(p.contains("loss")) << p;
    EXPECT_GT(p["samples_per_second"].get<double>(), 0) << p;
  }
  // Each step consumes the global batch once, however many replicas split it.
  const int64_t step = json::parse(http.Get("/v1/job", as_reader)->body)["step"].get<int64_t>();
  EXPECT_LE(training["samples"].get<int64_t>(), (step + 2) * 48);

  auto metrics = http.Get("/metrics", as_reader);
  ASSERT_TRUE(metrics);
  ASSERT_EQ(metrics->status, 200);
  for (const char* name :
       {"elastra_training_metric{name=\"loss\"} ", "elastra_training_samples_total ",
        "elastra_training_samples_per_second ", "elastra_goodput "}) {
    EXPECT_NE(metrics->body.find(std::string("\n") + name), std::string::npos)
        << name << " missing from\n"
        << metrics->body;
  }
  const std::string exposition = job.dir() + "/metrics.txt";
  std::ofstream(exposition) << metrics->body;
  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  std::filesystem::remove_all(ckpt);
  ExpectStoppedRunMatchesReference(job, args);

  if (RunShell("command -v promtool").exit_code != 0) {
    GTEST_SKIP() << "promtool is not installed (launch/install_deps.sh installs Debian's "
                    "prometheus): /metrics was not checked with it";
  }
  auto check = RunShell("promtool check metrics < " + exposition + " 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.out;
  EXPECT_EQ(check.out, "") << "promtool's lint found problems";
}

bool HasEnd(const std::vector<SseEvent>& events, size_t resizes) {
  size_t ends = 0;
  for (const auto& e : events) ends += e.type == "resize_end" ? 1 : 0;
  return ends >= resizes;
}

// The event stream of a real job: a resize shows as accepted, a generation and its end; after the
// coordinator is killed and restarted by elastra run, a client resuming from its Last-Event-ID
// gets exactly what followed: the full stream equals what it saw before plus what it resumed.
TEST(HttpJob, EventsResumeAfterACoordinatorRestartWithoutAGap) {
  const std::vector<std::string> args = {"--steps",        std::to_string(kUntilStopped),
                                         "--step-time-ms", "15",
                                         "--global-batch", "48",
                                         "--hidden",       "24",
                                         "--commit-every", "5"};
  HttpJob started = StartHttpJob(2, args, /*step=*/10);
  Job& job = started.job;
  HttpApi& api = started.api;  // not a structured binding: clang 14 (ASan) cannot capture one
  ASSERT_FALSE(HasFailure());
  httplib::Client http(api.url);
  http.set_read_timeout(120, 0);
  const httplib::Headers as_admin = Bearer(api.admin_token);

  auto grow = http.Post("/v1/resize", as_admin, R"({"workers":3,"wait":true})", "application/json");
  ASSERT_TRUE(grow);
  ASSERT_EQ(grow->status, 200) << grow->body;
  int status = 0;
  auto before = ReadSseEvents(
      http, api.read_token, "", [](const auto& got) { return HasEnd(got, 1); }, &status);
  ASSERT_EQ(status, 200);
  ASSERT_TRUE(HasEnd(before, 1));
  std::vector<std::string> types;
  for (const auto& e : before) types.push_back(e.type);
  EXPECT_EQ(types.front(), "generation");
  EXPECT_NE(std::find(types.begin(), types.end(), "resize_accepted"), types.end());
  const auto formed = std::find_if(before.begin(), before.end(), [](const SseEvent& e) {
    return e.type == "generation" && json::parse(e.data)["workers"].size() == 3;
  });
  EXPECT_NE(formed, before.end()) << "the generation of 3 workers";
  // Its resize_end says, without the events before it, that the resize was done, at the
  // generation of 3 workers, and which resize it ended.
  const auto accepted = std::find_if(before.begin(), before.end(),
                                     [](const SseEvent& e) { return e.type == "resize_accepted"; });
  const json end = json::parse(before.back().data);
  EXPECT_EQ(before.back().type, "resize_end");
  EXPECT_EQ(end.value("outcome", ""), "done") << before.back().data;
  if (formed != before.end() && accepted != before.end()) {
    EXPECT_EQ(end.value("generation", uint64_t{0}),
              json::parse(formed->data).value("generation", uint64_t{0}))
        << before.back().data;
    EXPECT_EQ(end.value("resize", uint64_t{0}), accepted->id) << before.back().data;
  }

  // SIGKILL the coordinator; elastra run restarts it on the same state directory and URL.
  const pid_t old_pid = job.CoordinatorPid();
  ASSERT_GT(old_pid, 0);
  ASSERT_EQ(kill(old_pid, SIGKILL), 0);
  // A bound for a hung restart, not a timing: generous, as the machine may be loaded.
  const auto deadline = std::chrono::steady_clock::now() + seconds(180);
  bool back = false;
  while (!back && std::chrono::steady_clock::now() < deadline) {
    const pid_t now = job.CoordinatorPid();
    auto health = http.Get("/healthz");
    back = now > 0 && now != old_pid && health && health->status == 200;
    if (!back) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a poll
  }
  ASSERT_TRUE(back) << LauncherLog(job);
  // The restarted coordinator takes the job back first (its workers reconnect); until then a
  // change is refused with 409, which says to retry.
  int shrink_status = 0;
  std::string shrink_body;
  do {
    auto shrink =
        http.Post("/v1/resize", as_admin, R"({"workers":2,"wait":true})", "application/json");
    ASSERT_TRUE(shrink);
    shrink_status = shrink->status;
    shrink_body = shrink->body;
    if (shrink_status != 409) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a poll
  } while (std::chrono::steady_clock::now() < deadline + seconds(60));
  ASSERT_EQ(shrink_status, 200) << shrink_body;
  EXPECT_EQ(json::parse(shrink_body)["workers"], 2);

  auto resumed = ReadSseEvents(http, api.read_token, std::to_string(before.back().id),
                               [](const auto& got) { return HasEnd(got, 1); });
  ASSERT_TRUE(HasEnd(resumed, 1));
  EXPECT_GT(resumed.front().id, before.back().id);
  auto expected = before;
  expected.insert(expected.end(), resumed.begin(), resumed.end());
  auto full = ReadSseEvents(http, api.read_token, "",
                            [&](const auto& got) { return got.back().id >= resumed.back().id; });
  EXPECT_EQ(full, expected) << "the stream from the start is what was seen plus what resumed";

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
}

}  // namespace
}  // namespace elastra::testing
