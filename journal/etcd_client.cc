#include "journal/etcd_client.h"

#include <httplib.h>

#include <array>
#include <nlohmann/json.hpp>
#include <utility>

namespace elastra::journal {

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The gateway's int64 fields are JSON strings ("123"); a number is taken too. 0 when absent.
int64_t Int64(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

StatusOr<std::string> Bytes(const nlohmann::json& j, const char* field) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string()) return std::string();
  return Base64Decode(it->get<std::string>());
}

StatusOr<EtcdRangeResult> ParseRange(const nlohmann::json& j) {
  EtcdRangeResult out;
  if (auto h = j.find("header"); h != j.end() && h->is_object())
    out.revision = Int64(*h, "revision");
  out.count = Int64(j, "count");
  out.more = j.value("more", false);
  if (auto kvs = j.find("kvs"); kvs != j.end() && kvs->is_array()) {
    for (const auto& kv : *kvs) {
      EtcdKeyValue e;
      ELASTRA_ASSIGN_OR_RETURN(e.key, Bytes(kv, "key"));
      ELASTRA_ASSIGN_OR_RETURN(e.value, Bytes(kv, "value"));
      e.create_revision = Int64(kv, "create_revision");
      e.mod_revision = Int64(kv, "mod_revision");
      e.version = Int64(kv, "version");
      e.lease = Int64(kv, "lease");
      out.kvs.push_back(std::move(e));
    }
  }
  return out;
}

nlohmann::json RangeRequest(std::string_view key, std::string_view range_end, int64_t limit,
                            bool descending, bool keys_only) {
  nlohmann::json r = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) r["range_end"] = Base64Encode(range_end);
  if (limit > 0) r["limit"] = std::to_string(limit);
  if (descending) {
    r["sort_order"] = "DESCEND";
    r["sort_target"] = "KEY";
  }
  if (keys_only) r["keys_only"] = true;
  return r;
}

nlohmann::json OpRequest(const EtcdOp& op) {
  switch (op.kind) {
    case EtcdOp::Kind::kPut: {
      nlohmann::json p = {{"key", Base64Encode(op.key)}, {"value", Base64Encode(op.value)}};
      if (op.lease != 0) p["lease"] = std::to_string(op.lease);
      return {{"request_put", p}};
    }
    case EtcdOp::Kind::kDeleteRange: {
      nlohmann::json d = {{"key", Base64Encode(op.key)}};
      if (!op.range_end.empty()) d["range_end"] = Base64Encode(op.range_end);
      return {{"request_delete_range", d}};
    }
    case EtcdOp::Kind::kRange:
      return {{"request_range", RangeRequest(op.key, op.range_end, op.limit, false, false)}};
  }
  return {};
}

