// GlooStore: a gloo::rendezvous::Store over an Elastra KeyValueStore. Private to the Gloo backend
// (it includes gloo headers). Thread-safe when the underlying store is.
//
// gloo expects its stores to throw: every failure surfaces as gloo::IoException. Timeouts carry
// "Wait timeout" in their message (the wording of gloo's own stores), which the backend maps to
// kTimedOut; any other store failure maps to kPeerLost.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "collectives/kv_store.h"

namespace elastra {

class GlooStore : public gloo::rendezvous::Store {
 public:
  // `store` is not owned and must outlive this adapter. `timeout` bounds get() and wait(keys),
  // the overloads through which gloo passes no timeout of its own.
  GlooStore(KeyValueStore* store, std::chrono::milliseconds timeout);

  GlooStore(const GlooStore&) = delete;
  GlooStore& operator=(const GlooStore&) = delete;

  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until `key` exists; throws gloo::IoException ("Wait timeout ...") after the timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  KeyValueStore* const store_;
  const std::chrono::milliseconds timeout_;
};

}  // namespace elastra
