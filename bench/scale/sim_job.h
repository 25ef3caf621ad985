// The simulated job: workers, agents (one per host of JobModel::host_size workers) and an admin
// client that speak the real protocol (protocol/messages.h, encoded with the real codec) to a
// SimCoordinator, as the real ones do:
//   worker   worker/reconfiguration_loop.cc: Join (10 s timeout), a Heartbeat every interval the
//            JoinReply names, the per-step pause agreement, PausedReport after the agreed step,
//            PausedReport(failed) the moment a RecoverRequest lands (the I/O thread), each with
//            the health of the worker's dp, pp and tp groups (worker/group_gate.h: intact at a
//            step's end, built in the generation it runs, as many collectives as its peers, every
//            pipeline message received), a FailureReport from the ranks whose collective broke,
//            exit on Shutdown; told to stay standby (NewGeneration::standby), it parks: joins
//            again and asks for the job's status about once a second;
//            worker/generation_builder.cc + group_building.cc: on NewGeneration, the Gloo world's
//            rendezvous on the coordinator's key-value store (collectives/gloo/gloo_mesh.h: one
//            KvSetAndGet per rank, setting its address record, the host and a port per build
//            peer r +- 2^k mod N in parts of 4 pairs, and reading from each peer's record the
//            part holding its pair, then connecting those 2 ceil(log2 N) pairs), NCCL's unique
//            id when NCCL starts afresh, then
//            GenerationReady; leave = true: exit 0.
//   agent    launch/run.cc: AgentRegister at start and every 2 s, ProcessExited for each exit,
//            starting workers on SpawnRequest.
//   admin    ResizeRequest{wait = true} and its two replies.
// What the processes do between messages takes modelled time (JobModel). The rendezvous is run
// for real by a sample of the ranks; each of their key-value requests is sent with the weight of
// the requests it stands for (docs/scale.md, "What it runs").
//
// Not thread-safe: the simulation's thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/scale/sim.h"
#include "protocol/messages.h"

namespace elastra::scale {

struct JobModel {
  int host_size = 8;              // workers per host (one agent each)
  SimTime join_spread_us = 1 * kSec;  // the launchers start the first workers over this window
  SimTime spawn_us = 2 * kSec;    // an agent starting a worker process until it sends Join
  SimTime step_us = 1 * kSec;     // one training step
  int commit_every = 10;          // WorkerOptions::commit_every
  SimTime commit_us = 100 * kMs;  // the in-memory commit before a PausedReport
  SimTime hop_us = 35;            // one message of the Gloo control world (the step agreement)
  SimTime connect_us_per_peer = 20;  // Gloo: one pair connected, per build peer, per rank
  SimTime nccl_init_us = 1 * kSec;   // a fresh NCCL world (beyond its unique-id exchange)
  SimTime nccl_shrink_us = 200 * kMs;  // ncclCommShrink / Split of the previous world
  SimTime transfer_us = 2 * kSec;  // the state reaching members that hold none (a grow)
  SimTime reap_us = 10 * kMs;      // an agent noticing its worker exited
  SimTime collective_timeout_us = 5 * kSec;  // a peer that vanished without a reset
  SimTime agent_register_us = 2 * kSec;
  // An agent's heartbeat (launch/agent.cc: ControlClient's, 200 ms) once WatchAgents is called,
  // which makes its host one a regrow may start workers on (HostInfo::heartbeats). 0: none, as an
  // agent older than agents' heartbeats (the scenario of scenario.h; the 3-D scenario's agents
  // heartbeat).
  SimTime agent_heartbeat_us = 0;
  SimTime kv_round_trip_us = 70;  // one key-value request of a rank not sampled, unloaded
  bool nccl = true;            // GPU job: a Gloo control world plus NCCL
  int rendezvous_sample = 32;  // ranks that run the rendezvous for real
  // Every rank writes its rendezvous keys for real (the others still read only the sampled
  // ranks' keys), so the store's 256 MiB bound applies as it would: a generation whose keys do
  // not fit fails to build.
  bool every_rank_sets = false;
  // Every worker serves its own rendezvous records (JoinRequest::rendezvous), as the real one
  // does: the world's address records go between build peers, not through the coordinator.
  // false: the coordinator's store carries them (a worker without a record server).
  bool peer_rendezvous = true;
  int tensors = 16;            // tensors in the state each worker registers
  // The state each worker registers instead (a 3-D job's, scenario_3d.h); empty: `tensors`
  // replicated tensors of 4096 x 4096, which every layout fits.
  StateSpec state;
  // JoinRequest::device_memory_bytes of every worker (0: unlimited).
  int64_t device_memory_bytes = 0;
  SimTime parked_status_us = 1 * kSec;  // a parked worker asks for the job's status this often
};

// What the admin heard about its resize.
struct ResizeOutcome {
  bool accepted = false;
  bool over = false;  // done or failed arrived
  proto::ResizePhase phase = proto::ResizePhase::kAccepted;
  int32_t workers = 0;
  std::string message;
  SimTime sent = 0, answered = 0;
};

class SimJob {
 public:
  SimJob(EventLoop* loop, SimCoordinator* coordinator, JobModel model, std::string job);
  ~SimJob();
  SimJob(const SimJob&) = delete;
  SimJob& operator=(const SimJob&) = delete;