nlohmann::json CompareRequest(const EtcdCompare& c) {
  static constexpr std::array<const char*, 4> kResults = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
  nlohmann::json j = {{"key", Base64Encode(c.key)},
                      {"result", kResults[static_cast<size_t>(c.result)]}};
  switch (c.target) {
    case EtcdCompare::Target::kVersion:
      j["target"] = "VERSION";
      j["version"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kCreateRevision:
      j["target"] = "CREATE";
      j["create_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kModRevision:
      j["target"] = "MOD";
      j["mod_revision"] = std::to_string(c.number);
      break;
    case EtcdCompare::Target::kValue:
      j["target"] = "VALUE";
      j["value"] = Base64Encode(c.value);
      break;
  }
  return j;
}

StatusOr<nlohmann::json> ParseAnswer(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return InternalError("etcd " + what + ": the answer is not a JSON object");
  return j;
}

}  // namespace

std::string Base64Encode(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint32_t{static_cast<uint8_t>(bytes[i])} << 16) |
                       (uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8) |
                       uint32_t{static_cast<uint8_t>(bytes[i + 2])};
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rest = bytes.size() - i;
  if (rest > 0) {
    uint32_t v = uint32_t{static_cast<uint8_t>(bytes[i])} << 16;
    if (rest == 2) v |= uint32_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

StatusOr<std::string> Base64Decode(std::string_view text) {
  static const std::array<int8_t, 256> kValues = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    for (int i = 0; i < 64; ++i) t[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  if (text.size() % 4 != 0)
    return InvalidArgumentError("base64 text of a length not a multiple of 4");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      const int8_t d = kValues[static_cast<uint8_t>(c)];
      if (d < 0 || pad > 0) return InvalidArgumentError("not base64 text");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>((v >> 16) & 0xff);
    if (pad < 2) out += static_cast<char>((v >> 8) & 0xff);
    if (pad < 1) out += static_cast<char>(v & 0xff);
  }
  return out;
}

struct EtcdClient::Endpoint {
  std::string url;
  std::unique_ptr<httplib::Client> http;
};

StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::string_view list = options.endpoints;
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string url(list.substr(0, comma));
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    if (url.empty()) continue;
    if (url.rfind("https://", 0) == 0) {
      return InvalidArgumentError("etcd endpoint " + url + ": https is not supported yet");
    }
    if (url.rfind("http://", 0) != 0) url = "http://" + url;
    while (url.size() > 7 && url.back() == '/') url.pop_back();
    if (url.size() <= 7 || url.find('/', 7) != std::string::npos) {
      return InvalidArgumentError("etcd endpoint '" + url + "' is not http://HOST:PORT");
    }
    auto e = std::make_unique<Endpoint>();
    e->url = url;
    e->http = std::make_unique<httplib::Client>(url);
    const auto connect = options.connect_timeout.count();
    const auto request = options.request_timeout.count();
    e->http->set_connection_timeout(connect / 1000, (connect % 1000) * 1000);
    e->http->set_read_timeout(request / 1000, (request % 1000) * 1000);
    e->http->set_write_timeout(request / 1000, (request % 1000) * 1000);
    e->http->set_keep_alive(true);
    // Headers and body go out as separate writes: without this, Nagle and the peer's delayed ACK
    // hold the body back ~40 ms on every request.
    e->http->set_tcp_nodelay(true);
    endpoints.push_back(std::move(e));
  }
  if (endpoints.empty()) return InvalidArgumentError("no etcd endpoint given");
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options), std::move(endpoints)));
}

EtcdClient::EtcdClient(EtcdOptions options, std::vector<std::unique_ptr<Endpoint>> endpoints)
    : options_(std::move(options)), endpoints_(std::move(endpoints)) {}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

StatusOr<std::string> EtcdClient::Call(const std::string& path, const std::string& body) {
  std::string failures;
  for (size_t tried = 0; tried < endpoints_.size(); ++tried) {
    const size_t at = (current_ + tried) % endpoints_.size();
    Endpoint& e = *endpoints_[at];
    // The gateway sends an error as a chunked body with an HTTP trailer (Grpc-Trailer-...), which
    // cpp-httplib 0.11 fails to read after the body: the status and body are taken as they come,
    // and an error answer whose JSON arrived whole is etcd's answer, not a lost connection.
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body;
    req.set_header("Content-Type", "application/json");
    int status = -1;
    std::string answer;
    req.response_handler = [&status](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&answer](const char* data, size_t n, uint64_t, uint64_t) {
      answer.append(data, n);
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    const bool read = e.http->send(req, res, error);
    nlohmann::json j = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
    if (!read && !(status >= 400 && j.is_object() && j.contains("code"))) {
      failures += (failures.empty() ? "" : "; ") + e.url + ": " + httplib::to_string(error);
      continue;
    }
    if (status == 200) {
      current_ = at;
      return answer;
    }
    // The gateway's error: {"error": ..., "code": <gRPC code>, "message": ...}.
    std::string message = "HTTP " + std::to_string(status);
    int code = 0;
    if (j.is_object()) {
      if (j.contains("message") && j["message"].is_string()) {
        message = j["message"].get<std::string>();
      } else if (j.contains("error") && j["error"].is_string()) {
        message = j["error"].get<std::string>();
      }
      if (j.contains("code") && j["code"].is_number_integer()) code = j["code"].get<int>();
    }
    constexpr int kGrpcUnavailable = 14;  // a member without a leader, or stopping
    if (code == kGrpcUnavailable) {
      failures += (failures.empty() ? "" : "; ") + e.url + ": " + message;
      continue;
    }
    return InternalError("etcd " + e.url + path + ": " + message);
  }
  return UnavailableError("etcd: no endpoint answered " + path + " (" + failures + ")");
}

Status EtcdClient::Put(std::string_view key, std::string_view value) {
  const nlohmann::json r = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/kv/put", r.dump()));
  return ParseAnswer(answer, "put").status();
}

StatusOr<EtcdRangeResult> EtcdClient::Range(std::string_view key, std::string_view range_end,
                                            int64_t limit, bool descending, bool keys_only) {
  const nlohmann::json r = RangeRequest(key, range_end, limit, descending, keys_only);
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/kv/range", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "range"));
  return ParseRange(j);
}

StatusOr<EtcdRangeResult> EtcdClient::RangeAt(int64_t revision, std::string_view key,
                                              std::string_view range_end, int64_t limit,
                                              bool descending, bool keys_only) {
  nlohmann::json r = RangeRequest(key, range_end, limit, descending, keys_only);
  if (revision > 0) r["revision"] = std::to_string(revision);
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/kv/range", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "range"));
  return ParseRange(j);
}

StatusOr<int64_t> EtcdClient::DeleteRange(std::string_view key, std::string_view range_end) {
  nlohmann::json r = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) r["range_end"] = Base64Encode(range_end);
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/kv/deleterange", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "deleterange"));
  return Int64(j, "deleted");
}

