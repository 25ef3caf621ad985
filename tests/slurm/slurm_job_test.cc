// Elastra jobs as Slurm jobs on a real Slurm cluster (slurmctld, slurmd, munge) in network
// namespaces (testbed/slurm_cluster.h): train_mlp started through launch/slurm/elastra.sbatch,
// shrunk by Slurm (launch/slurm/elastra-shrink: drain, then `scontrol update`), grown by a second
// Slurm job that is then cancelled (its agents drain on Slurm's SIGTERM), and a node whose slurmd
// and agent are SIGKILLed. Each run is checked against `train_mlp --reference`: the same loss at
// every applied step and exact sample accounting, and each change against the job's history
// (planned generations for the shrink and grow, one failure round for the lost node).
//
// Skips with one line where namespaces or the Slurm packages are missing
// (ELASTRA_REQUIRE_SLURM=1 makes that a failure).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "testbed/slurm_cluster.h"
#include "tests/cluster/cluster_fixture.h"
#include "tests/integration/job_harness.h"

namespace elastra::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A bound on something that must happen (a job starting, a drain, a recovery, a job's end):
// generous, since the machine is shared; passing it is a failure, never a sleep.
constexpr seconds kEvent{90};
constexpr milliseconds kPoll{200};

std::vector<std::string> TrainArgs() {
  return {"--steps",        std::to_string(kUntilStopped),
          "--step-time-ms", "20",
          "--global-batch", "48",
          "--hidden",       "16",
          "--ffn",          "32",
          "--layers",       "2",
          "--commit-every", "5"};
}

std::string Trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  for (size_t n = 0; n <= lines && pos > 0; ++n) pos = text.rfind('\n', pos - 1);
  return pos == std::string::npos || pos == 0 ? text : text.substr(pos + 1);
}

int World(const nlohmann::json& status) {
  const auto& l = status.value("layout", nlohmann::json::object());
  return l.value("dp", 0) * l.value("pp", 0) * l.value("tp", 0);
}

std::vector<std::string> Reasons(const nlohmann::json& status) {
  std::vector<std::string> out;
  for (const auto& h : status.value("history", nlohmann::json::array())) {
    out.push_back(h.value("reason", std::string()));
  }
  return out;
}

std::string HostState(const nlohmann::json& status, const std::string& name) {
  for (const auto& h : status.value("hosts", nlohmann::json::array())) {
    if (h.value("name", std::string()) == name) return h.value("state", std::string());
  }
  return "";
}

class SlurmJobTest : public ClusterFixture<SlurmCluster> {
 protected:
  SlurmJobTest() : ClusterFixture("ELASTRA_REQUIRE_SLURM", "/tmp/elastra_slurm_job_") {}

  void MakeCluster(int nodes, int slurmd_timeout_s = 30) {
    SlurmCluster::Options o;
    o.nodes = nodes;
    o.kill_wait_s = 30;  // Slurm's default: the grace time an agent's drain has
    o.slurmd_timeout_s = slurmd_timeout_s;
    auto c = SlurmCluster::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = std::move(c).value();
  }

  std::string state_dir() const { return dir_ + "/state"; }
  std::string log_path() const { return dir_ + "/run.jsonl"; }

  std::map<std::string, std::string> Env() const { return {{"ELASTRA", ELASTRA_BINARY}}; }

