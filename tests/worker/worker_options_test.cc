// WorkerOptions::FromEnvironment: every variable `elastra run` sets reaches its field, the defaults
// hold when one is unset, and a malformed value is refused with kInvalidArgument naming the
// variable. The environment is the process's: each test starts from one without ELASTRA_* and
// OMPI_* variables (so no mpirun bootstrap runs) and the fixture puts the old one back.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "protocol/keys.h"
#include "protocol/net.h"
#include "elastra/worker.h"
#include "worker/worker_internals.h"

extern char** environ;

namespace elastra {
namespace {

namespace fs = std::filesystem;

class WorkerOptionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      std::string name = kv.substr(0, kv.find('='));
      if (name.rfind("ELASTRA_", 0) == 0 || name.rfind("OMPI_", 0) == 0) {
        saved_[name] = kv.substr(kv.find('=') + 1);
      }
    }
    for (const auto& [name, value] : saved_) unsetenv(name.c_str());
    server_ = GenerateKeyPair().value();
    worker_ = GenerateKeyPair().value();
  }

  void TearDown() override {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string name = std::string(*e).substr(0, std::string(*e).find('='));
      if (name.rfind("ELASTRA_", 0) == 0 || name.rfind("OMPI_", 0) == 0) set_.push_back(name);
    }
    for (const auto& name : set_) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  void Set(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

  // The variables without which FromEnvironment refuses to start.
  void SetRequired() {
    Set("ELASTRA_COORDINATOR", "tcp://127.0.0.1:5555");
    Set("ELASTRA_SERVER_KEY", server_.public_key);
    Set("ELASTRA_WORKER_PUBLIC_KEY", worker_.public_key);
    Set("ELASTRA_WORKER_SECRET_KEY", worker_.secret_key);
  }

  // A state directory whose coordinator.json names `info`.
  std::string StateDir(const ConnectionInfo& info) {
    dir_ = fs::temp_directory_path() / ("worker_options_test." + std::to_string(getpid()));
    fs::create_directories(dir_);
    EXPECT_TRUE(WriteConnectionInfo(dir_ + "/coordinator.json", info).ok());
    return dir_;
  }

  // Expects FromEnvironment to refuse with kInvalidArgument, naming `variable`.
  void ExpectRefused(const std::string& variable) {
    auto o = WorkerOptions::FromEnvironment();
    ASSERT_FALSE(o.ok()) << variable;
    EXPECT_EQ(o.status().code(), StatusCode::kInvalidArgument) << o.status();
    EXPECT_NE(o.status().message().find(variable), std::string::npos) << o.status();
  }

  KeyPair server_, worker_;
  std::map<std::string, std::string> saved_;
  std::vector<std::string> set_;
  std::string dir_;
};

TEST_F(WorkerOptionsTest, EveryVariableReachesItsField) {
  SetRequired();
  Set("ELASTRA_JOB", "mlp");
  Set("ELASTRA_WORKER_ID", "w7");
  Set("ELASTRA_BIND_HOST", "10.0.0.7");
  Set("ELASTRA_DEVICE", "3");
  Set("ELASTRA_BACKEND", "nccl");
  Set("ELASTRA_COMMIT_EVERY", "4");
  Set("ELASTRA_COLLECTIVE_TIMEOUT_MS", "1234");
  Set("ELASTRA_DECISION_TIMEOUT_MS", "5678");
  Set("ELASTRA_HEARTBEAT_MS", "50");
  Set("ELASTRA_CHECKPOINT_DIR", "/tmp/ckpt");
  Set("ELASTRA_CHECKPOINT_EVERY", "25");
  Set("ELASTRA_TEST_APPLY_DELAY_MS", "300");
  Set("ELASTRA_TEST_FAIL_AFTER_MOVE", "w7:3");
  Set("ELASTRA_DEVICE_MEMORY_BYTES", "2147483648");
  auto o = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "tcp://127.0.0.1:5555");
  EXPECT_EQ(o->server_public_key, server_.public_key);
  EXPECT_EQ(o->public_key, worker_.public_key);
  EXPECT_EQ(o->secret_key, worker_.secret_key);
  EXPECT_EQ(o->job, "mlp");
  EXPECT_EQ(o->worker_id, "w7");
  EXPECT_EQ(o->bind_host, "10.0.0.7");
  EXPECT_EQ(o->device, 3);
  EXPECT_EQ(o->backend, Backend::kNccl);
  EXPECT_EQ(o->commit_every, 4);
  EXPECT_EQ(o->collective_timeout.count(), 1234);
  EXPECT_EQ(o->decision_timeout.count(), 5678);
  EXPECT_EQ(o->heartbeat_interval.count(), 50);
  EXPECT_EQ(o->checkpoint_dir, "/tmp/ckpt");
  EXPECT_EQ(o->checkpoint_every, 25);
  EXPECT_EQ(o->device_memory_bytes, int64_t{2} << 30);
  EXPECT_EQ(InternalsOf(*o).test_apply_delay.count(), 300);
  EXPECT_EQ(InternalsOf(*o).test_fail_after_move, "w7:3");
  EXPECT_FALSE(o->park_when_removed);
  EXPECT_EQ(InternalsOf(*o).mpi, nullptr);
}

