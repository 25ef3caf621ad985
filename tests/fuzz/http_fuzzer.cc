// Fuzz target: the HTTP API's request handling (http/routes.h): which endpoint, the bearer token
// from the Authorization header, the `token` query parameter or the dashboard's cookie, the
// Last-Event-ID of an event stream, and the JSON bodies of POST /v1/resize (workers, layout,
// spares, wait) and POST /v1/drain. cpp-httplib's own parsing of the connection's bytes is
// upstream's (fuzzed by OSS-Fuzz) and not driven here.
//
// Input: a request as it is written on the wire, read the simple way: a request line "METHOD
// TARGET [VERSION]", header lines "Name: value" up to an empty line, then the body. TARGET's
// query is split at '&' and '=' (no percent-decoding). Line ends may be "\r\n" or "\n". A header
// "X-Fuzz-No-Journal" (the target's own) routes for a job that keeps no journal.
//
// Beyond no crash: only the admin token in a Bearer header changes the job; any other action but
// the health check carries one of the job's tokens (and the login link's own token is one); an
// error is 400, 401, 403, 404 or 422 with a JSON body (a header's bytes quoted back included);
// the resize or drain asked for encodes and decodes back to itself.
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/logging.h"
#include "http/routes.h"
#include "protocol/codec.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using elastra::http::ApiAction;
using elastra::http::ApiConfig;
using elastra::http::ApiRequest;

constexpr char kAdmin[] = "admin-7f3c9a";
constexpr char kRead[] = "read-51e2d0";

std::string_view Line(elastra::fuzz::Input& in) {
  std::string_view line = in.Until("\n");
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

bool NameIs(std::string_view name, std::string_view want) {
  if (name.size() != want.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(name[i])) !=
        std::tolower(static_cast<unsigned char>(want[i]))) {
      return false;
    }
  }
  return true;
}

// The request the input writes (the first of a repeated header or parameter counts, as with
// cpp-httplib's get_header_value and get_param_value).
ApiRequest Parse(elastra::fuzz::Input& in, bool* events) {
  ApiRequest req;
  *events = true;
  const std::string_view request_line = Line(in);
  const size_t sp = request_line.find(' ');
  req.method = std::string(request_line.substr(0, sp));
  std::string_view target =
      sp == std::string_view::npos ? std::string_view() : request_line.substr(sp + 1);
  target = target.substr(0, target.find(' '));
  const size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  std::string_view query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  while (!query.empty() && !req.token_param) {
    const std::string_view param = query.substr(0, query.find('&'));
    query.remove_prefix(std::min(query.size(), param.size() + 1));
    const size_t eq = param.find('=');
    if (param.substr(0, eq) == "token") {
      req.token_param = std::string(eq == std::string_view::npos ? "" : param.substr(eq + 1));
    }
  }
  bool authorization = false, cookie = false, last_event_id = false;
  for (std::string_view line = Line(in); !line.empty(); line = Line(in)) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (NameIs(name, "Authorization") && !authorization) {
      req.authorization = std::string(value);
      authorization = true;
    } else if (NameIs(name, "Cookie") && !cookie) {
      req.cookie = std::string(value);
      cookie = true;
    } else if (NameIs(name, "X-Fuzz-No-Journal")) {
      *events = false;
    } else if (NameIs(name, "Last-Event-ID") && !last_event_id) {
      req.last_event_id = std::string(value);
      last_event_id = true;
    }
  }
  req.body = std::string(in.Rest());
  return req;
}

bool IsJobToken(const std::string& token) { return token == kAdmin || token == kRead; }

template <class T>
void CheckRoundTrip(const T& value) {
  const std::string bytes = elastra::proto::EncodePayload(value);
  auto back = elastra::proto::DecodePayload<T>(bytes);
  CHECK(back.ok()) << back.status();
  CHECK(elastra::proto::EncodePayload(*back) == bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using Kind = ApiAction::Kind;
  elastra::fuzz::QuietLogs();
  elastra::fuzz::Input in(data, size);
  bool events = true;
  const ApiRequest req = Parse(in, &events);
  const ApiAction a = elastra::http::Route(req, ApiConfig{kAdmin, kRead, events});
  if (a.kind == Kind::kError) {
    CHECK(a.code == 400 || a.code == 401 || a.code == 403 || a.code == 404 || a.code == 422)
        << a.code;
    CHECK(!a.message.empty());
    const auto body = nlohmann::json::parse(elastra::http::ErrorBody(a.message), nullptr, false);
    CHECK(body.is_object() && body["error"].is_string());
    return 0;
  }
  if (a.kind == Kind::kHealth) return 0;
  const bool has_bearer = req.authorization.rfind("Bearer ", 0) == 0;
  const std::string bearer = has_bearer ? req.authorization.substr(7) : std::string();
  if (a.kind == Kind::kResize || a.kind == Kind::kDrain) {
    CHECK(req.method == "POST");
    CHECK(has_bearer && bearer == kAdmin) << "a change without the admin token in a Bearer header";
  } else {
    CHECK(req.method == "GET" || req.method == "HEAD");
    const bool granted =
        has_bearer ? IsJobToken(bearer)
        : req.token_param
            ? IsJobToken(*req.token_param)
            : req.cookie.find(std::string("elastra_token=") + kAdmin) != std::string::npos ||
                  req.cookie.find(std::string("elastra_token=") + kRead) != std::string::npos;
    CHECK(granted) << "a read without one of the job's tokens";
  }
  switch (a.kind) {
    case Kind::kSetCookie:
      CHECK(IsJobToken(a.token)) << "the login link keeps a token that is not the job's";
      break;
    case Kind::kEvents:
      CHECK(events);
      break;
    case Kind::kChange:
      CHECK(a.id < 1'000'000'000'000'000'000ull);
      break;
    case Kind::kResize:
      CHECK(a.resize.workers >= 1 || (a.resize.workers == 0 && a.resize.spares >= 0));
      CHECK(a.resize.spares >= -1);
      if (a.resize.has_layout) {
        CHECK(a.resize.layout.dp >= 1 && a.resize.layout.pp >= 1 && a.resize.layout.tp >= 1);
      }
      CheckRoundTrip(a.resize);
      break;
    case Kind::kDrain:
      CHECK(!a.drain.host.empty());
      CheckRoundTrip(a.drain);
      break;
    default:
      break;
  }
  return 0;
}
