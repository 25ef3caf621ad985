// EtcdClient: a small client of etcd's v3 JSON gateway (POST /v3/kv/put, /v3/kv/range,
// /v3/kv/deleterange, /v3/kv/txn) over HTTP, with the operations the journal on etcd needs
// (docs/ha.md). Keys and values are bytes; the gateway's base64 and its int64-as-string fields stay
// inside. Each request goes to the endpoint that answered last, and on a transport failure (or an
// etcd that answers "unavailable") to the next one of the list, each endpoint tried once. Not
// thread-safe: one caller at a time (a second thread makes a client of its own).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "elastra/status.h"

namespace elastra::journal {

struct EtcdOptions {
  // The client URLs of the cluster's members, comma-separated ("http://10.0.0.1:2379,..."); a URL
  // without a scheme is taken as http://. https is not supported yet. Required.
  std::string endpoints;
  // How long connecting to one endpoint may take before the next is tried. Default 2 s.
  std::chrono::milliseconds connect_timeout{2000};
  // How long a request may wait for its answer once connected. Default 10 s.
  std::chrono::milliseconds request_timeout{10000};
};

// One key as etcd keeps it.
struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;  // puts since it was created; 0: it does not exist
  int64_t lease = 0;    // the lease the key is attached to; 0: none
};

struct EtcdRangeResult {
  std::vector<EtcdKeyValue> kvs;
  bool more = false;     // the limit cut the answer short
  int64_t count = 0;     // keys in the whole range
  int64_t revision = 0;  // the store's revision the answer is of
};

// A compare of a transaction: the key's `target` compared with `number` (or `value`).
struct EtcdCompare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Result { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // for the version and revisions
  std::string value;   // for kValue
};

// An operation of a transaction.
struct EtcdOp {
  enum class Kind { kPut, kDeleteRange, kRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // kPut
  std::string range_end;  // kDeleteRange and kRange: empty for the one key
  int64_t limit = 0;      // kRange
  int64_t lease = 0;      // kPut: the lease the key is attached to (0: none)
};

struct EtcdTxnResult {
  bool succeeded = false;  // the compares held and the success ops ran
  int64_t revision = 0;
  // What each kRange op of the branch that ran returned, in order.
  std::vector<EtcdRangeResult> ranges;
};

// A leader's claim on its writes (docs/ha.md, "Fencing"): a write is made only while `key` (the
// election key it created) has the create revision `create_revision`. A key deleted and created
// again (another leader's) has another.
struct EtcdFence {
  std::string key;
  int64_t create_revision = 0;
};

struct EtcdLease {
  int64_t id = 0;
  int64_t ttl_seconds = 0;
};

class EtcdClient {
 public:
  // kInvalidArgument for an empty or malformed endpoint list. Connects to nothing yet.
  static StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // The end of the range of every key that starts with `prefix` (etcd's range_end for a prefix).
  static std::string PrefixEnd(std::string_view prefix);

  // Each call: kUnavailable when no endpoint answered (each endpoint's error in the message),
  // kInternal with etcd's message when etcd refused the request.
  Status Put(std::string_view key, std::string_view value);
  // The keys in [key, range_end) (range_end empty: the one key) in key order, at most `limit`
  // (0: all); `descending` sorts by key the other way; `keys_only` leaves the values out.
  StatusOr<EtcdRangeResult> Range(std::string_view key, std::string_view range_end,
                                  int64_t limit = 0, bool descending = false,
                                  bool keys_only = false);
  // The same at the store's `revision` (0: the newest): a reader that reads in several requests
  // sees one state. kInternal ("required revision has been compacted") when etcd no longer keeps
  // it.
  StatusOr<EtcdRangeResult> RangeAt(int64_t revision, std::string_view key,
                                    std::string_view range_end, int64_t limit = 0,
                                    bool descending = false, bool keys_only = false);
  // Deletes the keys in [key, range_end); returns how many were deleted.
  StatusOr<int64_t> DeleteRange(std::string_view key, std::string_view range_end);
  // If every compare holds runs `success`, else `failure`, atomically. etcd refuses two ops on
  // one key in a branch.
  StatusOr<EtcdTxnResult> Txn(const std::vector<EtcdCompare>& compares,
                              const std::vector<EtcdOp>& success,
                              const std::vector<EtcdOp>& failure);

  // A lease of `ttl_seconds` (etcd may grant a longer one: its minimum is 1.5 election timeouts,
  // rounded up): its id and the TTL granted, in seconds.
  StatusOr<EtcdLease> LeaseGrant(int64_t ttl_seconds);
  // Renews lease `id` once: the TTL it has again, in seconds, counted from when etcd received the
  // request; 0 when the lease is gone (expired or revoked).
  StatusOr<int64_t> LeaseKeepAlive(int64_t id);
  // Revokes lease `id`, deleting every key attached to it. OK when it is gone already.
  Status LeaseRevoke(int64_t id);

  const std::string& endpoints() const { return options_.endpoints; }

 private:
  struct Endpoint;
  EtcdClient(EtcdOptions options, std::vector<std::unique_ptr<Endpoint>> endpoints);
  // POSTs `body` (JSON) to `path` and returns the answer's JSON text.
  StatusOr<std::string> Call(const std::string& path, const std::string& body);

  EtcdOptions options_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  size_t current_ = 0;  // the endpoint that answered last
};

// Base64 (RFC 4648, with padding), as the gateway carries keys and values.
std::string Base64Encode(std::string_view bytes);
// kInvalidArgument for text that is not base64.
StatusOr<std::string> Base64Decode(std::string_view text);

}  // namespace elastra::journal