TEST_F(WorkerOptionsTest, UnsetVariablesKeepTheDefaults) {
  SetRequired();
  auto o = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  const WorkerOptions d;
  EXPECT_EQ(o->job, d.job);
  EXPECT_EQ(o->bind_host, d.bind_host);
  EXPECT_EQ(o->device, -1);
  EXPECT_FALSE(o->backend.has_value());
  EXPECT_EQ(o->commit_every, d.commit_every);
  EXPECT_EQ(o->collective_timeout, d.collective_timeout);
  EXPECT_EQ(o->decision_timeout, d.decision_timeout);
  EXPECT_EQ(o->heartbeat_interval, d.heartbeat_interval);
  EXPECT_EQ(o->checkpoint_dir, "");
  EXPECT_EQ(o->checkpoint_every, 0);
  EXPECT_EQ(InternalsOf(*o).test_apply_delay.count(), 0);
  EXPECT_EQ(o->device_memory_bytes, 0) << "unlimited";
  EXPECT_EQ(o->local_rank, -1);
  // The worker id defaults to "<host>-<pid>", the host to this machine's name.
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(o->host, host);
  EXPECT_EQ(o->worker_id, std::string(host) + "-" + std::to_string(getpid()));
}

TEST_F(WorkerOptionsTest, HostComesFromTheAgent) {
  SetRequired();
  Set("ELASTRA_HOST", "node-b");
  auto o = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->host, "node-b");
  EXPECT_EQ(o->worker_id, "node-b-" + std::to_string(getpid()));
}

// Without ELASTRA_BIND_HOST a worker binds where the route to its coordinator starts: loopback for
// a coordinator on loopback, this host's address on the network the coordinator is reached by.
TEST_F(WorkerOptionsTest, BindHostDefaultsToTheRouteToTheCoordinator) {
  SetRequired();  // tcp://127.0.0.1:5555
  EXPECT_EQ(WorkerOptions::FromEnvironment()->bind_host, "127.0.0.1");
  Set("ELASTRA_COORDINATOR", "tcp://localhost:5555");
  EXPECT_EQ(WorkerOptions::FromEnvironment()->bind_host.rfind("127.", 0), 0u);
  for (const auto& i : LocalIpv4Interfaces()) {
    SCOPED_TRACE(i.name);
    Set("ELASTRA_COORDINATOR", "tcp://" + i.address + ":5555");
    EXPECT_EQ(WorkerOptions::FromEnvironment()->bind_host, i.address);
  }
  Set("ELASTRA_BIND_HOST", "10.0.0.7");
  EXPECT_EQ(WorkerOptions::FromEnvironment()->bind_host, "10.0.0.7");
  // A coordinator name that does not resolve: the connection will say so; the old default stays.
  unsetenv("ELASTRA_BIND_HOST");
  Set("ELASTRA_COORDINATOR", "tcp://no-such-host.invalid:5555");
  EXPECT_EQ(WorkerOptions::FromEnvironment()->bind_host, "127.0.0.1");
}

TEST_F(WorkerOptionsTest, BackendNames) {
  SetRequired();
  Set("ELASTRA_BACKEND", "gloo");
  EXPECT_EQ(WorkerOptions::FromEnvironment()->backend, Backend::kGloo);
  Set("ELASTRA_BACKEND", "auto");
  EXPECT_FALSE(WorkerOptions::FromEnvironment()->backend.has_value());
  Set("ELASTRA_BACKEND", "mpi");
  ExpectRefused("ELASTRA_BACKEND");
}

