// The job harness's HTTP half (job_harness.h): a real job whose launcher also serves the HTTP API
// (docs/http.md), and what a client of that API needs. Apart from job_harness.h so that only the
// tests that speak HTTP link the protocol library for coordinator.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/integration/job_harness.h"

namespace elastra::testing {

// What a client of a job's HTTP API needs.
struct HttpApi {
  std::string url;          // "http://127.0.0.1:PORT": "http" of <state_dir>/coordinator.json
  std::string admin_token;  // <state_dir>/admin.token
  std::string read_token;   // <state_dir>/read.token
};

struct HttpJob {
  Job job;
  HttpApi api;
};

// `elastra run --http 127.0.0.1:0` (a free loopback port) with `nproc` train_mlp workers and
// `train_args`, as Job(nproc, train_args) starts them. Returns once the job has applied `step`
// steps (90 s at most) and its API's URL and tokens are read; with fatal gtest failures and an
// empty `api` where it did not get there: check HasFailure() before using it.
HttpJob StartHttpJob(int nproc, std::vector<std::string> train_args, int64_t step);

}  // namespace elastra::testing
