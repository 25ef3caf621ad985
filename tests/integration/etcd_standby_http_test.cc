// End-to-end: the HTTP of a standby coordinator (docs/ha.md, "A standby's HTTP"). Two
// `elastra coordinator --etcd --http` of one job on a single-member etcd the test starts, each on
// a port of its own: the leader's /healthz says "role":"leader"; the standby's says
// "role":"standby" and names the leader as the leader key does (its HTTP URL and the control
// address of its join.json), and the standby refuses every other request with 503 and the
// leader's address. When the leader is SIGKILLed, the standby closes its standby server and
// serves the job's API on the same port as the leader. Skipped when there is no etcd binary
// (a failure where ELASTRA_REQUIRE_ETCD is set).
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/etcd_job_fixture.h"

namespace elastra::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::seconds;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// `elastra coordinator` with `args`, its output appended to `log`, in a process group of its own.
pid_t StartCoordinatorProcess(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), {ELASTRA_BINARY, "coordinator"});
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    FILE* f = std::freopen(log.c_str(), "a", stderr);
    (void)f;
    dup2(fileno(stderr), fileno(stdout));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

struct Answer {
  int status = 0;              // 0: no answer (nothing listening)
  json body = json::object();  // empty when the body is no JSON object
};

Answer Get(int port, const std::string& path) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2);
  client.set_read_timeout(10);
  auto res = client.Get(path);
  if (!res) return {};
  json body = json::parse(res->body, nullptr, false);
  return {res->status, body.is_object() ? body : json::object()};
}

// Polls GET `path` until `pred` holds for the answer; the last answer either way.
Answer PollGet(int port, const std::string& path, const std::function<bool(const Answer&)>& pred,
               seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Answer a = Get(port, path);
  while (!pred(a) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    a = Get(port, path);
  }
  return a;
}

class EtcdStandbyHttp : public EtcdJobTest {
 protected:
  EtcdStandbyHttp() : EtcdJobTest("/tmp/elastra_etcd_http_XXXXXX", {&leader_, &standby_}) {}

  pid_t Coordinator(const std::string& name, int http_port) {
    return StartCoordinatorProcess(
        {"--state-dir", dir_ + "/" + name, "--workers", "1", "--job", "sbjob", "--etcd",
         etcd_.url(), "--leader-ttl", "1", "--http", "127.0.0.1:" + std::to_string(http_port)},
        dir_ + "/" + name + ".log");
  }

  bool WaitForLog(const std::string& name, const std::string& text) {
    const auto deadline = std::chrono::steady_clock::now() + seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ReadText(dir_ + "/" + name + ".log").find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string Logs() const {
    return "--- a.log\n" + ReadText(dir_ + "/a.log") + "--- b.log\n" + ReadText(dir_ + "/b.log");
  }

  pid_t leader_ = -1;
  pid_t standby_ = -1;
};

TEST_F(EtcdStandbyHttp, AStandbyAnswersHealthzWithTheLeaderAndRefusesTheRestUntilItLeads) {
  const int a_port = journal::EtcdServer::FreePort();
  int b_port = journal::EtcdServer::FreePort();
  while (b_port == a_port) b_port = journal::EtcdServer::FreePort();
  const std::string a_url = "http://127.0.0.1:" + std::to_string(a_port);
  leader_ = Coordinator("a", a_port);
  ASSERT_TRUE(WaitForLog("a", "{\"address\"")) << Logs();
  const std::string control =
      json::parse(ReadText(dir_ + "/a/join.json")).value("address", std::string());
  ASSERT_FALSE(control.empty());

  // The leader's /healthz: what it answered before, and its role.
  const Answer a_health = Get(a_port, "/healthz");
  EXPECT_EQ(a_health.status, 200);
  EXPECT_EQ(a_health.body.value("ok", false), true) << a_health.body.dump();
  EXPECT_EQ(a_health.body.value("role", ""), "leader") << a_health.body.dump();

  standby_ = Coordinator("b", b_port);
  ASSERT_TRUE(WaitForLog("b", "standby: job sbjob is led by " + a_url)) << Logs();
  EXPECT_NE(ReadText(dir_ + "/b.log").find("\"role\":\"standby\""), std::string::npos) << Logs();

  // The standby's /healthz names the leader as the leader key does: A's HTTP URL, and the control
  // address A announced once bound (the same as its join.json).
  const Answer b_health = PollGet(
      b_port, "/healthz",
      [](const Answer& a) {
        return a.status == 200 && a.body.is_object() && a.body.contains("leader") &&
               a.body["leader"].is_object() && a.body["leader"].contains("control");
      },
      seconds(60));
  ASSERT_EQ(b_health.status, 200) << Logs();
  ASSERT_TRUE(b_health.body.is_object());
  EXPECT_EQ(b_health.body.value("status", ""), "ok") << b_health.body.dump();
  EXPECT_EQ(b_health.body.value("role", ""), "standby") << b_health.body.dump();
  EXPECT_EQ(b_health.body.value("job", ""), "sbjob") << b_health.body.dump();
  const json leader = b_health.body.value("leader", json::object());
  EXPECT_EQ(leader.value("http", ""), a_url) << b_health.body.dump();
  EXPECT_EQ(leader.value("control", ""), control) << b_health.body.dump();
  EXPECT_EQ(leader.value("pid", int64_t{-1}), static_cast<int64_t>(leader_)) << leader.dump();

  // Every other route is refused with where to go.
  const Answer refused = Get(b_port, "/v1/job");
  EXPECT_EQ(refused.status, 503);
  ASSERT_TRUE(refused.body.is_object());
  EXPECT_NE(refused.body.value("error", "").find("standby: job sbjob is led by " + a_url),
            std::string::npos)
      << refused.body.dump();
  EXPECT_EQ(refused.body.value("leader", json::object()).value("http", ""), a_url);
  EXPECT_FALSE(fs::exists(dir_ + "/b/coordinator.json"));

  // The leader's host is gone: the standby leads once the lease expired, and its /healthz (now
  // the job's API, on the same port) says so.
  ASSERT_EQ(kill(-leader_, SIGKILL), 0);
  waitpid(leader_, nullptr, 0);
  leader_ = -1;
  const Answer led = PollGet(
      b_port, "/healthz",
      [](const Answer& a) {
        return a.status == 200 && a.body.is_object() && a.body.value("role", "") == "leader";
      },
      seconds(120));
  EXPECT_EQ(led.status, 200) << Logs();
  EXPECT_EQ(led.body.value("role", ""), "leader") << led.body.dump() << Logs();
  EXPECT_EQ(led.body.value("ok", false), true) << led.body.dump();
  EXPECT_TRUE(WaitForLog("b", "leading job sbjob")) << Logs();
  // The job's API, with its tokens: no token is 401, not the standby's 503.
  EXPECT_EQ(Get(b_port, "/v1/job").status, 401) << Logs();
}

}  // namespace
}  // namespace elastra::testing
