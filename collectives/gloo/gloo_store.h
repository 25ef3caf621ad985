// GlooStore: a gloo::rendezvous::Store over an Elastra KeyValueStore. Private to the Gloo backend
// (it includes gloo headers). Thread-safe when the underlying store is.
//
// gloo expects its stores to throw: every failure surfaces as a StoreError, a gloo::IoException
// (what gloo's own stores throw) that carries the store's Status, so the backend reads the cause
// from the exception's type and status, never from its text.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gloo/rendezvous/store.h>

#include <gloo/common/error.h>

#include "collectives/kv_store.h"

namespace elastra {

// A failure of the KeyValueStore under a GlooStore: `status` is the store's own (kTimedOut when a
// key did not appear in time).
class StoreError : public gloo::IoException {
 public:
  explicit StoreError(Status status)
      : gloo::IoException("store: " + status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `store` is not owned and must outlive this adapter. `timeout` bounds get() and wait(keys),
  // the overloads through which gloo passes no timeout of its own.
  GlooStore(KeyValueStore* store, std::chrono::milliseconds timeout);

  GlooStore(const GlooStore&) = delete;
  GlooStore& operator=(const GlooStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until `key` exists; throws StoreError (kTimedOut) after the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  KeyValueStore* const store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace elastra