  // Registers the agents of ceil(workers / host_size) hosts and starts `workers` workers "w0".. on
  // them over JobModel::join_spread_us.
  void Launch(int workers);
  // The agents start heartbeating (JobModel::agent_heartbeat_us; nothing when it is 0), which
  // lets the coordinator start workers on their hosts. The simulation starts the job's first
  // workers itself (Launch): watched before those join, the agents would be asked to start
  // initial_workers more (HostManager::MaybeStartFirstWorkers), named as Launch's are.
  void WatchAgents();
  // The admin asks for `workers` workers and waits for the outcome (resize()).
  void Resize(int workers);
  // `count` members (random) die; their agents report the exits (signal 9). Their ids.
  std::vector<std::string> KillMembers(int count);
  // A host whose workers all are members goes silent with its agent (no exit is reported). Its
  // name, or "" when there is none.
  std::string KillHost();
  // Starts `count` more workers ("spare0"..) on the host Launch left free, as `elastra run
  // --spares` does: they join and wait as standbys. Their ids.
  std::vector<std::string> AddSpares(int count);

  int joined() const { return joined_; }  // JoinReplies received
  SimTime last_join_reply() const { return last_join_reply_; }
  int join_failures() const { return join_failures_; }  // refused or timed out (the worker exits)
  const ResizeOutcome& resize() const { return resize_; }
  int build_failures() const { return build_failures_; }  // generations a worker could not build
  const std::string& first_build_error() const { return first_build_error_; }
  // Rendezvous bookkeeping for the report.
  int rendezvous_samples() const { return last_sample_; }
  // Workers told to stay standby that parked (joined again).
  int parked() const { return parked_; }

