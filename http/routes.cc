#include "http/routes.h"

#include <charconv>
#include <limits>
#include <nlohmann/json.hpp>

namespace elastra::http {
namespace {

using nlohmann::json;
using Kind = ApiAction::Kind;

// The cookie the dashboard's browser keeps the (read) token in.
constexpr char kCookie[] = "elastra_token";

ApiAction Fail(int code, std::string message) {
  ApiAction a;
  a.kind = Kind::kError;
  a.code = code;
  a.message = std::move(message);
  return a;
}

ApiAction Do(Kind kind) {
  ApiAction a;
  a.kind = kind;
  return a;
}

// Whether two tokens are equal, in time that depends only on the length of `expected` (a
// mismatch at the first byte takes as long as one at the last).
bool ConstantTimeEquals(const std::string& given, const std::string& expected) {
  unsigned char diff = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff |= g ^ static_cast<unsigned char>(expected[i]);
  }
  return diff == 0;
}

std::string CookieValue(const std::string& header, const std::string& name) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t end = header.find(';', pos);
    if (end == std::string::npos) end = header.size();
    size_t begin = header.find_first_not_of(' ', pos);
    if (begin < end && header.compare(begin, name.size() + 1, name + "=") == 0) {
      return header.substr(begin + name.size() + 1, end - begin - name.size() - 1);
    }
    pos = end + 1;
  }
  return "";
}

// The token a request carries: `Authorization: Bearer TOKEN`; else, for a browser, the `token`
// query parameter or the kCookie cookie, which grant reading only (a cookie is sent by the
// browser on its own, so it must never let a page elsewhere change the job). Empty when none.
std::string TokenOf(const ApiRequest& req, bool* from_browser) {
  constexpr char kBearer[] = "Bearer ";
  *from_browser = false;
  if (req.authorization.rfind(kBearer, 0) == 0)
    return req.authorization.substr(sizeof(kBearer) - 1);
  *from_browser = true;
  if (req.token_param) return *req.token_param;
  return CookieValue(req.cookie, kCookie);
}

enum class Access { kRead, kAdmin };

// nullopt when the request carries a token that grants `need`, else the 401 or 403 answer.
std::optional<ApiAction> Refusal(const ApiRequest& req, const ApiConfig& config, Access need) {
  bool from_browser = false;
  const std::string token = TokenOf(req, &from_browser);
  if (token.empty()) {
    ApiAction a = Fail(
        401, "missing bearer token (Authorization: Bearer TOKEN; a browser opens /?token=TOKEN)");
    a.www_authenticate = "Bearer";
    return a;
  }
  const bool admin = ConstantTimeEquals(token, config.admin_token);
  const bool read = ConstantTimeEquals(token, config.read_token);
  if (!admin && !read) {
    ApiAction a = Fail(401, "the bearer token is not this job's");
    a.www_authenticate = "Bearer error=\"invalid_token\"";
    return a;
  }
  if (need == Access::kAdmin && (!admin || from_browser)) {
    return Fail(403, from_browser ? "a token from a query parameter or cookie may only read; send "
                                    "Authorization: Bearer with the admin token"
                                  : "the read token may not change the job; use the admin token");
  }
  return std::nullopt;
}

// Fills `r` from a resize body; "" when it is well formed, else "400:why" or "422:why".
std::string ParseResize(const std::string& text, proto::ResizeRequest* r, bool* wait) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return "400:the body is not a JSON object";
  bool has_workers = false;
  for (const auto& [key, value] : body.items()) {
    if (key == "workers" && value.is_number_integer()) {
      const int64_t n = value.get<int64_t>();
      if (n < 1 || n > std::numeric_limits<int32_t>::max()) {
        return "422:\"workers\" must be at least 1, got " + std::to_string(n);
      }
      r->workers = static_cast<int32_t>(n);
      has_workers = true;
    } else if (key == "layout" && value.is_object()) {
      int32_t* dims[] = {&r->layout.dp, &r->layout.pp, &r->layout.tp};
      const char* names[] = {"dp", "pp", "tp"};
      if (value.size() != 3) return "400:\"layout\" needs exactly dp, pp and tp";
      for (int i = 0; i < 3; ++i) {
        auto it = value.find(names[i]);
        if (it == value.end() || !it->is_number_integer()) {
          return std::string("400:\"layout\" needs an integer \"") + names[i] + "\"";
        }
        const int64_t v = it->get<int64_t>();
        if (v < 1 || v > 1 << 20)
          return std::string("422:layout ") + names[i] + " must be at least 1";
        *dims[i] = static_cast<int32_t>(v);
      }
      r->has_layout = true;
    } else if (key == "wait" && value.is_boolean()) {
      *wait = value.get<bool>();
    } else if (key == "spares" && value.is_number_integer()) {
      // The coordinator refuses more than max_workers (422, with the bound).
      const int64_t k = value.get<int64_t>();
      if (k < 0 || k > std::numeric_limits<int32_t>::max()) {
        return "422:\"spares\" must be 0 or more, got " + std::to_string(k);
      }
      r->spares = static_cast<int32_t>(k);
    } else {
      return "400:unexpected or malformed field \"" + key + "\"";
    }
  }
  if (!has_workers && !r->has_layout && r->spares < 0) {
    return "400:\"workers\", \"layout\" or \"spares\" is required";
  }
  if (!has_workers) r->workers = r->has_layout ? r->layout.world() : 0;  // 0: only the spares
  return "";
}

