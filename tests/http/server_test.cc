// The HTTP API on a real coordinator (an embedded one started with http ":0", no workers): every
// endpoint, the token rules, and the error codes; garbage, an oversized body and clients that
// connect and stall never keep the API or the coordinator from answering. The resize that
// completes over HTTP on a real job is tests/integration/http_job_test.cc.
#include "http/server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "protocol/keys.h"
#include "launch/embedded.h"
#include "journal/events.h"
#include "http/metrics.h"
#include "journal/journal.h"
#include "tests/http/http_test_client.h"

namespace elastra::http {
namespace {

using journal::JobOutcome;
using journal::Journal;
using journal::JournalEventReader;
using journal::JournalGeneration;
using journal::JournalWorkerState;
using launch::EmbeddedCoordinator;
using launch::EmbeddedOptions;
using launch::StartEmbeddedCoordinator;
using testing::Bearer;
using testing::ReadToken;

using nlohmann::json;

int Mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 0777;
}

TEST(HttpListenTest, HostPortOrLoopbackPort) {
  EXPECT_EQ(*ParseHttpListen(":0"), std::make_pair(std::string("127.0.0.1"), 0));
  EXPECT_EQ(*ParseHttpListen("0.0.0.0:8080"), std::make_pair(std::string("0.0.0.0"), 8080));
  for (const char* bad : {"", "8080", ":", ":x", ":70000", "h:-1", "h:80x"}) {
    EXPECT_EQ(ParseHttpListen(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST(HttpMetricsTest, PrometheusTextFromTheStatus) {
  proto::JobStatus s;
  s.state = proto::JobState::kRunning;
  s.generation = 3;
  s.layout = Layout{2, 1, 1};
  s.target_workers = 2;
  s.step = 41;
  proto::WorkerStatus w;
  w.id = "w0";
  w.host = "h\"1";
  w.state = proto::WorkerState::kMember;
  w.last_heartbeat_ms_ago = 250;
  s.workers.push_back(w);
  w.id = "w1";
  w.state = proto::WorkerState::kLost;
  w.last_heartbeat_ms_ago = -1;
  s.workers.push_back(w);
  proto::GenerationRecord g;
  g.generation = 1;
  g.reason = proto::GenerationReason::kStart;
  g.downtime_ms = 20;
  s.history.push_back(g);
  g.generation = 2;
  g.reason = proto::GenerationReason::kFailure;
  g.downtime_ms = 700;
  s.history.push_back(g);
  g.generation = 3;
  g.reason = proto::GenerationReason::kResize;
  g.downtime_ms = 3000;
  s.history.push_back(g);
  const std::string text = PrometheusMetrics(s);
  for (const char* line : {
           "elastra_job_state{state=\"running\"} 1\n",
           "elastra_job_state{state=\"forming\"} 0\n",
           "elastra_generation 3\n",
           "elastra_target_workers 2\n",
           "elastra_current_workers 2\n",
           "elastra_layout{dim=\"dp\"} 2\n",
           "elastra_steps_applied 41\n",
           "elastra_workers{state=\"member\"} 1\n",
           "elastra_workers{state=\"lost\"} 1\n",
           "# TYPE elastra_reconfiguration_downtime_seconds histogram\n",
           "elastra_reconfiguration_downtime_seconds_bucket{reason=\"resize\",le=\"2.5\"} 0\n",
           "elastra_reconfiguration_downtime_seconds_bucket{reason=\"resize\",le=\"5\"} 1\n",
           "elastra_reconfiguration_downtime_seconds_bucket{reason=\"failure\",le=\"1\"} 1\n",
           "elastra_reconfiguration_downtime_seconds_bucket{reason=\"start\",le=\"+Inf\"} 1\n",
           "elastra_reconfiguration_downtime_seconds_sum{reason=\"resize\"} 3\n",
           "elastra_reconfiguration_downtime_seconds_count{reason=\"drain\"} 0\n",
           "elastra_failures{kind=\"worker_lost\"} 1\n",
           "elastra_failures{kind=\"recovery\"} 1\n",
           "elastra_worker_heartbeat_age_seconds{worker=\"w0\",host=\"h\\\"1\"} 0.25\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << text;
  }
  EXPECT_EQ(text.find("worker=\"w1\""), std::string::npos) << "w1's heartbeat is not awaited";
}

TEST(HttpMetricsTest, TheTrainingLoopsNumbers) {
  proto::JobStatus s;
  s.training.samples = 4800;
  s.training.samples_per_second = 512.5;
  s.training.goodput = 0.75;
  s.training.metrics = {{"loss", 0.125, 99}, {"lr", 0.001, 99}};
  const std::string text = PrometheusMetrics(s);
  for (const char* line : {
           "# TYPE elastra_training_samples_total counter\n",
           "elastra_training_samples_total 4800\n",
           "elastra_training_samples_per_second 512.5\n",
           "elastra_goodput 0.75\n",
           "# TYPE elastra_training_metric gauge\n",
           "elastra_training_metric{name=\"loss\"} 0.125\n",
           "elastra_training_metric{name=\"lr\"} 0.001\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << text;
  }
}

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-http-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    EmbeddedOptions o;
    o.state_dir = dir_;
    o.job = "web";
    o.initial_workers = 2;
    o.max_workers = 4;
    o.http = ":0";
    auto e = StartEmbeddedCoordinator(o);
    ASSERT_TRUE(e.ok()) << e.status();
    coordinator_ = std::move(e).value();
    ASSERT_NE(coordinator_.http, nullptr);
    admin_ = ReadToken(dir_ + "/admin.token");
    read_ = ReadToken(dir_ + "/read.token");
    client_ = std::make_unique<httplib::Client>("127.0.0.1", coordinator_.http->port());
    client_->set_read_timeout(10, 0);
  }
  void TearDown() override {
    client_.reset();
    if (coordinator_.http) coordinator_.http->Stop();
    if (coordinator_.server) coordinator_.server->Stop();
    std::filesystem::remove_all(dir_);
  }

  // The status and the parsed JSON body of a request.
  std::pair<int, json> Get(const std::string& path, const std::string& token) {
    auto res = client_->Get(path.c_str(), Bearer(token));
    if (!res) return {-1, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  std::pair<int, json> Post(const std::string& path, const std::string& body,
                            const std::string& token) {
    auto res = client_->Post(path.c_str(), Bearer(token), body, "application/json");
    if (!res) return {-1, json()};
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  static std::string ErrorOf(const json& j) {
    return j.is_object() && j.contains("error") ? j["error"].get<std::string>() : "(no error)";
  }

  std::string dir_;
  EmbeddedCoordinator coordinator_;
  std::string admin_;
  std::string read_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, TokensAndTheUrlAreInTheStateDirectory) {
  EXPECT_EQ(admin_.size(), 64u);
  EXPECT_EQ(read_.size(), 64u);
  EXPECT_NE(admin_, read_);
  EXPECT_EQ(Mode(dir_ + "/admin.token"), 0600);
  EXPECT_EQ(Mode(dir_ + "/read.token"), 0600);
  auto info = ReadConnectionInfo(dir_ + "/coordinator.json");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->http, "http://127.0.0.1:" + std::to_string(coordinator_.http->port()));
  EXPECT_EQ(info->http, coordinator_.http->url());
  auto join = ReadJoinFile(dir_ + "/join.json");
  ASSERT_TRUE(join.ok());
  EXPECT_TRUE(join->http.empty()) << "the join file names no admin surface";
}

// A coordinator restarted from its state directory (as elastra run restarts a dead one) serves
// the API again on the URL its clients have, with the same tokens.
TEST_F(HttpServerTest, ARestartServesTheSameUrlWithTheSameTokens) {
  const std::string url = coordinator_.http->url();
  client_.reset();
  coordinator_.http->Stop();
  coordinator_.server->Stop();
  coordinator_ = EmbeddedCoordinator{};
  EmbeddedOptions o;
  o.state_dir = dir_;
  o.restart = true;  // no http: it comes from coordinator.json
  auto e = StartEmbeddedCoordinator(o);
  ASSERT_TRUE(e.ok()) << e.status();
  coordinator_ = std::move(e).value();
  ASSERT_NE(coordinator_.http, nullptr);
  EXPECT_EQ(coordinator_.http->url(), url);
  EXPECT_EQ(ReadToken(dir_ + "/admin.token"), admin_);
  EXPECT_EQ(ReadToken(dir_ + "/read.token"), read_);
  EXPECT_EQ(ReadConnectionInfo(dir_ + "/coordinator.json")->http, url);
  client_ = std::make_unique<httplib::Client>("127.0.0.1", coordinator_.http->port());
  EXPECT_EQ(Get("/v1/job", read_).first, 200);
}

TEST_F(HttpServerTest, HealthzNeedsNoTokenEverythingElseDoes) {
  auto health = client_->Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (const char* path : {"/v1/job", "/metrics", "/v1/resizes/1"}) {
    auto none = client_->Get(path);
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate").rfind("Bearer", 0), 0u);
    EXPECT_NE(ErrorOf(json::parse(none->body, nullptr, false)), "(no error)");
    EXPECT_EQ(Get(path, "wrong").first, 401) << path;
    EXPECT_EQ(Get(path, admin_.substr(0, 63)).first, 401) << "a prefix of the token";
    EXPECT_EQ(Get(path, admin_ + "0").first, 401) << "the token and more";
  }
  auto basic = client_->Get("/v1/job", {{"Authorization", "Basic " + admin_}});
  ASSERT_TRUE(basic);
  EXPECT_EQ(basic->status, 401);
  EXPECT_EQ(Post("/v1/resize", R"({"workers":2})", "").first, 401);
}

TEST_F(HttpServerTest, JobIsTheStatusObjectAndMetricsArePrometheusText) {
  for (const std::string& token : {read_, admin_}) {
    auto [code, j] = Get("/v1/job", token);
    ASSERT_EQ(code, 200);
    EXPECT_EQ(j["job"], "web");
    EXPECT_EQ(j["state"], "forming");
    EXPECT_EQ(j["generation"], 0);
    EXPECT_TRUE(j["workers"].is_array());
    EXPECT_TRUE(j["history"].is_array());
  }
  auto metrics = client_->Get("/metrics", Bearer(read_));
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
  EXPECT_NE(metrics->body.find("elastra_generation 0\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("elastra_target_workers 2\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("elastra_job_state{state=\"forming\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("elastra_events_total{type=\"checkpoint\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("elastra_last_checkpoint_step -1\n"), std::string::npos);
}

TEST_F(HttpServerTest, WritesNeedTheAdminTokenAndBadBodiesAre400) {
  auto [read_code, read_body] = Post("/v1/resize", R"({"workers":2})", read_);
  EXPECT_EQ(read_code, 403) << read_body;
  EXPECT_EQ(Post("/v1/drain", R"({"host":"h"})", read_).first, 403);
  for (const char* body :
       {"", "not json", "[1,2]", "{\"workers\":\"two\"}", "{\"worker\":2}",
        "{\"workers\":2,\"wait\":1}", "{\"layout\":{\"dp\":2}}",
        "{\"layout\":{\"dp\":2,\"pp\":1,\"tp\":\"1\"}}", "{}", "\x01\x02\xff garbage"}) {
    auto [code, j] = Post("/v1/resize", body, admin_);
    EXPECT_EQ(code, 400) << body << " -> " << j;
    EXPECT_NE(ErrorOf(j), "(no error)") << body;
  }
  EXPECT_EQ(Post("/v1/drain", R"({"wait":true})", admin_).first, 400);
  EXPECT_EQ(Post("/v1/drain", R"({"host":7})", admin_).first, 400);
}

TEST_F(HttpServerTest, ImpossibleSizesAre422AChangeTheStateRefusesIs409) {
  auto [zero, z] = Post("/v1/resize", R"({"workers":0})", admin_);
  EXPECT_EQ(zero, 422) << z;
  auto [over, o] = Post("/v1/resize", R"({"workers":5})", admin_);
  EXPECT_EQ(over, 422) << o;
  EXPECT_NE(ErrorOf(o).find("at most 4"), std::string::npos) << o;
  auto [mismatch, m] =
      Post("/v1/resize", R"({"workers":3,"layout":{"dp":1,"pp":1,"tp":2}})", admin_);
  EXPECT_EQ(mismatch, 422) << m;
  // Well formed and possible, but the job has not formed its first generation yet.
  auto [early, e] = Post("/v1/resize", R"({"workers":3})", admin_);
  EXPECT_EQ(early, 409) << e;
  EXPECT_NE(ErrorOf(e).find("no generation"), std::string::npos) << e;
  auto [nohost, n] = Post("/v1/drain", R"({"host":"nowhere"})", admin_);
  EXPECT_EQ(nohost, 404) << n;
}

// "spares" in a resize body: the spares the job keeps change at once (200, even before the first
// generation), the status and /metrics show them, and a number that cannot be is refused with why.
TEST_F(HttpServerTest, AResizeOfSparesIsDoneAtOnceAndShownInStatusAndMetrics) {
  auto [code, j] = Post("/v1/resize", R"({"spares":2})", admin_);
  EXPECT_EQ(code, 200) << j;
  EXPECT_EQ(j.value("phase", ""), "done") << j;
  auto [negative, n] = Post("/v1/resize", R"({"spares":-1})", admin_);
  EXPECT_EQ(negative, 422) << n;
  EXPECT_EQ(ErrorOf(n), "\"spares\" must be 0 or more, got -1");
  auto [over, o] = Post("/v1/resize", R"({"spares":5})", admin_);
  EXPECT_EQ(over, 422) << o;
  EXPECT_NE(ErrorOf(o).find("at most 4 workers"), std::string::npos) << o;
  EXPECT_EQ(Post("/v1/resize", R"({"spares":"two"})", admin_).first, 400);
  EXPECT_EQ(Post("/v1/resize", R"({"spares":1})", read_).first, 403);
  auto [status, st] = Get("/v1/job", read_);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(st.value("spares_target", -1), 2) << st;
  EXPECT_EQ(st.value("target_workers", -1), 2) << "the size is not changed";
  auto metrics = client_->Get("/metrics", Bearer(read_));
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("elastra_spares_target 2\n"), std::string::npos) << metrics->body;
}

TEST_F(HttpServerTest, UnknownPathsAndIdsAre404AsJson) {
  auto [id, j] = Get("/v1/resizes/12345", read_);
  EXPECT_EQ(id, 404);
  EXPECT_NE(ErrorOf(j).find("12345"), std::string::npos);
  for (const char* path : {"/index.html", "/v1/nothing", "/v1/resizes/abc"}) {
    auto res = client_->Get(path, Bearer(admin_));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << path;
    EXPECT_NE(ErrorOf(json::parse(res->body, nullptr, false)), "(no error)") << path;
  }
}

TEST_F(HttpServerTest, AnOversizedBodyIsRefusedUnread) {
  const std::string huge = "{\"workers\":2,\"pad\":\"" + std::string(1 << 20, 'x') + "\"}";
  auto res = client_->Post("/v1/resize", Bearer(admin_), huge, "application/json");
  // The server answers 413, or closes the connection while the client still sends.
  if (res) EXPECT_EQ(res->status, 413);
  auto after = Get("/v1/job", read_);
  EXPECT_EQ(after.first, 200);
}

// Connects to `port`, sends `bytes`, and returns the socket (stalled: it sends nothing more).
int Stall(int port, const std::string& bytes) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  if (!bytes.empty()) (void)!send(fd, bytes.data(), bytes.size(), 0);
  return fd;
}

TEST_F(HttpServerTest, StalledClientsAndGarbageNeitherBlockTheApiNorTheCoordinator) {
  const int port = coordinator_.http->port();
  std::vector<int> stalled;
  // Fewer than the API's threads: the others still serve while these hold theirs.
  stalled.push_back(Stall(port, ""));
  stalled.push_back(Stall(port, "GET /v1/job HTTP/1.1\r\nHost: x\r\n"));  // headers never end
  stalled.push_back(Stall(port, "POST /v1/resize HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"));
  constexpr char kTlsHello[] = "\x16\x03\x01\x02\x00garbage\r\n\r\n";  // a NUL inside
  stalled.push_back(Stall(port, std::string(kTlsHello, sizeof(kTlsHello) - 1)));
  for (int fd : stalled) ASSERT_GE(fd, 0);
  EXPECT_EQ(Get("/v1/job", read_).first, 200);
  EXPECT_EQ(client_->Get("/healthz")->status, 200);
  EXPECT_EQ(coordinator_.server->Snapshot().job, "web");
  // Each stalled connection is closed by the server once its read timeout passes: recv() sees
  // the end of the stream (or an error), not its own 20 s limit.
  for (int fd : stalled) {
    timeval limit{20, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    char buf[4096];
    ssize_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15));
    EXPECT_TRUE(n == 0 || errno != EAGAIN) << "still open after 20 s";
    close(fd);
  }
  EXPECT_EQ(Get("/v1/job", read_).first, 200);
}

// A journal with a job of two workers: one generation, a resize, a lost worker, a checkpoint.
void WriteJournal(Journal* j) {
  ASSERT_TRUE(j->RecordJob("web", 2, 4).ok());
  ASSERT_TRUE(j->RecordJoin({"w0", "h", -1, 10}).ok());
  ASSERT_TRUE(j->RecordJoin({"w1", "h", -1, 11}).ok());
  JournalGeneration g;
  g.generation = 1;
  g.layout = Layout{2, 1, 1};
  g.members = {{"w0", "h", -1, 10}, {"w1", "h", -1, 11}};
  g.downtime_ms = 12;
  ASSERT_TRUE(j->RecordCommit(g).ok());
  ASSERT_TRUE(j->RecordResize({3, false, Layout{}}).ok());
  ASSERT_TRUE(j->RecordWorkerState("w1", JournalWorkerState::kLost).ok());
  ASSERT_TRUE(j->RecordCheckpoint(10, 1, "/ckpt/10").ok());
}

// GET /: the page with its policy; a browser's token comes as ?token= (made a cookie, the
// browser sent back to /) or as the cookie, and either only ever reads.
TEST_F(HttpServerTest, TheDashboardTakesTheTokenAsAQueryOrACookieAndOnlyReads) {
  auto none = client_->Get("/");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  auto wrong = client_->Get("/?token=wrong");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  EXPECT_TRUE(wrong->get_header_value("Set-Cookie").empty());
  auto login = client_->Get(("/?token=" + read_).c_str());
  ASSERT_TRUE(login);
  EXPECT_EQ(login->status, 303);
  EXPECT_EQ(login->get_header_value("Location"), "/");
  const std::string cookie = login->get_header_value("Set-Cookie");
  EXPECT_EQ(cookie.rfind("elastra_token=" + read_ + ";", 0), 0u) << cookie;
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos) << cookie;
  const httplib::Headers with_cookie = {{"Cookie", "other=1; elastra_token=" + read_}};
  auto page = client_->Get("/", with_cookie);
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("default-src 'none'"),
            std::string::npos);
  EXPECT_NE(page->body.find("<title>Elastra</title>"), std::string::npos);
  EXPECT_NE(page->body.find("new EventSource(\"/v1/events\")"), std::string::npos);
  for (const char* outside : {"<script src", "<link", "https://", "@import"}) {
    EXPECT_EQ(page->body.find(outside), std::string::npos) << "the page loads " << outside;
  }
  auto job = client_->Get("/v1/job", with_cookie);
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, 200);
  auto by_query = client_->Get(("/v1/job?token=" + read_).c_str());
  ASSERT_TRUE(by_query);
  EXPECT_EQ(by_query->status, 200);
  // The admin token from a browser reads, never writes: a cookie goes with any page's request.
  auto cookie_write = client_->Post("/v1/resize", {{"Cookie", "elastra_token=" + admin_}},
                                    R"({"workers":3})", "application/json");
  ASSERT_TRUE(cookie_write);
  EXPECT_EQ(cookie_write->status, 403) << cookie_write->body;
  auto query_write =
      client_->Post(("/v1/resize?token=" + admin_).c_str(), R"({"workers":3})", "application/json");
  ASSERT_TRUE(query_write);
  EXPECT_EQ(query_write->status, 403) << query_write->body;
}

// A resize the coordinator refuses is an event of its own (it is journaled with the reason).
TEST_F(HttpServerTest, ARefusedResizeIsAnEvent) {
  auto [code, body] = Post("/v1/resize", R"({"workers":3})", admin_);
  ASSERT_EQ(code, 409) << body;  // no generation formed yet
  auto events = testing::ReadSseEvents(
      *client_, read_, "", [](const auto& got) { return got.back().type == "resize_refused"; });
  ASSERT_FALSE(events.empty());
  ASSERT_EQ(events.back().type, "resize_refused");
  const json data = json::parse(events.back().data);
  EXPECT_EQ(data["workers"], 3);
  EXPECT_EQ(data["error"], ErrorOf(body));
  // Bodies refused before they reach the coordinator (400, 403) are no events.
  EXPECT_EQ(Post("/v1/resize", "garbage", admin_).first, 400);
  EXPECT_EQ(Post("/v1/resize", R"({"workers":3})", read_).first, 403);
  auto metrics = client_->Get("/metrics", Bearer(read_));
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("elastra_events_total{type=\"resize_refused\"} 1\n"),
            std::string::npos)
      << metrics->body;
}

TEST(JournalEventReaderTest, EventsFromRecordsIdsAreOffsetsAndResumeAfterAnId) {
  char tmpl[] = "/tmp/elastra-events-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string path = std::string(tmpl) + "/journal.bin";
  EXPECT_TRUE(JournalEventReader(path, 0).ReadNew().empty()) << "no journal, no events";
  {
    auto j = Journal::Create(path);
    ASSERT_TRUE(j.ok()) << j.status();
    WriteJournal(j->get());
  }
  JournalEventReader all(path, 0);
  auto events = all.ReadNew();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].type, "generation");
  EXPECT_EQ(json::parse(events[0].data)["workers"], (json{"w0", "w1"}));
  EXPECT_EQ(json::parse(events[0].data)["layout"]["dp"], 2);
  EXPECT_EQ(events[1].type, "resize_accepted");
  EXPECT_EQ(json::parse(events[1].data)["workers"], 3);
  EXPECT_EQ(events[2].type, "worker_lost");
  EXPECT_EQ(json::parse(events[2].data)["worker"], "w1");
  EXPECT_EQ(events[3].type, "checkpoint");
  EXPECT_EQ(json::parse(events[3].data)["step"], 10);
  for (size_t i = 1; i < events.size(); ++i) EXPECT_GT(events[i].id, events[i - 1].id);
  EXPECT_EQ(events.back().id, std::filesystem::file_size(path));
  EXPECT_TRUE(all.ReadNew().empty()) << "nothing new";

  // After a restart (Open takes the journal back and appends after it), the old ids still name
  // the same events, and a reader resuming after the last one sees only what came since.
  auto reopened = Journal::Open(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ASSERT_TRUE((*reopened)->RecordResizeEnd(/*done=*/false, 1).ok());
  ASSERT_TRUE((*reopened)->RecordEnd(JobOutcome::kFinished, "done").ok());
  auto later = all.ReadNew();
  ASSERT_EQ(later.size(), 2u);
  // A resize_end says how the resize ended, at which generation, and which resize it was.
  EXPECT_EQ(later[0].type, "resize_end");
  const json end = json::parse(later[0].data);
  EXPECT_EQ(end.value("outcome", ""), "failed") << later[0].data;
  EXPECT_EQ(end.value("generation", uint64_t{0}), 1u) << later[0].data;
  EXPECT_EQ(end.value("resize", uint64_t{0}), events[1].id) << later[0].data;
  EXPECT_EQ(later[1].type, "job_end");
  auto resumed = JournalEventReader(path, events[1].id).ReadNew();
  ASSERT_EQ(resumed.size(), 4u);
  EXPECT_EQ(resumed[0].id, events[2].id);
  EXPECT_EQ(resumed[3].id, later[1].id);
  // Resumed after its resize_accepted, the reader still names the resize it ended.
  EXPECT_EQ(json::parse(resumed[2].data).value("resize", uint64_t{0}), events[1].id);

  // A torn tail (a record still being written) is not read until it is whole.
  { std::ofstream(path, std::ios::app | std::ios::binary) << std::string("EJR1\x10\0\0\0", 8); }
  EXPECT_TRUE(all.ReadNew().empty());
  std::filesystem::remove_all(tmpl);
}

// GET /v1/events on a second API over the same coordinator, streaming a journal the test writes.
TEST_F(HttpServerTest, EventsStreamAsServerSentEventsAndResumeFromLastEventId) {
  const std::string path = dir_ + "/events.bin";
  auto journal = Journal::Create(path);
  ASSERT_TRUE(journal.ok());
  WriteJournal(journal->get());
  HttpOptions h;
  h.admin_token = admin_;
  h.read_token = read_;
  h.coordinator.address = coordinator_.server->address();
  h.coordinator.server_public = coordinator_.info.server_public;
  h.coordinator.client_keys = coordinator_.info.admin;
  h.coordinator.job = "web";
  h.coordinator.sender = "admin-test";
  h.events = [path](uint64_t after) -> std::unique_ptr<JobEventSource> {
    return std::make_unique<JournalEventReader>(path, after);
  };
  h.max_event_streams = 2;
  h.event_keepalive = std::chrono::milliseconds(100);
  auto api = HttpServer::Start(h);
  ASSERT_TRUE(api.ok()) << api.status();
  httplib::Client c("127.0.0.1", (*api)->port());
  c.set_read_timeout(20, 0);

  EXPECT_EQ(c.Get("/v1/events")->status, 401);
  EXPECT_EQ(
      c.Get("/v1/events", {{"Authorization", "Bearer " + read_}, {"Last-Event-ID", "x1"}})->status,
      400);

  int status = 0;
  auto all = testing::ReadSseEvents(
      c, read_, "", [](const auto& got) { return got.size() == 4; }, &status);
  EXPECT_EQ(status, 200);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].type, "generation");
  EXPECT_EQ(all[3].type, "checkpoint");
  EXPECT_EQ(json::parse(all[3].data)["dir"], "/ckpt/10");
  // Resuming after the second event: the third comes first, then one appended live (once the
  // stream delivered the resumed ones).
  auto resumed = testing::ReadSseEvents(c, read_, std::to_string(all[1].id), [&](const auto& got) {
    if (got.back().id == all[3].id) {
      EXPECT_TRUE((*journal)->RecordEnd(JobOutcome::kFinished, "done").ok());
    }
    return got.size() == 3;
  });
  ASSERT_EQ(resumed.size(), 3u);
  EXPECT_EQ(resumed[0], all[2]);
  EXPECT_EQ(resumed[1], all[3]);
  EXPECT_EQ(resumed[2].type, "job_end");
  // /metrics counts the journal's events: what the status does not carry (checkpoints).
  auto metrics = c.Get("/metrics", Bearer(read_));
  ASSERT_TRUE(metrics);
  for (const char* line :
       {"elastra_events_total{type=\"checkpoint\"} 1\n",
        "elastra_events_total{type=\"generation\"} 1\n",
        "elastra_events_total{type=\"job_end\"} 1\n", "elastra_last_checkpoint_step 10\n"}) {
    EXPECT_NE(metrics->body.find(line), std::string::npos) << line << metrics->body;
  }
  (*api)->Stop();
}

}  // namespace
}  // namespace elastra::http