 private:
  enum class State { kStarting, kJoining, kStandby, kBuilding, kRunning, kWaiting, kLeft, kDead };
  // The collectives a group completes per training step, and the pipeline messages a stage sends
  // to each neighbour per step (micro-batches forward and back): what GroupHealth counts.
  static constexpr int64_t kTpCallsPerStep = 4, kDpCallsPerStep = 1, kPipelineMessagesPerStep = 8;
  struct KvOp {
    proto::MessageType type;
    std::string key;
    size_t value_bytes = 0;
    std::string value;  // when not value_bytes of zeros
    double weight = 1;
    // kKvSetAndGet: the keys set (each with its set_bytes, else value_bytes) and the keys read.
    std::vector<std::string> set_keys, get_keys;
    std::vector<size_t> set_bytes;
  };
  struct Worker {
    int index = 0;
    std::string id;
    int host = 0;
    int client = -1;
    State state = State::kStarting;
    uint64_t next_request = 1;
    uint64_t join_request = 0;
    SimTime hb_interval = 200 * kMs;
    uint64_t hb_token = 0;
    std::string hb_frame;
    int64_t hb_step = -2;
    uint64_t generation = 0;  // the generation it runs
    uint64_t answered_target = 0;
    uint64_t pause_target = 0;
    uint64_t building = 0;  // the generation it builds
    int rank = -1;
    Layout layout;         // of the generation it runs
    int layout_rank = -1;  // its rank in it
    int64_t step = 0;
    bool parked = false;  // told to stay standby: polls the job's status
    std::vector<int64_t> commits;
    SimTime received_at = 0;  // of the NewGeneration it builds
    // The rendezvous, when it is one of the sampled ranks.
    std::vector<KvOp> ops;
    size_t op = 0;
    uint64_t op_request = 0;
    bool sampled = false;  // its ops are the whole rendezvous (else only its own keys)
  };
  struct Agent {
    int host = 0;
    std::string name;
    int client = -1;
    bool alive = true;
    bool heartbeating = false;  // since WatchAgents
  };
  // One generation being built, as its members see it.
  struct Build {
    uint64_t generation = 0;
    // The fields every member's NewGeneration shares (each is addressed to its recipient: its
    // own entry and its transfers' peers), from the first one decoded.
    std::shared_ptr<const proto::NewGeneration> ng;
    int world = 0;
    std::vector<int> sample;  // ranks that run the rendezvous for real
    int samples_done = 0;
    int setters = 0, setters_done = 0;  // every_rank_sets: the ranks not sampled
    int received = 0;
    int ready = 0;
    bool fresh_nccl = true;
    bool transfer = false;
    bool done = false;  // the rendezvous completed
    std::vector<int> waiting;  // workers (indices) waiting for the rendezvous
    std::vector<int> members;  // workers (indices) by rank, as they receive it
  };
  struct Training {
    bool running = false;
    uint64_t generation = 0;
    std::vector<int> members;  // worker indices by rank
    int64_t step = 0;
    uint64_t token = 0;
  };

  int AddWorker(const std::string& id, int host);
  void StartWorker(int w);
  void OnWorkerFrame(int w, const Frame& frame);
  void OnAgentFrame(int a, const Frame& frame);
  void OnAdminFrame(const Frame& frame);
  void RegisterAgent(int a, uint64_t request_id);
  void AgentTick(int a);
  void AgentHeartbeat(int a);

  template <class T>
  void SendFrom(int w, proto::MessageType type, const T& payload, uint64_t request_id,
                double weight = 1);
  void Heartbeat(int w, uint64_t token);
  void Die(int w, int exit_code, int signal, bool reported);
  // Told to stay standby: joins again (ReconfigurationLoop::Park) and polls the job's status.
  void Park(int w);
  void PollStatus(int w, uint64_t token);
  // What worker `w` reports of its dp, pp and tp groups at a pause (none is the world).
  std::vector<proto::GroupHealth> GroupsOf(const Worker& x) const;

  void OnNewGeneration(int w, const Frame& frame);
  void Enter(int w, Build& b, int rank, bool has_state);
  void RunOp(int w);
  void OnKvReply(int w, const proto::Envelope& e);
  void SampleDone(int w, Build& b);
  void SetterDone(int w, Build& b);
  void MaybeFinishRendezvous(Build& b);
  void Ready(int w, uint64_t generation, double rebuild_ms, double transfer_ms);
  std::vector<KvOp> RendezvousOps(const Build& b, int rank) const;
  // Whether the members serve the world's address records (NewGeneration::build_peers).
  bool PeersServe(const Build& b) const;

  void StartTraining(Build& b);
  void StepEnd(uint64_t token);
  void Pause(int w, uint64_t target);
  void OnRecover(int w, const proto::Envelope& e);
  SimTime AgreementUs(int world) const;

  EventLoop* loop_;
  SimCoordinator* coordinator_;
  JobModel model_;
  std::string job_;
  StateSpec state_;
  std::vector<Worker> workers_;  // by index; a worker's client number is its own
  std::vector<Agent> agents_;
  int admin_ = -1;
  uint64_t admin_request_ = 0;
  ResizeOutcome resize_;
  std::map<uint64_t, Build> builds_;
  Training training_;
  int joined_ = 0;
  SimTime last_join_reply_ = 0;
  int join_failures_ = 0;
  int build_failures_ = 0;
  std::string first_build_error_;
  int last_sample_ = 0;
  int spares_ = 0;
  int parked_ = 0;
};

}  // namespace elastra::scale
