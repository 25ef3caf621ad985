// NextInterruptStep: what an interrupted NCCL communicator does next, from what
// ncclCommGetAsyncError reports. The NCCL calls need a GPU (tests/gpu, scenarios "kill" and
// "interrupt"); the decision is pure and tested here, with or without NCCL in the build.
#include <gtest/gtest.h>

#include "collectives/nccl/nccl_interrupt.h"

namespace elastra {
namespace {

TEST(NcclInterruptStep, AQuietWorldIsRevokedOnceWhenNcclHasRevoke) {
  EXPECT_EQ(NextInterruptStep(NcclCommState::kSuccess, /*revoke_available=*/true,
                              /*revoke_issued=*/false),
            InterruptStep::kRevoke);
  // Revoked and quiescent again: NCCL accepts a shrink now; never a second revoke.
  EXPECT_EQ(NextInterruptStep(NcclCommState::kSuccess, true, true), InterruptStep::kReady);
}

TEST(NcclInterruptStep, WithoutRevokeAQuietWorldIsKeptForTheShrinkAsBefore) {
  EXPECT_EQ(NextInterruptStep(NcclCommState::kSuccess, false, false), InterruptStep::kReady);
}

TEST(NcclInterruptStep, InProgressWaitsAndIsNeverRevoked) {
  // A revoke now would free the communicator's linked group job while NCCL still points at it.
  for (bool available : {false, true}) {
    for (bool issued : {false, true}) {
      EXPECT_EQ(NextInterruptStep(NcclCommState::kInProgress, available, issued),
                InterruptStep::kWait);
    }
  }
}

TEST(NcclInterruptStep, AnErrorReleasesTheWorldRevokedOrNot) {
  // NCCL refuses every split and shrink of it; ncclCommAbort stops a kernel still spinning.
  for (bool available : {false, true}) {
    for (bool issued : {false, true}) {
      EXPECT_EQ(NextInterruptStep(NcclCommState::kError, available, issued),
                InterruptStep::kRelease);
    }
  }
}

static_assert(NextInterruptStep(NcclCommState::kSuccess, true, false) == InterruptStep::kRevoke);

}  // namespace
}  // namespace elastra