StatusOr<EtcdTxnResult> EtcdClient::Txn(const std::vector<EtcdCompare>& compares,
                                        const std::vector<EtcdOp>& success,
                                        const std::vector<EtcdOp>& failure) {
  nlohmann::json r = {{"compare", nlohmann::json::array()},
                      {"success", nlohmann::json::array()},
                      {"failure", nlohmann::json::array()}};
  for (const EtcdCompare& c : compares) r["compare"].push_back(CompareRequest(c));
  for (const EtcdOp& op : success) r["success"].push_back(OpRequest(op));
  for (const EtcdOp& op : failure) r["failure"].push_back(OpRequest(op));
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/kv/txn", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "txn"));
  EtcdTxnResult out;
  out.succeeded = j.value("succeeded", false);
  if (auto h = j.find("header"); h != j.end() && h->is_object())
    out.revision = Int64(*h, "revision");
  if (auto rs = j.find("responses"); rs != j.end() && rs->is_array()) {
    for (const auto& one : *rs) {
      if (auto range = one.find("response_range"); range != one.end() && range->is_object()) {
        ELASTRA_ASSIGN_OR_RETURN(EtcdRangeResult result, ParseRange(*range));
        out.ranges.push_back(std::move(result));
      }
    }
  }
  return out;
}

StatusOr<EtcdLease> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  const nlohmann::json r = {{"TTL", std::to_string(ttl_seconds)}};
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/lease/grant", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "lease grant"));
  EtcdLease lease{Int64(j, "ID"), Int64(j, "TTL")};
  if (lease.id == 0 || lease.ttl_seconds <= 0) {
    return InternalError("etcd lease grant: " + j.value("error", std::string("no lease granted")));
  }
  return lease;
}

StatusOr<int64_t> EtcdClient::LeaseKeepAlive(int64_t id) {
  // A stream of one request: the gateway answers {"result": {"ID": ..., "TTL": ...}}, with no TTL
  // for a lease that is gone.
  const nlohmann::json r = {{"ID", std::to_string(id)}};
  ELASTRA_ASSIGN_OR_RETURN(const std::string answer, Call("/v3/lease/keepalive", r.dump()));
  ELASTRA_ASSIGN_OR_RETURN(const nlohmann::json j, ParseAnswer(answer, "lease keepalive"));
  auto result = j.find("result");
  if (result == j.end() || !result->is_object()) {
    return InternalError("etcd lease keepalive: " +
                         j.value("error", std::string("an answer without a result")));
  }
  return Int64(*result, "TTL");
}

Status EtcdClient::LeaseRevoke(int64_t id) {
  const nlohmann::json r = {{"ID", std::to_string(id)}};
  StatusOr<std::string> answer = Call("/v3/lease/revoke", r.dump());
  if (!answer.ok() && answer.status().message().find("lease not found") != std::string::npos) {
    return OkStatus();
  }
  ELASTRA_RETURN_IF_ERROR(answer.status());
  return ParseAnswer(*answer, "lease revoke").status();
}

}  // namespace elastra::journal
