// The embedded coordinator's files: join.json beside coordinator.json, the advertised address,
// and what a restart binds and publishes.
#include "launch/embedded.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace elastra::launch {
namespace {



std::string FakeIp() { return "10.1.2.3"; }

TEST(AdvertisedAddressTest, TheBoundAddressUnlessAWildcardOrAnAdvertiseSaysOtherwise) {
  EXPECT_EQ(*AdvertisedAddress("tcp://127.0.0.1:4000", ""), "tcp://127.0.0.1:4000");
  EXPECT_EQ(*AdvertisedAddress("tcp://0.0.0.0:4000", "", &FakeIp), "tcp://10.1.2.3:4000");
  EXPECT_EQ(*AdvertisedAddress("tcp://0.0.0.0:4000", "node7"), "tcp://node7:4000");
  EXPECT_EQ(*AdvertisedAddress("tcp://0.0.0.0:4000", "node7:5000"), "tcp://node7:5000");
  EXPECT_EQ(*AdvertisedAddress("tcp://0.0.0.0:4000", "tcp://gw:6000"), "tcp://gw:6000");
  EXPECT_EQ(AdvertisedAddress("tcp://0.0.0.0:4000", "tcp://").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(AdvertisedAddress("ipc:///tmp/x", "").status().code(), StatusCode::kInvalidArgument);
  const std::string ip = FirstNonLoopbackIPv4();
  EXPECT_FALSE(ip.empty());
  EXPECT_TRUE(ip == "127.0.0.1" || ip.rfind("127.", 0) != 0) << ip;
}

TEST(AdvertisedAddressTest, ARestartBindsTheJournaledHostOnThePublishedPort) {
  EXPECT_EQ(RestartBindAddress("tcp://0.0.0.0:0", "tcp://10.1.2.3:4000"), "tcp://0.0.0.0:4000");
  EXPECT_EQ(RestartBindAddress("tcp://127.0.0.1:0", "tcp://127.0.0.1:4000"),
            "tcp://127.0.0.1:4000");
  EXPECT_EQ(RestartBindAddress("tcp://0.0.0.0:7000", "tcp://gw:9000"), "tcp://0.0.0.0:7000");
  EXPECT_EQ(RestartBindAddress("", "tcp://127.0.0.1:4000"), "tcp://127.0.0.1:4000")
      << "a journal from before the bind was recorded";
}

class EmbeddedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastra-embedded-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static int Mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }
  std::string dir_;
};

TEST_F(EmbeddedTest, TheJoinFileHoldsTheWorkerKeysOnlyAndARestartKeepsBothFiles) {
  EmbeddedOptions o;
  o.state_dir = dir_;
  o.job = "j";
  o.bind = "tcp://0.0.0.0:0";
  o.advertise = "127.0.0.1";
  std::string published, worker_public;
  {
    auto e = StartEmbeddedCoordinator(o);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(e->server->address().rfind("tcp://0.0.0.0:", 0), 0u) << e->server->address();
    published = e->info.address;
    EXPECT_EQ(published.rfind("tcp://127.0.0.1:", 0), 0u) << published;
    EXPECT_EQ(published.substr(published.rfind(':')),
              e->server->address().substr(e->server->address().rfind(':')));
    EXPECT_EQ(Mode(dir_ + "/join.json"), 0600);
    EXPECT_EQ(Mode(dir_ + "/coordinator.json"), 0600);
    auto join = ReadJoinFile(dir_ + "/join.json");
    ASSERT_TRUE(join.ok()) << join.status();
    auto info = ReadConnectionInfo(dir_ + "/coordinator.json");
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(join->address, published);
    EXPECT_EQ(info->address, published);
    EXPECT_EQ(join->job, "j");
    EXPECT_EQ(join->server_public, info->server_public);
    EXPECT_EQ(join->worker.public_key, info->worker.public_key);
    EXPECT_EQ(join->worker.secret_key, info->worker.secret_key);
    std::ifstream in(dir_ + "/join.json");
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text.find(info->admin.secret_key), std::string::npos);
    EXPECT_EQ(text.find(info->admin.public_key), std::string::npos);
    worker_public = info->worker.public_key;
    e->server->Stop();
  }
  // The restart binds every interface again on the same port and publishes the same address.
  EmbeddedOptions r;
  r.state_dir = dir_;
  r.restart = true;
  auto e = StartEmbeddedCoordinator(r);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->server->address().rfind("tcp://0.0.0.0:", 0), 0u) << e->server->address();
  EXPECT_EQ(e->info.address, published);
  auto join = ReadJoinFile(dir_ + "/join.json");
  ASSERT_TRUE(join.ok());
  EXPECT_EQ(join->address, published);
  EXPECT_EQ(join->worker.public_key, worker_public);
  e->server->Stop();
}

TEST_F(EmbeddedTest, ALoopbackBindPublishesItself) {
  EmbeddedOptions o;
  o.state_dir = dir_;
  auto e = StartEmbeddedCoordinator(o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->info.address, e->server->address());
  EXPECT_EQ(ReadJoinFile(dir_ + "/join.json")->address, e->server->address());
  e->server->Stop();
}

}  // namespace
}  // namespace elastra::launch