TEST_F(WorkerOptionsTest, MalformedNumbersAreRefusedNamingTheVariable) {
  for (const char* name :
       {"ELASTRA_DEVICE", "ELASTRA_COMMIT_EVERY", "ELASTRA_COLLECTIVE_TIMEOUT_MS",
        "ELASTRA_DECISION_TIMEOUT_MS", "ELASTRA_HEARTBEAT_MS", "ELASTRA_CHECKPOINT_EVERY",
        "ELASTRA_TEST_APPLY_DELAY_MS"}) {
    for (const char* bad : {"abc", "12x", "-1", " "}) {
      SCOPED_TRACE(std::string(name) + "='" + bad + "'");
      SetRequired();
      Set(name, bad);
      ExpectRefused(name);
      unsetenv(name);
    }
  }
}

TEST_F(WorkerOptionsTest, CommitEveryMustBePositive) {
  SetRequired();
  Set("ELASTRA_COMMIT_EVERY", "0");
  ExpectRefused("ELASTRA_COMMIT_EVERY");
}

TEST_F(WorkerOptionsTest, MissingOrMalformedConnectionIsRefused) {
  SetRequired();
  unsetenv("ELASTRA_COORDINATOR");
  ExpectRefused("ELASTRA_COORDINATOR");
  SetRequired();
  Set("ELASTRA_SERVER_KEY", "short");
  ExpectRefused("ELASTRA_SERVER_KEY");
  SetRequired();
  unsetenv("ELASTRA_SERVER_KEY");
  ExpectRefused("ELASTRA_SERVER_KEY");
  SetRequired();
  Set("ELASTRA_WORKER_PUBLIC_KEY", server_.public_key.substr(1));
  ExpectRefused("ELASTRA_WORKER_PUBLIC_KEY");
  SetRequired();
  unsetenv("ELASTRA_WORKER_SECRET_KEY");
  ExpectRefused("ELASTRA_WORKER_SECRET_KEY");
}

TEST_F(WorkerOptionsTest, LocalDeviceNeedsMpirun) {
  SetRequired();
  Set("ELASTRA_DEVICE", "local");
  ExpectRefused("ELASTRA_DEVICE");
}

TEST_F(WorkerOptionsTest, StateDirectoryNamesTheCoordinatorAndItsKeys) {
  ConnectionInfo info;
  info.address = "tcp://127.0.0.1:6000";
  info.job = "from-file";
  info.server_public = server_.public_key;
  info.admin = GenerateKeyPair().value();
  info.worker = worker_;
  Set("ELASTRA_STATE_DIR", StateDir(info));
  Set("ELASTRA_JOB", "from-env");
  auto o = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, info.address);
  EXPECT_EQ(o->job, "from-file");  // the coordinator's job, whatever ELASTRA_JOB says
  EXPECT_EQ(o->server_public_key, server_.public_key);
  EXPECT_EQ(o->public_key, worker_.public_key);
  EXPECT_EQ(o->secret_key, worker_.secret_key);

  // ELASTRA_COORDINATOR without the server key (mpirun ranks joining a named coordinator): the
  // address is the variable's, the keys the directory's; the worker's own keys win.
  KeyPair own = GenerateKeyPair().value();
  Set("ELASTRA_COORDINATOR", "tcp://10.0.0.1:7000");
  Set("ELASTRA_WORKER_PUBLIC_KEY", own.public_key);
  Set("ELASTRA_WORKER_SECRET_KEY", own.secret_key);
  o = WorkerOptions::FromEnvironment();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->coordinator, "tcp://10.0.0.1:7000");
  EXPECT_EQ(o->server_public_key, server_.public_key);
  EXPECT_EQ(o->public_key, own.public_key);
  EXPECT_EQ(o->secret_key, own.secret_key);
}

TEST_F(WorkerOptionsTest, StateDirectoryWithoutCoordinatorFileIsNamed) {
  Set("ELASTRA_STATE_DIR", "/nonexistent/elastra-state");
  auto o = WorkerOptions::FromEnvironment();
  ASSERT_FALSE(o.ok());
  EXPECT_NE(o.status().message().find("ELASTRA_STATE_DIR=/nonexistent/elastra-state"),
            std::string::npos)
      << o.status();
}

}  // namespace
}  // namespace elastra
