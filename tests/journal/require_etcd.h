// The skip of a test that needs an etcd binary (EtcdServer::Binary) where there is none: the
// tests of the coordinator on etcd (tests/integration/etcd_coordinator_test.cc,
// tests/launch/embedded_etcd_test.cc) skip with the reason, and fail with it instead where
// ELASTRA_REQUIRE_ETCD is set, as CI sets it (.ci/run), so that a machine without etcd fails
// rather than skipping them all. Like ELASTRA_REQUIRE_NAMESPACES (tests/cluster/cluster_fixture.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tests/journal/etcd_server.h"

// In a test or its fixture's SetUp: skips, or fails where ELASTRA_REQUIRE_ETCD is set, saying why,
// when there is no etcd binary. A macro, as GTEST_SKIP and FAIL are: they return from the caller.
#define ELASTRA_SKIP_WITHOUT_ETCD()                                                      \
  do {                                                                                   \
    std::string elastra_no_etcd_why;                                                     \
    if (::elastra::journal::EtcdServer::Binary(&elastra_no_etcd_why).empty()) {          \
      if (std::getenv("ELASTRA_REQUIRE_ETCD") != nullptr) FAIL() << elastra_no_etcd_why; \
      GTEST_SKIP() << elastra_no_etcd_why;                                               \
    }                                                                                    \
  } while (false)
