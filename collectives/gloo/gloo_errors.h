// How a failed Gloo call reads as a Status, decided by the type of what it threw, never by the
// exception's text. Private to the Gloo backend; a pure function, tested on its own.
//
// This gloo (Debian 0.0~git20220518) has no timeout exception type: a wait that times out throws
// gloo::IoException, as does a lost connection. The backend therefore bounds every call by its
// own deadline (Call rounds the time left up, so gloo's timeout never fires before it) and
// passes whether that deadline had passed when the call failed.
#pragma once

#include <exception>
#include <string>

#include "elastra/status.h"

namespace elastra {

// CallInterrupted -> kAborted (the caller replaces it by the communicator's broken status);
// StoreError -> kTimedOut for a store timeout, else kPeerLost (the rendezvous could not go on);
// gloo::IoException -> kTimedOut when `deadline_passed`, else kPeerLost; gloo::EnforceNotMet,
// any other gloo::Exception or std::exception -> kInternal (a broken invariant in gloo or here,
// not a peer). `op` prefixes the message.
Status StatusOfGlooFailure(std::exception_ptr failure, const std::string& op, bool deadline_passed);

}  // namespace elastra