  // sbatch -N nodes elastra.sbatch OPTIONS -- train_mlp ...; returns the job id.
  std::string Submit(int nodes, std::vector<std::string> options) {
    std::vector<std::string> argv = {"sbatch",
                                     "--parsable",
                                     "--chdir=" + dir_,
                                     "--output=" + dir_ + "/slurm-%j.out",
                                     "-N",
                                     std::to_string(nodes),
                                     ELASTRA_SOURCE_DIR "/launch/slurm/elastra.sbatch"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.insert(argv.end(),
                {"--", TRAIN_MLP_BINARY, "--log", log_path(), "--stop-file", dir_ + "/stop"});
    argv.insert(argv.end(), args_.begin(), args_.end());
    auto r = cluster_->Run(argv, seconds(60), Env());
    EXPECT_TRUE(r.ok() && r->exit_code == 0) << (r.ok() ? r->output : r.status().ToString());
    if (!r.ok()) return "";
    std::string id = Trim(r->output);
    id = id.substr(id.find_last_of('\n') + 1);
    jobs_.push_back(id);
    return id;
  }

  RunResult Elastra(std::vector<std::string> args) {
    args.insert(args.begin(), ELASTRA_BINARY);
    args.insert(args.end(), {"--state-dir", state_dir()});
    auto r = cluster_->Run(args, seconds(120), Env());
    return r.ok() ? *r : RunResult{-1, r.status().ToString()};
  }

  nlohmann::json JobStatus() {
    RunResult r = Elastra({"status", "--json"});
    if (r.exit_code != 0) return nlohmann::json::object();
    auto j = nlohmann::json::parse(r.output.substr(std::min(r.output.find('{'), r.output.size())),
                                   nullptr, false);
    return j.is_object() ? j : nlohmann::json::object();
  }

  // Polls until `pred` holds (true) or `timeout` passes (false).
  bool WaitUntil(const std::function<bool()>& pred, seconds timeout = kEvent) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (pred()) return true;
      std::this_thread::sleep_for(kPoll);
    }
    return false;
  }
  bool WaitForStatus(const std::function<bool(const nlohmann::json&)>& pred) {
    return WaitUntil([&] {
      auto j = JobStatus();
      return !j.empty() && pred(j);
    });
  }
  void TrainOn(int64_t steps) {
    const int64_t at = JobStatus().value("step", int64_t{0});
    ASSERT_TRUE(WaitForStatus([&](const nlohmann::json& j) {
      return j.value("step", int64_t{-1}) >= at + steps;
    })) << Logs();
  }

  // Starts the job on `nodes` nodes, one worker each, and waits until it trains.
  std::string StartJob(int nodes) {
    const std::string id = Submit(nodes, {"--state-dir", state_dir(), "--slots", "1"});
    EXPECT_TRUE(WaitForStatus([&](const nlohmann::json& j) {
      return World(j) == nodes && j.value("step", int64_t{-1}) >= 5;
    })) << Logs();
    return id;
  }

  // Stops training; waits for the Slurm job to complete with exit code 0 (the coordinator's) and
  // checks the run against the reference.
  void StopAndMatchReference(const std::string& job) {
    std::ofstream(dir_ + "/stop") << "stop\n";
    EXPECT_TRUE(WaitUntil([&] {
      const std::string s = cluster_->JobState(job);
      return s != "RUNNING" && s != "COMPLETING" && s != "PENDING";
    })) << Logs();
    EXPECT_EQ(cluster_->JobState(job), "COMPLETED") << Logs();
    ExpectStoppedLogMatchesReference(log_path(), dir_ + "/ref.jsonl", args_);
  }

  std::string Logs() {
    std::string out = cluster_ ? cluster_->Logs() : "";
    for (const std::string& id : jobs_) {
      out += "--- slurm-" + id + ".out\n" + Tail(ReadFile(dir_ + "/slurm-" + id + ".out"), 80);
    }
    return out;
  }

  std::vector<std::string> args_ = TrainArgs();
  std::vector<std::string> jobs_;
};

// 3 nodes; elastra-shrink takes host3 away: its drain is one planned generation (reason drain, no
// failure round), then `scontrol update` gives the node back to Slurm and the job runs on 2 nodes.
TEST_F(SlurmJobTest, AShrinkByScontrolDrainsTheNodeFirst) {
  MakeCluster(3);
  const std::string job = StartJob(3);
  ASSERT_FALSE(HasFailure());
  auto shrink = cluster_->Run({ELASTRA_SOURCE_DIR "/launch/slurm/elastra-shrink", "--state-dir",
                               state_dir(), "--job", job, "host3"},
                              kEvent, Env());
  ASSERT_TRUE(shrink.ok()) << shrink.status();
  ASSERT_EQ(shrink->exit_code, 0) << shrink->output << Logs();
  std::cout << "drain of host3: " << shrink->output;
  const size_t brace = std::min(shrink->output.find('{'), shrink->output.size());
  auto done = nlohmann::json::parse(
      shrink->output.substr(brace, shrink->output.find('\n', brace) - brace), nullptr, false);
  ASSERT_TRUE(done.is_object()) << shrink->output;
  EXPECT_EQ(done.value("phase", ""), "done") << shrink->output;
  EXPECT_EQ(cluster_->JobNodes(job), (std::vector<std::string>{"host1", "host2"})) << Logs();

  auto after = JobStatus();
  EXPECT_EQ(World(after), 2) << after.dump();
  EXPECT_EQ(HostState(after, "host3"), "drained") << after.dump();
  EXPECT_EQ(Reasons(after), (std::vector<std::string>{"start", "drain"})) << after.dump();
  TrainOn(5);
  StopAndMatchReference(job);
  // The drained node's agent exited 0: Slurm saw no failed task.
  EXPECT_EQ(ReadFile(dir_ + "/slurm-" + job + ".out").find("task 2: Exited with exit code"),
            std::string::npos)
      << Logs();
}

