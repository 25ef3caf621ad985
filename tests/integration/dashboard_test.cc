// The dashboard (GET /) in a real browser: headless Chromium, driven over the DevTools protocol,
// opens it against a running `elastra run --http` job with train_mlp workers, and the test checks
// what the page drew: the layout grid's worker ids by rank, the hosts' workers, the generations,
// the training charts and a checkpoint; then a resize over HTTP changes the layout and the page,
// never reloaded, shows the new generation and grid from the event stream. A screenshot is kept
// under the build folder (dashboard.png).
#include <gtest/gtest.h>
#include <httplib.h>
#include <stdlib.h>

#include <filesystem>

#include "tests/http/http_test_client.h"
#include "tests/integration/headless_chromium.h"
#include "tests/integration/http_job_harness.h"

namespace elastra::testing {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The worker ids of the newest generation in /v1/job, by rank.
std::vector<std::string> NewestWorkers(const json& job) {
  return job["history"].back()["workers"].get<std::vector<std::string>>();
}

TEST(Dashboard, HeadlessChromiumDrawsTheJobAndFollowsAResizeLive) {
  const std::string chromium = FindChromium();
  if (chromium.empty()) {
    GTEST_SKIP() << "chromium is not installed (launch/install_deps.sh installs Debian's "
                    "chromium): the dashboard was not tested in a browser";
  }
  char tmpl[] = "/tmp/elastra_dash_XXXXXX";
  const std::string scratch = mkdtemp(tmpl);
  const std::vector<std::string> args = {"--steps",
                                         std::to_string(kUntilStopped),
                                         "--step-time-ms",
                                         "20",
                                         "--global-batch",
                                         "32",
                                         "--hidden",
                                         "16",
                                         "--ffn",
                                         "32",
                                         "--layers",
                                         "2",
                                         "--commit-every",
                                         "5",
                                         "--checkpoint-dir",
                                         scratch + "/ckpt",
                                         "--checkpoint-every",
                                         "20"};
  HttpJob started = StartHttpJob(2, args, /*step=*/5);
  Job& job = started.job;
  HttpApi& api = started.api;  // not a structured binding: clang 14 (ASan) cannot capture one
  ASSERT_FALSE(HasFailure());
  httplib::Client http(api.url);
  http.set_read_timeout(120, 0);
  const httplib::Headers as_admin = Bearer(api.admin_token);
  const httplib::Headers as_reader = Bearer(api.read_token);

  // Without a token the page is refused; a cookie never grants a change.
  auto bare = http.Get("/");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->status, 401);
  auto cookie_resize = http.Post("/v1/resize", {{"Cookie", "elastra_token=" + api.admin_token}},
                                 R"({"workers":3})", "application/json");
  ASSERT_TRUE(cookie_resize);
  EXPECT_EQ(cookie_resize->status, 403) << cookie_resize->body;

  auto browser = HeadlessChromium::Launch(chromium, scratch + "/profile");
  ASSERT_TRUE(browser.ok()) << browser.status();
  HeadlessChromium& page = **browser;
  ASSERT_TRUE(page.Navigate(api.url + "/?token=" + api.read_token).ok());
  // The token became a cookie and left the address bar.
  EXPECT_EQ(*page.Evaluate("location.pathname + location.search"), "/");

