// What the tests' own processes need to know about the sanitizer they were built with
// (make test-asan, docs/hardening.md). Header-only.
#pragma once

#include <cstdlib>
#include <string>

namespace elastra::testbed {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderAddressSanitizer = true;
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif
#else
inline constexpr bool kUnderAddressSanitizer = false;
#endif

// This process's ASAN_OPTIONS with `extra` ("name=value:...") after them, for a process it
// starts: a later option wins.
inline std::string AsanOptionsWith(const std::string& extra) {
  const char* options = std::getenv("ASAN_OPTIONS");
  return options != nullptr && *options != '\0' ? std::string(options) + ":" + extra : extra;
}

// Under ASan, what a process that runs Open MPI needs: whole stacks at each allocation, so that
// LeakSanitizer's reports of Open MPI's never-freed tables run through its libraries, which
// tests/sanitizers/lsan.supp names (they have no frame pointers, and the fast unwinder stopped at
// their first frame). Too slow for every process: a test of 10,000 journal records ran past its
// 600 s with it.
inline const char kMpiAsanOptions[] = "fast_unwind_on_malloc=0";

}  // namespace elastra::testbed
