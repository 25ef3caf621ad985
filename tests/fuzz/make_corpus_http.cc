// The seeds of the HTTP target, for fuzz_make_corpus (make_corpus.cc): one request of each kind
// the API serves, as a client writes it (docs/http.md), with the tokens http_fuzzer.cc configures,
// and the refusals a client meets most (no token, the read token on a change, a cookie on a POST,
// a body that does not parse).
#include <string>

#include "tests/fuzz/make_corpus.h"

namespace elastra::fuzz {
namespace {

constexpr char kAdmin[] = "Authorization: Bearer admin-7f3c9a\r\n";
constexpr char kRead[] = "Authorization: Bearer read-51e2d0\r\n";

std::string Request(const std::string& method, const std::string& target,
                    const std::string& headers, const std::string& body = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1:8470\r\n" + headers;
  if (!body.empty()) {
    r +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + "\r\n" + body;
}

}  // namespace

void HttpSeeds() {
  Write("http", "healthz", Request("GET", "/healthz", ""));
  Write("http", "dashboard", Request("GET", "/", kRead));
  Write("http", "dashboard-login", Request("GET", "/?token=read-51e2d0", ""));
  Write("http", "dashboard-cookie",
        Request("GET", "/", "Cookie: theme=dark; elastra_token=read-51e2d0\r\n"));
  Write("http", "job", Request("GET", "/v1/job", kRead));
  Write("http", "job-head", Request("HEAD", "/v1/job", kAdmin));
  Write("http", "metrics", Request("GET", "/metrics", kRead));
  Write("http", "resize-lookup", Request("GET", "/v1/resizes/3", kAdmin));
  Write("http", "events", Request("GET", "/v1/events", kRead));
  Write("http", "events-resume",
        Request("GET", "/v1/events", std::string(kRead) + "Last-Event-ID: 1742\r\n"));
  Write("http", "events-no-journal",
        Request("GET", "/v1/events", std::string(kRead) + "X-Fuzz-No-Journal: 1\r\n"));
  Write("http", "resize-workers", Request("POST", "/v1/resize", kAdmin, R"({"workers":4})"));
  Write("http", "resize-layout-wait",
        Request("POST", "/v1/resize", kAdmin,
                R"({"workers":8,"layout":{"dp":2,"pp":2,"tp":2},"wait":true})"));
  Write("http", "resize-layout-only",
        Request("POST", "/v1/resize", kAdmin, R"({"layout":{"dp":4,"pp":1,"tp":2}})"));
  Write("http", "resize-spares", Request("POST", "/v1/resize", kAdmin, R"({"spares":2})"));
  Write("http", "resize-workers-spares",
        Request("POST", "/v1/resize", kAdmin, R"({"workers":3,"spares":1,"wait":false})"));
  Write("http", "drain", Request("POST", "/v1/drain", kAdmin, R"({"host":"hostB"})"));
  Write("http", "drain-wait",
        Request("POST", "/v1/drain", kAdmin, R"({"host":"node-17.rack2","wait":true})"));
  Write("http", "refused-no-token", Request("GET", "/v1/job", ""));
  Write("http", "refused-read-token-resize",
        Request("POST", "/v1/resize", kRead, R"({"workers":2})"));
  Write("http", "refused-cookie-drain",
        Request("POST", "/v1/drain", "Cookie: elastra_token=admin-7f3c9a\r\n",
                R"({"host":"hostB"})"));
  Write("http", "refused-resize-body",
        Request("POST", "/v1/resize", kAdmin, R"({"workers":0,"layout":{"dp":2}})"));
}

}  // namespace elastra::fuzz