// What the drain-first shrink avoids: Slurm's own shrink (`scontrol update NumNodes=2`) SIGKILLs
// the task on the node it takes (host3) at once, with no SIGTERM and no grace time. The job loses
// the host in one failure round and goes on at 2.
TEST_F(SlurmJobTest, AShrinkByScontrolAloneIsAHostLossOfOneRound) {
  MakeCluster(3);
  const std::string job = StartJob(3);
  ASSERT_FALSE(HasFailure());
  auto update = cluster_->Run({"scontrol", "update", "JobId=" + job, "NumNodes=2"});
  ASSERT_TRUE(update.ok() && update->exit_code == 0) << (update.ok() ? update->output : "");
  EXPECT_EQ(cluster_->JobNodes(job), (std::vector<std::string>{"host1", "host2"})) << Logs();
  ASSERT_TRUE(WaitForStatus([](const nlohmann::json& j) {
    return World(j) == 2 && HostState(j, "host3") == "lost";
  })) << Logs();
  TrainOn(5);
  auto after = JobStatus();
  EXPECT_EQ(Reasons(after), (std::vector<std::string>{"start", "failure"})) << after.dump();
  StopAndMatchReference(job);
}

// A 2-node job grows by a second Slurm job of 2 nodes (its agents join with the join file and it
// resizes the job to 4); cancelling that job SIGTERMs its agents and workers, the agents drain
// their nodes within KillWait, and the job shrinks back to 2 in planned generations.
TEST_F(SlurmJobTest, ASecondJobGrowsItAndItsCancelShrinksItBackWithoutAFailure) {
  MakeCluster(4);
  const std::string job = StartJob(2);
  ASSERT_FALSE(HasFailure());
  const std::string grow = Submit(2, {"--join", state_dir(), "--slots", "1"});
  ASSERT_TRUE(WaitForStatus([](const nlohmann::json& j) {
    return World(j) == 4 && HostState(j, "host3") == "up" && HostState(j, "host4") == "up";
  })) << Logs();
  EXPECT_EQ(cluster_->JobNodes(grow), (std::vector<std::string>{"host3", "host4"}));
  TrainOn(5);

  ASSERT_TRUE(cluster_->Run({"scancel", grow}).ok());
  ASSERT_TRUE(WaitForStatus([](const nlohmann::json& j) {
    return World(j) == 2 && HostState(j, "host3") == "drained" &&
           HostState(j, "host4") == "drained";
  })) << Logs();
  ASSERT_TRUE(WaitUntil([&] { return cluster_->JobNodes(grow).empty(); })) << Logs();
  const std::string grow_out = ReadFile(dir_ + "/slurm-" + grow + ".out");
  EXPECT_NE(grow_out.find("drained: the job left host host3"), std::string::npos) << grow_out;
  EXPECT_NE(grow_out.find("drained: the job left host host4"), std::string::npos) << grow_out;
  auto after = JobStatus();
  EXPECT_EQ(Reasons(after), (std::vector<std::string>{"start", "resize", "drain", "drain"}))
      << after.dump();
  TrainOn(5);
  StopAndMatchReference(job);
}

// 3 nodes; host3's slurmd, agent and worker are SIGKILLed: one failure round, the job goes on at 2,
// and Slurm marks the node down.
TEST_F(SlurmJobTest, ANodeKilledIsOneFailureRoundAndSlurmMarksItDown) {
  MakeCluster(3, /*slurmd_timeout_s=*/6);
  const std::string job = StartJob(3);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(cluster_->hosts().KillHost(3).ok());
  ASSERT_TRUE(WaitForStatus([](const nlohmann::json& j) {
    return World(j) == 2 && HostState(j, "host3") == "lost";
  })) << Logs();
  TrainOn(5);
  auto after = JobStatus();
  EXPECT_EQ(Reasons(after), (std::vector<std::string>{"start", "failure"})) << after.dump();
  ASSERT_TRUE(WaitUntil([&] { return cluster_->NodeState(3).rfind("down", 0) == 0; })) << Logs();
  EXPECT_EQ(cluster_->JobNodes(job), (std::vector<std::string>{"host1", "host2"})) << Logs();
  StopAndMatchReference(job);
}

}  // namespace
}  // namespace elastra::testing