ApiAction Resize(const ApiRequest& req) {
  ApiAction a = Do(Kind::kResize);
  if (std::string why = ParseResize(req.body, &a.resize, &a.wait); !why.empty()) {
    return Fail(why.rfind("422:", 0) == 0 ? 422 : 400, why.substr(4));
  }
  return a;
}

ApiAction Drain(const ApiRequest& req) {
  json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return Fail(400, "the body is not a JSON object");
  ApiAction a = Do(Kind::kDrain);
  for (const auto& [key, value] : body.items()) {
    if (key == "host" && value.is_string() && !value.get<std::string>().empty()) {
      a.drain.host = value.get<std::string>();
    } else if (key == "wait" && value.is_boolean()) {
      a.wait = value.get<bool>();
    } else {
      return Fail(400, "unexpected or malformed field \"" + key + "\"");
    }
  }
  if (a.drain.host.empty()) return Fail(400, "\"host\" is required");
  return a;
}

ApiAction Events(const ApiRequest& req, const ApiConfig& config) {
  if (!config.events) return Fail(404, "this job keeps no journal");
  ApiAction a = Do(Kind::kEvents);
  const std::string& last = req.last_event_id;
  if (!last.empty()) {
    auto [ptr, ec] = std::from_chars(last.data(), last.data() + last.size(), a.id);
    if (ec != std::errc() || ptr != last.data() + last.size()) {
      return Fail(400, "Last-Event-ID '" + last + "' is not an event id");
    }
  }
  return a;
}

// The id of GET /v1/resizes/ID (1 to 18 digits), nullopt for any other path.
std::optional<uint64_t> ChangeId(const std::string& path) {
  constexpr std::string_view kPrefix = "/v1/resizes/";
  if (path.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string_view digits = std::string_view(path).substr(kPrefix.size());
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  uint64_t id = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    id = id * 10 + static_cast<uint64_t>(c - '0');
  }
  return id;
}

ApiAction Get(const ApiRequest& req, const ApiConfig& config) {
  if (req.path == "/healthz") return Do(Kind::kHealth);
  const std::optional<uint64_t> change = ChangeId(req.path);
  if (req.path != "/" && req.path != "/v1/job" && req.path != "/metrics" &&
      req.path != "/v1/events" && !change) {
    return Fail(404, "no such endpoint");
  }
  if (auto refused = Refusal(req, config, Access::kRead)) return *refused;
  if (req.path == "/" && req.token_param) {
    // The login link. The parameter's token becomes the cookie, so it must be valid itself, not
    // only the token of an Authorization header beside it.
    ApiRequest login = req;
    login.authorization.clear();
    if (auto refused = Refusal(login, config, Access::kRead)) return *refused;
    ApiAction a = Do(Kind::kSetCookie);
    a.token = *req.token_param;
    return a;
  }
  if (req.path == "/") return Do(Kind::kDashboard);
  if (req.path == "/v1/job") return Do(Kind::kJob);
  if (req.path == "/metrics") return Do(Kind::kMetrics);
  if (req.path == "/v1/events") return Events(req, config);
  ApiAction a = Do(Kind::kChange);
  a.id = *change;
  return a;
}

}  // namespace

ApiAction Route(const ApiRequest& req, const ApiConfig& config) {
  if (req.method == "GET" || req.method == "HEAD") return Get(req, config);
  if (req.method != "POST" || (req.path != "/v1/resize" && req.path != "/v1/drain")) {
    return Fail(404, "no such endpoint");
  }
  if (auto refused = Refusal(req, config, Access::kAdmin)) return *refused;
  return req.path == "/v1/resize" ? Resize(req) : Drain(req);
}

std::string ErrorBody(const std::string& message) {
  return json{{"error", message}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace elastra::http
