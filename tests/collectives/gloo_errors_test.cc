// StatusOfGlooFailure: the Gloo backend's errors are told apart by exception type (and the call's
// own deadline), never by the exception's text.
#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include "collectives/gloo/gloo_call.h"
#include "collectives/gloo/gloo_errors.h"
#include "collectives/gloo/gloo_store.h"

namespace elastra {
namespace {

template <typename E>
StatusCode CodeOf(const E& e, bool deadline_passed) {
  return StatusOfGlooFailure(std::make_exception_ptr(e), "op", deadline_passed).code();
}

TEST(GlooErrors, IoExceptionIsATimeoutOnlyOnceTheDeadlinePassed) {
  // The text says "Timed out" in both cases: only the deadline decides.
  const gloo::IoException timed_out("Timed out waiting 5000ms for recv operation to complete");
  EXPECT_EQ(CodeOf(timed_out, true), StatusCode::kTimedOut);
  EXPECT_EQ(CodeOf(timed_out, false), StatusCode::kPeerLost);
  const gloo::IoException closed("Connection closed by peer [127.0.0.1]:4242");
  EXPECT_EQ(CodeOf(closed, false), StatusCode::kPeerLost);
  EXPECT_EQ(CodeOf(closed, true), StatusCode::kTimedOut);
}

TEST(GlooErrors, InterruptedWaitIsAborted) {
  EXPECT_EQ(CodeOf(CallInterrupted(), false), StatusCode::kAborted);
  EXPECT_EQ(CodeOf(CallInterrupted(), true), StatusCode::kAborted);
}

TEST(GlooErrors, StoreErrorsKeepTheirMeaningWhateverTheirText) {
  EXPECT_EQ(CodeOf(StoreError(TimedOutError("key g1/0")), false), StatusCode::kTimedOut);
  EXPECT_EQ(CodeOf(StoreError(UnavailableError("Timed out? no: coordinator gone")), true),
            StatusCode::kPeerLost);
  Status s = StatusOfGlooFailure(std::make_exception_ptr(StoreError(TimedOutError("key k"))),
                                 "Create", false);
  EXPECT_NE(s.message().find("key k"), std::string::npos) << s;
}

TEST(GlooErrors, BrokenInvariantsAreInternalNotAPeer) {
  const gloo::EnforceNotMet enforce(__FILE__, __LINE__, "a == b", "timeout");
  EXPECT_EQ(CodeOf(enforce, false), StatusCode::kInternal);
  EXPECT_EQ(CodeOf(gloo::InvalidOperationException("timeout"), false), StatusCode::kInternal);
  EXPECT_EQ(CodeOf(gloo::Exception("Connection closed"), false), StatusCode::kInternal);
  EXPECT_EQ(CodeOf(std::runtime_error("timeout"), true), StatusCode::kInternal);
  EXPECT_EQ(StatusOfGlooFailure(std::make_exception_ptr(42), "op", false).code(),
            StatusCode::kInternal);
}

}  // namespace
}  // namespace elastra