  // What the first generation looks like: 2 workers, dp=2, ids by rank in the grid.
  ASSERT_TRUE(
      page.WaitFor("document.querySelector('#layout-grid').dataset.layout === '2x1x1'", seconds(30))
          .ok());
  auto job_now = http.Get("/v1/job", as_reader);
  ASSERT_TRUE(job_now);
  const json first = json::parse(job_now->body);
  const auto cells = [&] {
    return page
        .Evaluate("[...document.querySelectorAll('#layout-grid td.cell')].map(c => c.textContent)")
        ->get<std::vector<std::string>>();
  };
  EXPECT_EQ(cells(), NewestWorkers(first));
  const int first_generation = first["generation"].get<int>();
  // The hosts table lists every member under its host.
  for (const std::string& id : NewestWorkers(first)) {
    EXPECT_EQ(
        *page.Evaluate("!!document.querySelector('#hosts td[data-worker=\"" + id + "\"].member')"),
        true)
        << id;
  }
  // The training loop's numbers: a loss curve and a samples/s curve of several points, and a
  // checkpoint from the event stream.
  ASSERT_TRUE(
      page.WaitFor("document.querySelector('#loss-chart path.line')?.dataset.points >= 3 "
                   "&& document.querySelector('#rate-chart path.line')?.dataset.points >= 3",
                   seconds(60))
          .ok());
  ASSERT_TRUE(page.WaitFor("document.querySelectorAll('#checkpoints td').length >= 3 && "
                           "!document.querySelector('#checkpoints td.empty')",
                           seconds(60))
                  .ok());
  EXPECT_NE(page.Evaluate("document.querySelector('#loss').textContent")->get<std::string>(), "-");

  // A mark that a reload would wipe: what follows comes live from /v1/events.
  ASSERT_TRUE(page.Evaluate("window.elastraMark = 42").ok());
  // A refused resize shows as an event.
  auto too_big = http.Post("/v1/resize", as_admin, R"({"workers":100000})", "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 422) << too_big->body;
  ASSERT_TRUE(page.WaitFor("document.querySelector('#events li.refused')", seconds(30)).ok());
  // Grow to 4 workers as dp=2 x tp=2.
  auto grow =
      http.Post("/v1/resize", as_admin,
                R"({"workers":4,"layout":{"dp":2,"pp":1,"tp":2},"wait":true})", "application/json");
  ASSERT_TRUE(grow);
  ASSERT_EQ(grow->status, 200) << grow->body << LauncherLog(job);
  const int generation = json::parse(grow->body)["generation"].get<int>();
  ASSERT_GT(generation, first_generation);
  const std::string shown = "#timeline tr[data-generation=\"" + std::to_string(generation) + "\"]";
  ASSERT_TRUE(page.WaitFor("document.querySelector('" + shown +
                               "') && document.querySelector('#layout-grid').dataset.layout "
                               "=== '2x1x2'",
                           seconds(30))
                  .ok());
  EXPECT_EQ(*page.Evaluate("window.elastraMark"), 42) << "the page was reloaded";
  job_now = http.Get("/v1/job", as_reader);
  ASSERT_TRUE(job_now);
  const json after = json::parse(job_now->body);
  EXPECT_EQ(cells(), NewestWorkers(after));
  EXPECT_EQ(cells().size(), 4u);
  EXPECT_EQ(*page.Evaluate("document.querySelectorAll('#layout-grid table.replica').length"), 2);
  EXPECT_EQ(
      *page.Evaluate("document.querySelector('" + shown + "').textContent.includes('resize')"),
      true);
  // Nothing came from anywhere but the coordinator.
  EXPECT_EQ(*page.Evaluate("performance.getEntriesByType('resource')"
                           ".every(e => e.name.startsWith(location.origin))"),
            true);

  const std::string screenshot = std::string(ELASTRA_TEST_OUTPUT_DIR) + "/dashboard.png";
  ASSERT_TRUE(page.Screenshot(screenshot).ok());
  EXPECT_GT(std::filesystem::file_size(screenshot), 10000u);
  std::printf("dashboard screenshot: %s\n", screenshot.c_str());

  job.StopTraining();
  ASSERT_EQ(job.Wait(seconds(120)), 0) << LauncherLog(job);
  ExpectStoppedRunMatchesReference(job, args);
  std::error_code ec;
  if (std::getenv("ELASTRA_KEEP_TEST_DIRS") == nullptr) std::filesystem::remove_all(scratch, ec);
}

}  // namespace
}  // namespace elastra::testing
