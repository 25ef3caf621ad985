// `elastra status`'s tables (launch/admin.cc): the job, its workers and hosts, its generations.
#pragma once

#include <nlohmann/json.hpp>

namespace elastra::launch {

// Prints the status object (`elastra status --json`'s, or GET /v1/job's) as tables on stdout.
void PrintStatusTable(const nlohmann::json& st);

}  // namespace elastra::launch
