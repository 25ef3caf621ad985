// StatusOfGlooFailure: see gloo_errors.h.
#include "collectives/gloo/gloo_errors.h"

#include <gloo/common/error.h>
#include <gloo/common/logging.h>

#include "collectives/gloo/gloo_call.h"
#include "collectives/gloo/gloo_store.h"

namespace elastra {

Status StatusOfGlooFailure(std::exception_ptr failure, const std::string& op,
                           bool deadline_passed) {
  try {
    std::rethrow_exception(failure);
  } catch (const CallInterrupted& e) {
    return AbortedError(op + ": " + e.what());
  } catch (const StoreError& e) {
    if (e.status().code() == StatusCode::kTimedOut) {
      return TimedOutError(op + ": rendezvous: " + e.status().message());
    }
    return PeerLostError(op + ": rendezvous: " + e.status().ToString());
  } catch (const gloo::IoException& e) {
    if (deadline_passed) return TimedOutError(op + ": deadline passed: " + e.what());
    return PeerLostError(op + ": " + e.what());
  } catch (const gloo::EnforceNotMet& e) {
    return InternalError(op + ": gloo invariant: " + e.what());
  } catch (const gloo::Exception& e) {
    return InternalError(op + ": gloo: " + e.what());
  } catch (const std::exception& e) {
    return InternalError(op + ": " + e.what());
  } catch (...) {
    return InternalError(op + ": unknown exception");
  }
}

}  // namespace elastra
