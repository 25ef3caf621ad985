// What an interrupted NCCL communicator does next (NcclCommunicator::Interrupt and Quiesce), as a
// pure function of what NCCL reports, so that the decision is testable without a GPU. The reasons,
// from NCCL 2.28.9's source, are in docs/collectives.md ("Interrupt, revoke and shrink").
//
// No CUDA or NCCL header here.
#pragma once

namespace elastra {

// ncclCommGetAsyncError's answer, reduced: ncclSuccess, ncclInProgress, anything else.
enum class NcclCommState { kSuccess, kInProgress, kError };

enum class InterruptStep {
  // Poll again later: NCCL's own thread still runs (a group launch, or our revoke).
  kWait,
  // Call ncclCommRevoke now. Only from kSuccess: that answer of ncclCommGetAsyncError has just
  // completed and unlinked the communicator's last group job, which a revoke would otherwise free
  // while the communicator still points at it.
  kRevoke,
  // Quiescent and NCCL reports success: ncclCommShrink will accept this communicator.
  kReady,
  // NCCL reports an error: it refuses every split and shrink of this communicator from now on
  // (its proxy's error is never cleared, not even by a revoke). Release it with ncclCommAbort,
  // which also stops a kernel that still spins on a dead peer.
  kRelease,
};

// `revoke_available`: this libnccl has ncclCommRevoke (2.28.7 and later); `revoke_issued`: it was
// called on this communicator already (successfully or not: never twice).
constexpr InterruptStep NextInterruptStep(NcclCommState state, bool revoke_available,
                                          bool revoke_issued) {
  switch (state) {
    case NcclCommState::kInProgress:
      return InterruptStep::kWait;
    case NcclCommState::kError:
      return InterruptStep::kRelease;
    case NcclCommState::kSuccess:
      break;
  }
  return revoke_available && !revoke_issued ? InterruptStep::kRevoke : InterruptStep::kReady;
}

}  // namespace elastra
