#include "tests/integration/http_job_harness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <utility>

#include "protocol/keys.h"
#include "tests/http/http_test_client.h"

namespace elastra::testing {
namespace {

// Waits until `job` has applied `step` steps, then reads its API into `api`.
void ReadHttpApi(Job& job, int64_t step, HttpApi* api) {
  ASSERT_TRUE(job.WaitForStep(step, std::chrono::seconds(90))) << LauncherLog(job);
  auto info = ReadConnectionInfo(job.state_dir() + "/coordinator.json");
  ASSERT_TRUE(info.ok()) << info.status();
  api->url = info->http;
  api->admin_token = ReadToken(job.state_dir() + "/admin.token");
  api->read_token = ReadToken(job.state_dir() + "/read.token");
}

}  // namespace

HttpJob StartHttpJob(int nproc, std::vector<std::string> train_args, int64_t step) {
  HttpJob started{Job(nproc, std::move(train_args), {}, {"--http", "127.0.0.1:0"}), {}};
  ReadHttpApi(started.job, step, &started.api);
  return started;
}

}  // namespace elastra::testing
