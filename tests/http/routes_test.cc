// Route (http/routes.h) without a socket: the endpoints, the tokens each needs, the bodies of a
// resize and a drain, and the two requests the review of the fuzz target found mishandled.
#include "http/routes.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace elastra::http {
namespace {

using Kind = ApiAction::Kind;

const ApiConfig kConfig{"admin-token", "read-token", true};

ApiRequest Get(const std::string& path, const std::string& token = "read-token") {
  ApiRequest r;
  r.method = "GET";
  r.path = path;
  if (!token.empty()) r.authorization = "Bearer " + token;
  return r;
}

ApiRequest Post(const std::string& path, const std::string& body,
                const std::string& token = "admin-token") {
  ApiRequest r = Get(path, token);
  r.method = "POST";
  r.body = body;
  return r;
}

TEST(HttpRoutesTest, EachEndpointNeedsItsToken) {
  EXPECT_EQ(Route(Get("/healthz", ""), kConfig).kind, Kind::kHealth);
  EXPECT_EQ(Route(Get("/v1/job"), kConfig).kind, Kind::kJob);
  EXPECT_EQ(Route(Get("/metrics", "admin-token"), kConfig).kind, Kind::kMetrics);
  const ApiAction change = Route(Get("/v1/resizes/42"), kConfig);
  EXPECT_EQ(change.kind, Kind::kChange);
  EXPECT_EQ(change.id, 42u);
  EXPECT_EQ(Route(Get("/v1/resizes/1234567890123456789"), kConfig).code, 404);  // 19 digits
  EXPECT_EQ(Route(Get("/v1/nothing"), kConfig).code, 404);
  const ApiAction none = Route(Get("/v1/job", ""), kConfig);
  EXPECT_EQ(none.code, 401);
  EXPECT_EQ(none.www_authenticate, "Bearer");
  EXPECT_EQ(Route(Get("/v1/job", "guess"), kConfig).code, 401);
  EXPECT_EQ(Route(Post("/v1/resize", R"({"workers":2})", "read-token"), kConfig).code, 403);
  ApiRequest cookie = Post("/v1/drain", R"({"host":"b"})", "");
  cookie.cookie = "elastra_token=admin-token";
  EXPECT_EQ(Route(cookie, kConfig).code, 403);  // a cookie only reads
  cookie.method = "GET";
  cookie.path = "/";
  EXPECT_EQ(Route(cookie, kConfig).kind, Kind::kDashboard);
}

TEST(HttpRoutesTest, ResizeAndDrainBodies) {
  ApiAction a =
      Route(Post("/v1/resize", R"({"layout":{"dp":2,"pp":1,"tp":2},"wait":true})"), kConfig);
  ASSERT_EQ(a.kind, Kind::kResize);
  EXPECT_EQ(a.resize.workers, 4);
  EXPECT_TRUE(a.resize.has_layout);
  EXPECT_TRUE(a.wait);
  EXPECT_FALSE(a.resize.wait);
  a = Route(Post("/v1/resize", R"({"spares":3})"), kConfig);
  ASSERT_EQ(a.kind, Kind::kResize);
  EXPECT_EQ(a.resize.workers, 0);
  EXPECT_EQ(a.resize.spares, 3);
  EXPECT_EQ(Route(Post("/v1/resize", R"({"workers":0})"), kConfig).code, 422);
  EXPECT_EQ(Route(Post("/v1/resize", R"({"spares":-2})"), kConfig).code, 422);
  EXPECT_EQ(Route(Post("/v1/resize", R"({"layout":{"dp":2}})"), kConfig).code, 400);
  EXPECT_EQ(Route(Post("/v1/resize", "{}"), kConfig).code, 400);
  a = Route(Post("/v1/drain", R"({"host":"hostB","wait":true})"), kConfig);
  ASSERT_EQ(a.kind, Kind::kDrain);
  EXPECT_EQ(a.drain.host, "hostB");
  EXPECT_TRUE(a.wait);
  EXPECT_EQ(Route(Post("/v1/drain", R"({"host":""})"), kConfig).code, 400);
  EXPECT_EQ(Route(Post("/v1/drain", "[1]"), kConfig).code, 400);
}

TEST(HttpRoutesTest, TheLoginLinkKeepsOnlyAValidTokenOfItsOwn) {
  ApiRequest login = Get("/", "");
  login.token_param = "read-token";
  ApiAction a = Route(login, kConfig);
  ASSERT_EQ(a.kind, Kind::kSetCookie);
  EXPECT_EQ(a.token, "read-token");
  // A valid Authorization header once let any ?token= become the cookie (review, fuzz target).
  login = Get("/", "admin-token");
  login.token_param = "x; Domain=example.com";
  EXPECT_EQ(Route(login, kConfig).code, 401);
  // And the request's own token still counts: a bad Authorization header is refused as before.
  login = Get("/", "guess");
  login.token_param = "read-token";
  EXPECT_EQ(Route(login, kConfig).code, 401);
}

TEST(HttpRoutesTest, ALastEventIdThatIsNotUtf8IsAnsweredWithJson) {
  ApiRequest events = Get("/v1/events");
  events.last_event_id = "12";
  EXPECT_EQ(Route(events, kConfig).id, 12u);
  // Quoted back in the error, these bytes once made the JSON encoder throw (a 500 instead of 400).
  events.last_event_id = "\xff\xfe";
  const ApiAction a = Route(events, kConfig);
  EXPECT_EQ(a.code, 400);
  const auto body = nlohmann::json::parse(ErrorBody(a.message));
  EXPECT_NE(body["error"].get<std::string>().find("is not an event id"), std::string::npos);
  EXPECT_EQ(Route(Get("/v1/events"), ApiConfig{"admin-token", "read-token", false}).code, 404);
}

}  // namespace
}  // namespace elastra::http
