// StoreError: how a failure of the KeyValueStore under a Gloo rendezvous (gloo_mesh.h) travels
// with gloo's own exceptions. Private to the Gloo backend (it includes gloo headers).
//
// Every failure surfaces as a StoreError, a gloo::IoException (what gloo's own stores throw) that
// carries the store's Status, so the backend reads the cause from the exception's type and status,
// never from its text.
#pragma once

#include <string>
#include <utility>

#include <gloo/common/error.h>

#include "collectives/kv_store.h"

namespace elastra {

// A failure of the KeyValueStore under a rendezvous: `status` is the store's own (kTimedOut when a
// key did not appear in time).
class StoreError : public gloo::IoException {
 public:
  explicit StoreError(Status status)
      : gloo::IoException("store: " + status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace elastra
